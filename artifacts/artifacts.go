// Package artifacts holds the files users install, embedded so that the
// test control plane runs kube-apiserver with the very audit policy the
// install guide gives users.
package artifacts

import _ "embed"

// AuditPolicy is deploy/audit/policy.yaml.
//
//go:embed deploy/audit/policy.yaml
var AuditPolicy string
