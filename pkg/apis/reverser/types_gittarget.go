package reverser

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PruneMode says which Git documents a GitTarget removes.
// +enum
type PruneMode string

const (
	// PruneAlways removes every document under the target's path that the cluster does not hold.
	PruneAlways PruneMode = "Always"
	// PruneOnEvent removes a document only when the delete of its object is observed.
	PruneOnEvent PruneMode = "OnEvent"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitTarget is one mirror: the objects its WatchRules select on a
// KubeProvider are written under path on branch of a GitProvider.
type GitTarget struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the mirror.
	// +optional
	Spec GitTargetSpec `json:"spec,omitempty"`
	// status reports streams, commits and pushes.
	// +optional
	Status GitTargetStatus `json:"status,omitempty"`
}

// GitTargetSpec describes one mirror. branch, path and the provider
// references cannot change after creation.
type GitTargetSpec struct {
	// kubeProviderRef names the cluster-scoped KubeProvider to mirror from. Immutable.
	// +required
	KubeProviderRef LocalObjectReference `json:"kubeProviderRef"`
	// gitProviderRef names the GitProvider, in this namespace, to write to. Immutable.
	// +required
	GitProviderRef LocalObjectReference `json:"gitProviderRef"`
	// branch to write. It must be allowed by the GitProvider. Immutable.
	// +required
	Branch string `json:"branch"`
	// path is the folder in the repository, relative to its root, that holds
	// the mirror; empty means the root. No "..". Immutable.
	// +optional
	Path string `json:"path,omitempty"`
	// commit configures how changes are grouped into commits.
	// +optional
	Commit CommitSpec `json:"commit,omitempty"`
	// prune says which documents are removed: Always (everything under path
	// the cluster does not hold) or OnEvent (only on an observed delete).
	// +optional
	Prune PruneMode `json:"prune,omitempty"`
	// allowedCommitRequests lists who may save this target with a
	// CommitRequest. Each grant sets exactly one of consumerNamespaces and
	// sourceNamespaces. Omitted, only CommitRequests in the GitTarget's own
	// namespace are admitted; an empty list admits none.
	// +optional
	// +listType=atomic
	AllowedCommitRequests []CommitRequestGrant `json:"allowedCommitRequests"`
	// acceptClusterWatchRules names the ClusterWatchRules whose objects this
	// target accepts ("*" accepts all). Omitted accepts none: a
	// ClusterWatchRule feeds a GitTarget only when the target agrees.
	// +optional
	// +listType=set
	AcceptClusterWatchRules []string `json:"acceptClusterWatchRules,omitempty"`
	// applierRef names the FluxClaim or ArgoCDClaim, in this namespace, whose
	// applier deploys this branch. Reverser then decides when it applies.
	// +optional
	ApplierRef *ApplierReference `json:"applierRef,omitempty"`
	// encryption writes Secrets encrypted. Without it Secrets are never mirrored.
	// +optional
	Encryption *EncryptionSpec `json:"encryption,omitempty"`
	// targetNamespace is the namespace your applier puts namespaced
	// documents without a namespace into (Argo CD's
	// spec.destination.namespace, Flux's spec.targetNamespace, kubectl
	// apply -n). Such a document is matched to the object of its name in
	// that namespace, and no namespace is ever written into it. Omitted, it
	// is the claimed applier's, else the one namespace every rule reads;
	// with none known, a document without a namespace is never copied but
	// refused by name.
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// suspend pauses the mirror: its watch streams stop, the changes already
	// received are committed and pushed, and nothing more is written until
	// it is false again. Resuming compares the cluster with Git afresh and
	// commits only what differs. Saves wait or end NoWindow meanwhile.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// CommitSpec configures commits of a GitTarget.
type CommitSpec struct {
	// window says when an author's open changes become a commit.
	// +optional
	Window CommitWindow `json:"window,omitempty"`
}

// CommitWindow closes after silence with no new change, or maxAge after it opened.
type CommitWindow struct {
	// silence closes a window after no change arrived for this long.
	// +optional
	Silence *metav1.Duration `json:"silence,omitempty"`
	// maxAge closes a window this long after its first change, however busy.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// CommitRequestGrant admits CommitRequests from a set of namespaces. Exactly
// one of consumerNamespaces and sourceNamespaces is set.
type CommitRequestGrant struct {
	// consumerNamespaces admits CommitRequests in these namespaces of the
	// control cluster.
	// +optional
	ConsumerNamespaces *NamespaceSelection `json:"consumerNamespaces,omitempty"`
	// sourceNamespaces admits CommitRequests in these namespaces of the
	// mirrored cluster (names or "*"), served when the KubeProvider's
	// spec.commitRequests is not Ignore.
	// +optional
	// +listType=set
	SourceNamespaces []string `json:"sourceNamespaces,omitempty"`
}

// ApplierKind names a kind of applier claim.
// +enum
type ApplierKind string

const (
	// ApplierKindFluxClaim refers to a FluxClaim.
	ApplierKindFluxClaim ApplierKind = "FluxClaim"
	// ApplierKindArgoCDClaim refers to an ArgoCDClaim.
	ApplierKindArgoCDClaim ApplierKind = "ArgoCDClaim"
)

// ApplierReference names an applier claim in the GitTarget's namespace.
// +structType=atomic
type ApplierReference struct {
	// kind of the claim: FluxClaim or ArgoCDClaim.
	// +required
	Kind ApplierKind `json:"kind"`
	// name of the claim.
	// +required
	Name string `json:"name"`
}

// EncryptionSpec encrypts Secrets before they are written.
type EncryptionSpec struct {
	// sops encrypts with SOPS to age recipients.
	// +required
	SOPS SOPSEncryption `json:"sops"`
}

// SOPSEncryption lists the age recipients Secrets are encrypted to.
type SOPSEncryption struct {
	// ageRecipients are age public keys ("age1...").
	// +required
	// +listType=set
	AgeRecipients []string `json:"ageRecipients"`
}

// GitTargetStatus reports the state of a mirror.
type GitTargetStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Reconciling, Stalled, StreamsRunning,
	// SourceReachable, GitReachable and MultipleSourceNamespaces.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// streams counts the target's watch streams.
	// +optional
	Streams StreamCounts `json:"streams,omitempty"`
	// lastCommit is the newest commit written for this target.
	// +optional
	LastCommit *CommitRef `json:"lastCommit,omitempty"`
	// lastPush is the newest push that carried this target's commits.
	// +optional
	LastPush *CommitRef `json:"lastPush,omitempty"`
	// lastHandledReconcileAt is the value of the
	// reverser.dev/reconcile-requested-at annotation the controller last
	// answered.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// StreamCounts counts watch streams.
type StreamCounts struct {
	// desired is how many streams the target's rules ask for.
	// +optional
	Desired int32 `json:"desired,omitempty"`
	// running is how many of them are watching.
	// +optional
	Running int32 `json:"running,omitempty"`
}

// CommitRef is a commit and when it was made.
type CommitRef struct {
	// sha of the commit.
	// +optional
	SHA string `json:"sha,omitempty"`
	// time of the commit or push.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitTargetList is a list of GitTargets.
type GitTargetList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the GitTargets.
	Items []GitTarget `json:"items"`
}

// ResourceRule selects resources by API group, version and resource name.
type ResourceRule struct {
	// apiGroups to match; "" is the core group, "*" every group.
	// +required
	// +listType=set
	APIGroups []string `json:"apiGroups"`
	// apiVersions to match; omitted means each group's preferred version.
	// +optional
	// +listType=set
	APIVersions []string `json:"apiVersions,omitempty"`
	// resources to match, plural and lower case ("configmaps"); "*" every resource.
	// +required
	// +listType=set
	Resources []string `json:"resources"`
	// credentialFields are fields of the selected objects that hold
	// credentials, and what becomes of each in Git. Secrets are always
	// written encrypted, or not at all; these name credentials that other
	// kinds embed.
	// +optional
	// +listType=map
	// +listMapKey=path
	CredentialFields []CredentialField `json:"credentialFields,omitempty"`
}

// CredentialAction is what becomes of a credential field in Git.
type CredentialAction string

// Credential actions.
const (
	// CredentialDrop leaves the field out of Git.
	CredentialDrop CredentialAction = "Drop"
	// CredentialEncrypt writes the object as a SOPS document with the field
	// encrypted (GitTarget spec.encryption).
	CredentialEncrypt CredentialAction = "Encrypt"
)

// CredentialField is a field that holds a credential.
type CredentialField struct {
	// path names the field by its keys from the object's root, separated by
	// dots: "spec.auth.password". "*" stands for every key of a map
	// ("data.*"); list items cannot be named.
	// +required
	Path string `json:"path"`
	// action is Drop (the default), which leaves the field out of Git, or
	// Encrypt, which writes the object as a SOPS document with the field
	// encrypted and needs the GitTarget's spec.encryption. SOPS encrypts by
	// key name: every field of the document named as the path's last key is
	// encrypted.
	// +optional
	Action CredentialAction `json:"action,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// WatchRule selects namespaced resources of one source namespace that feed a
// GitTarget in the WatchRule's namespace.
type WatchRule struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects the resources.
	// +optional
	Spec WatchRuleSpec `json:"spec,omitempty"`
	// status reports how the rules resolved.
	// +optional
	Status WatchRuleStatus `json:"status,omitempty"`
}

// WatchRuleSpec selects namespaced resources.
type WatchRuleSpec struct {
	// gitTargetRef names the GitTarget, in this namespace, that the objects feed.
	// +required
	GitTargetRef LocalObjectReference `json:"gitTargetRef"`
	// sourceNamespace is the namespace on the source cluster to watch; empty
	// means the namespace of the same name as the WatchRule's.
	// +optional
	SourceNamespace string `json:"sourceNamespace,omitempty"`
	// rules select the resources.
	// +required
	// +listType=atomic
	Rules []ResourceRule `json:"rules"`
}

// WatchRuleStatus reports how a rule resolved against discovery.
type WatchRuleStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// authorizedBy is the user whose rights the rule reads with: the one who
	// created it or last changed its spec, written by the API server after it
	// checked that they may list and watch what the rule selects. Clients
	// cannot set or change it; the controller checks it again on every resync.
	// +optional
	AuthorizedBy *Author `json:"authorizedBy,omitempty"`
	// resolved lists the group/version/resources the rules matched.
	// +optional
	// +listType=set
	Resolved []string `json:"resolved,omitempty"`
	// unresolved lists what the rules named that the source does not serve.
	// +optional
	// +listType=set
	Unresolved []string `json:"unresolved,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// WatchRuleList is a list of WatchRules.
type WatchRuleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the WatchRules.
	Items []WatchRule `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterWatchRule selects cluster-scoped resources that feed a GitTarget.
type ClusterWatchRule struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec selects the resources.
	// +optional
	Spec ClusterWatchRuleSpec `json:"spec,omitempty"`
	// status reports how the rules resolved.
	// +optional
	Status WatchRuleStatus `json:"status,omitempty"`
}

// ClusterWatchRuleSpec selects cluster-scoped resources.
type ClusterWatchRuleSpec struct {
	// gitTargetRef names the GitTarget, namespace required, that the objects feed.
	// +required
	GitTargetRef ObjectReference `json:"gitTargetRef"`
	// rules select the resources.
	// +required
	// +listType=atomic
	Rules []ResourceRule `json:"rules"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterWatchRuleList is a list of ClusterWatchRules.
type ClusterWatchRuleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ClusterWatchRules.
	Items []ClusterWatchRule `json:"items"`
}
