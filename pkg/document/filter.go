package document

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Outcome is what became of one watch event; it labels
// reverser_watch_events_total.
type Outcome string

// Outcomes of watch events.
const (
	OutcomeMirrored         Outcome = "mirrored"
	OutcomeUnchanged        Outcome = "unchanged"
	OutcomeClusterGenerated Outcome = "cluster_generated"
	OutcomeSecretSkipped    Outcome = "secret_skipped"
	OutcomeInvalid          Outcome = "invalid"
)

// RootCAConfigMap is written into every namespace by the cluster, holds that
// one cluster's CA, and is overwritten if edited: never mirrored.
const RootCAConfigMap = "kube-root-ca.crt"

// SecretsResource is the resource whose documents are only ever written
// encrypted.
var SecretsResource = schema.GroupResource{Resource: "secrets"}

// Secrets says what a stream does with Secrets: they are only ever written
// encrypted, which comes with GitTarget.spec.encryption.
type Secrets bool

// What streams do with Secrets.
const (
	// SkipSecrets never hands a Secret on.
	SkipSecrets Secrets = false
	// SealSecrets hands them on marked Change.Secret, for the sink to
	// encrypt before it keeps them.
	SealSecrets Secrets = true
)

// serviceAccountToken is the type of the Secrets the cluster fills with a
// ServiceAccount's token: valid in that one cluster only.
const serviceAccountToken = "kubernetes.io/service-account-token"

// Skip says whether an object is never written, and why.
func Skip(gr schema.GroupResource, obj *unstructured.Unstructured, secrets Secrets) (Outcome, bool) {
	switch {
	case gr == schema.GroupResource{Resource: "configmaps"} && obj.GetName() == RootCAConfigMap:
		return OutcomeClusterGenerated, true
	case gr == SecretsResource && obj.Object["type"] == serviceAccountToken:
		return OutcomeClusterGenerated, true
	case gr == SecretsResource && secrets == SkipSecrets:
		return OutcomeSecretSkipped, true
	}
	return "", false
}

// NeverMirrored lists resources the default policy leaves out even when a
// rule's wildcard matches them: runtime records, not configuration.
var NeverMirrored = map[schema.GroupResource]bool{
	{Group: "", Resource: "events"}:                                                  true,
	{Group: "events.k8s.io", Resource: "events"}:                                     true,
	{Group: "coordination.k8s.io", Resource: "leases"}:                               true,
	{Group: "", Resource: "endpoints"}:                                               true,
	{Group: "discovery.k8s.io", Resource: "endpointslices"}:                          true,
	{Group: "", Resource: "pods"}:                                                    true,
	{Group: "", Resource: "nodes"}:                                                   true,
	{Group: "", Resource: "componentstatuses"}:                                       true,
	{Group: "apps", Resource: "replicasets"}:                                         true,
	{Group: "apps", Resource: "controllerrevisions"}:                                 true,
	{Group: "batch", Resource: "jobs"}:                                               true,
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:                       true,
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:                true,
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}:           true,
	{Group: "metrics.k8s.io", Resource: "pods"}:                                      true,
	{Group: "metrics.k8s.io", Resource: "nodes"}:                                     true,
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "flowschemas"}:                 true,
	{Group: "flowcontrol.apiserver.k8s.io", Resource: "prioritylevelconfigurations"}: true,
	{Group: "resource.k8s.io", Resource: "resourceslices"}:                           true,
	{Group: "storage.k8s.io", Resource: "volumeattachments"}:                         true,
	{Group: "storage.k8s.io", Resource: "csinodes"}:                                  true,
	{Group: "internal.apiserver.k8s.io", Resource: "storageversions"}:                true,
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:                       true,
}

// NeverMirroredGroups are API groups left out entirely: our own objects
// (CommitRequests above all) describe Reverser, not the workload.
var NeverMirroredGroups = map[string]bool{"reverser.dev": true}

// Mirrorable says whether the default policy allows a resource at all.
func Mirrorable(gr schema.GroupResource) bool {
	return !NeverMirrored[gr] && !NeverMirroredGroups[gr.Group]
}
