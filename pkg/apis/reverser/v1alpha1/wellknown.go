package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// VerbSave is the authorization verb a requester needs on a GitTarget to
// save it (CommitRequest).
const VerbSave = "save"

// Annotations Reverser writes on objects it does not serve, read back by
// its controller and by people; kept across API versions (UPGRADING.md).
const (
	// SOPSDigestAnnotation holds, on a sealed Secret's document in Git, a
	// keyed digest of its plaintext bound to its ciphertext (package seal).
	SOPSDigestAnnotation = "reverser.dev/sops-digest"
	// ClaimedByAnnotation lists, comma-separated, the claims
	// ("namespace/name") holding an applier object's schedule. A
	// GitRepository may be held by the claims of several Kustomizations.
	ClaimedByAnnotation = "reverser.dev/claimed-by"
	// OriginalIntervalAnnotation keeps the spec.interval a Flux object had
	// before its first claim, which the last release puts back.
	OriginalIntervalAnnotation = "reverser.dev/original-interval"
	// OriginalAutomatedSyncAnnotation keeps, as JSON, the
	// spec.syncPolicy.automated an Application had before its claim (""
	// when it had none), which the release puts back.
	OriginalAutomatedSyncAnnotation = "reverser.dev/original-automated-sync"
	// DeleteAfterAnnotation says when a finished CommitRequest is deleted.
	DeleteAfterAnnotation = "reverser.dev/delete-after"
	// ReconcileRequestedAtAnnotation, set by a user or `kubectl reverser
	// reconcile` to any new value (a time, by Flux's requestedAt
	// convention), asks the controller to reconcile a GitTarget at once;
	// status.lastHandledReconcileAt echoes the value answered.
	ReconcileRequestedAtAnnotation = "reverser.dev/reconcile-requested-at"
)

// The applier objects claims hand to Reverser, and the Flux sources they
// hold.
var (
	FluxKustomizations  = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	FluxGitRepositories = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	ArgoCDApplications  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
)
