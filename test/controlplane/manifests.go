package controlplane

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// AuditSecret holds the audit webhook's token in ReverserNamespace, key "token".
const AuditSecret = "audit-local"

// AuditCASecret holds the CA of the controllers' audit certificates, as
// artifacts/deploy names it.
const AuditCASecret = "reverser-audit-ca"

// namespaceManifests are what every local cluster has: the namespaces, the
// token kube-apiserver's audit webhook presents on /audit/local (the
// KubeProvider "local" names it in spec.audit.bearerTokenSecretRef), and
// the audit CA Secret (--audit-ca-secret), made before kube-apiserver
// started since its webhook kubeconfig trusts that CA: as an admin who
// brings the CA does.
func namespaceManifests(f *configFiles) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + ReverserNamespace + `}
---
apiVersion: v1
kind: Secret
metadata: {name: ` + AuditSecret + `, namespace: ` + ReverserNamespace + `}
stringData: {token: "` + f.auditToken + `"}
---
apiVersion: v1
kind: Secret
metadata: {name: ` + AuditCASecret + `, namespace: ` + ReverserNamespace + `}
data:
  ca.crt: ` + base64.StdEncoding.EncodeToString(f.reverserCAPEM) + `
  ca.key: ` + base64.StdEncoding.EncodeToString(f.reverserCAKeyPEM) + `
---
apiVersion: v1
kind: Namespace
metadata: {name: ` + DemoNamespace + `}
`
}

// bootstrapManifests are what the local cluster needs before
// reverser-apiserver starts: the RBAC it delegates with, the example save
// permissions, the ExternalName Service the APIService points at (a
// loopback address is not a valid Endpoint), and the selector-less audit
// Service whose EndpointSlice the leading controller writes.
func bootstrapManifests(p ports) string {
	return `# The admin's certificate is system:masters, a group Reverser never
# counts when it checks a rule again: the admin holds cluster-admin by
# name too, as an admin's own account would.
` + Binding("reverser-local-admin", "", "ClusterRole", "cluster-admin", "User", UserAdmin) + `---
apiVersion: v1
kind: Service
metadata: {name: reverser-audit, namespace: ` + ReverserNamespace + `}
spec:
  ports:
  - {name: https, port: 443, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: reverser-apiserver, namespace: ` + ReverserNamespace + `}
spec:
  type: ExternalName
  externalName: localhost
  ports:
  - {name: https, port: ` + strconv.Itoa(p.reverserAPI) + `, protocol: TCP}
---
` + Binding("reverser-apiserver:system:auth-delegator", "", "ClusterRole", "system:auth-delegator", "User", "reverser-apiserver") + `---
` + Binding("reverser-apiserver:auth-reader", "kube-system", "Role", "extension-apiserver-authentication-reader", "User", "reverser-apiserver") + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reverser-apiserver}
rules:
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
- apiGroups: [admissionregistration.k8s.io]
  resources: [mutatingwebhookconfigurations, validatingwebhookconfigurations, validatingadmissionpolicies,
    validatingadmissionpolicybindings, mutatingadmissionpolicies, mutatingadmissionpolicybindings]
  verbs: [get, list, watch]
- apiGroups: [flowcontrol.apiserver.k8s.io]
  resources: [prioritylevelconfigurations, flowschemas]
  verbs: [get, list, watch]
# --serving-ca-secret and --apiservice (the HA plane).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
- apiGroups: [apiregistration.k8s.io]
  resources: [apiservices]
  verbs: [get, patch]
---
` + Binding("reverser-apiserver", "", "ClusterRole", "reverser-apiserver", "User", "reverser-apiserver") + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reverser-controller}
rules:
- apiGroups: [reverser.dev]
  resources: ["*"]
  verbs: [get, list, watch, update, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, create, update, delete]
# Rules and saves are checked again for the users who authorised them.
- apiGroups: [authorization.k8s.io]
  resources: [subjectaccessreviews]
  verbs: [create]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: ["*"]
  resources: ["*"]
  verbs: [get, list, watch]
# FluxClaims: the schedules of the Kustomizations and GitRepositories held.
- apiGroups: [kustomize.toolkit.fluxcd.io, source.toolkit.fluxcd.io]
  resources: [kustomizations, gitrepositories]
  verbs: [patch]
# ArgoCDClaims: the automated sync of the Applications held, and their syncs.
- apiGroups: [argoproj.io]
  resources: [applications]
  verbs: [patch]
---
` + Binding("reverser-controller", "", "ClusterRole", "reverser-controller", "User", "reverser-controller") + `---
# KubeProviders' Secrets (kubeconfigs, audit tokens) live here only; the
# controller keeps them in an informer cache. It creates its digest key
# for sealed Secrets here (--sops-digest-key-secret).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reverser-controller-secrets, namespace: ` + ReverserNamespace + `}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create]
---
` + Binding("reverser-controller-secrets", ReverserNamespace, "Role", "reverser-controller-secrets", "User", "reverser-controller") + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reverser-user}
rules:
- apiGroups: [reverser.dev]
  resources: ["*"]
  verbs: [get, list, watch]
- apiGroups: [reverser.dev]
  resources: [commitrequests]
  verbs: [create, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reverser-saver}
rules:
- apiGroups: [reverser.dev]
  resources: [gittargets]
  verbs: [save]
---
` + Binding("reverser-user:devs", "", "ClusterRole", "reverser-user", "Group", GroupDevs) + `---
` + Binding("reverser-saver:alice", "", "ClusterRole", "reverser-saver", "User", UserAlice)
}

// Binding is the YAML of a ClusterRoleBinding (namespace "") or a
// RoleBinding of subjects of one kind to a role.
func Binding(name, namespace, roleKind, role, subjectKind string, subjects ...string) string {
	kind, meta := "ClusterRoleBinding", fmt.Sprintf("{name: %q}", name)
	if namespace != "" {
		kind, meta = "RoleBinding", fmt.Sprintf("{name: %q, namespace: %s}", name, namespace)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: rbac.authorization.k8s.io/v1\nkind: %s\nmetadata: %s\n"+
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: %s, name: %q}\nsubjects:\n", kind, meta, roleKind, role)
	for _, s := range subjects {
		fmt.Fprintf(&b, "- {apiGroup: rbac.authorization.k8s.io, kind: %s, name: %q}\n", subjectKind, s)
	}
	return b.String()
}
