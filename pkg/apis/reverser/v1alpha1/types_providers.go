package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Domain condition types of the providers.
const (
	// ConditionGitReachable says whether the remote answered with the configured credentials.
	ConditionGitReachable = "GitReachable"
	// ConditionAuditFactsReceived says whether the provider's audit route has received events.
	ConditionAuditFactsReceived = "AuditFactsReceived"
	// ConditionCommitRequestsServed says whether CommitRequests on the source cluster are watched.
	ConditionCommitRequestsServed = "CommitRequestsServed"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitProvider is a Git repository that GitTargets write to: where it is, how
// to authenticate, who commits, and which branches may be written.
type GitProvider struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the repository.
	// +optional
	Spec GitProviderSpec `json:"spec,omitempty"`
	// status reports whether the repository can be reached.
	// +optional
	Status GitProviderStatus `json:"status,omitempty"`
}

// GitProviderSpec describes a Git repository.
type GitProviderSpec struct {
	// url of the repository: https://, http://, ssh:// or the scp form user@host:path.
	// +required
	URL string `json:"url"`
	// secretRef names a Secret in the GitProvider's namespace holding the
	// credentials: keys "username" and "password" (a token goes in password)
	// for HTTP(S), or "identity" (a private key) and "known_hosts" for SSH.
	// Omitted for a repository that needs no credentials.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// allowInsecureHTTP lets secretRef's credentials travel over an http://
	// URL, in clear. Without it a secretRef with an http:// URL is refused.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
	// committer is the identity recorded as committer on every commit.
	// Authors are the people who made the changes.
	// +optional
	Committer Committer `json:"committer,omitempty"`
	// allowedBranches lists the branches GitTargets may write, as exact names
	// or glob patterns ("release/*"). "*" allows every branch.
	// +optional
	// +listType=set
	// +default=["*"]
	AllowedBranches []string `json:"allowedBranches"`
	// signing signs every commit with an SSH key when set.
	// +optional
	Signing *CommitSigning `json:"signing,omitempty"`
	// authorEmailDomain makes the author addresses of users whose name is
	// not an address: alice becomes alice@<domain>, the service account
	// system:serviceaccount:ns:name becomes name.ns.serviceaccount@<domain>.
	// Empty uses users.reverser.invalid.
	// +optional
	AuthorEmailDomain string `json:"authorEmailDomain,omitempty"`
}

// Committer is a Git identity.
type Committer struct {
	// name of the committer.
	// +optional
	// +default="Reverser"
	Name string `json:"name,omitempty"`
	// email of the committer.
	// +optional
	// +default="reverser@reverser.dev"
	Email string `json:"email,omitempty"`
}

// CommitSigning configures commit signatures: exactly one of an SSH key and
// an OpenPGP key.
type CommitSigning struct {
	// sshKeySecretRef names the Secret key that holds the OpenSSH private
	// key used to sign commits (gpg.format=ssh). The Secret must be in the
	// GitProvider's namespace: namespace is empty or that namespace.
	// +optional
	SSHKeySecretRef *SecretKeyReference `json:"sshKeySecretRef,omitempty"`
	// openPGPKeySecretRef names the Secret key that holds the armored
	// OpenPGP private key used to sign commits (gpg.format=openpgp, as
	// `gpg --export-secret-keys --armor` writes it). The Secret must be in
	// the GitProvider's namespace.
	// +optional
	OpenPGPKeySecretRef *SecretKeyReference `json:"openPGPKeySecretRef,omitempty"`
}

// GitProviderStatus reports the state of a GitProvider.
type GitProviderStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Stalled and GitReachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// authorizedBy is the user whose rights the GitProvider's Secrets are
	// read with: the one who created it or last changed its spec, written
	// by the API server after it checked that they may get every Secret
	// the spec names. The controller asks again on every resync. Clients
	// cannot set or change it.
	// +optional
	AuthorizedBy *Author `json:"authorizedBy,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GitProviderList is a list of GitProviders.
type GitProviderList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the GitProviders.
	Items []GitProvider `json:"items"`
}

// CommitRequestsMode says whether a KubeProvider serves CommitRequests that
// live on its source cluster.
// +enum
type CommitRequestsMode string

const (
	// CommitRequestsIgnore serves no CommitRequests on the source cluster.
	CommitRequestsIgnore CommitRequestsMode = "Ignore"
	// CommitRequestsReconcile serves them and writes their status; finished requests stay.
	CommitRequestsReconcile CommitRequestsMode = "Reconcile"
	// CommitRequestsReconcileAndDeleteFinished also deletes finished requests after their TTL.
	CommitRequestsReconcileAndDeleteFinished CommitRequestsMode = "ReconcileAndDeleteFinished"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// KubeProvider is a source cluster whose objects GitTargets mirror: the
// cluster Reverser runs against (inCluster) or one reached through a
// kubeconfig Secret.
type KubeProvider struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the source cluster and what it lends.
	// +optional
	Spec KubeProviderSpec `json:"spec,omitempty"`
	// status reports reachability, audit and CommitRequest service.
	// +optional
	Status KubeProviderStatus `json:"status,omitempty"`
}

// KubeProviderSpec describes a source cluster. Exactly one of inCluster and
// kubeConfigSecretRef is set.
type KubeProviderSpec struct {
	// inCluster makes the cluster reverser-controller runs against the source.
	// +optional
	InCluster bool `json:"inCluster,omitempty"`
	// kubeConfigSecretRef names the Secret key holding a kubeconfig for the
	// source cluster. Rotating the Secret restarts the provider's watches.
	// +optional
	KubeConfigSecretRef *SecretKeyReference `json:"kubeConfigSecretRef,omitempty"`
	// consumerNamespaces chooses the control-cluster namespaces whose
	// GitTargets, FluxClaims and ArgoCDClaims may use this provider. Same is
	// not allowed here: a KubeProvider has no namespace.
	// +optional
	// +default={"from": "All"}
	ConsumerNamespaces *NamespaceSelection `json:"consumerNamespaces,omitempty"`
	// lend lends source namespaces to the WatchRules of consumer namespaces,
	// beyond the one every consumer namespace has: the source namespace of its
	// own name. Omitted lends nothing more.
	// +optional
	// +listType=atomic
	Lend []NamespaceLoan `json:"lend,omitempty"`
	// lendSameNamespaces lends each consumer namespace the source namespace
	// of its own name (Secrets excepted), on a provider that reaches
	// another cluster, whose namespaces share names with this cluster's by
	// chance only. Off, a remote provider lends only what spec.lend says.
	// Refused with inCluster, where RBAC decides what a rule reads.
	// +optional
	LendSameNamespaces bool `json:"lendSameNamespaces,omitempty"`
	// commitRequests says whether CommitRequests on the source cluster are
	// served: Ignore, Reconcile, or ReconcileAndDeleteFinished. Only Ignore is
	// allowed with inCluster, where CommitRequests are served by this API.
	// +optional
	// +default="Ignore"
	CommitRequests CommitRequestsMode `json:"commitRequests,omitempty"`
	// audit configures the route on which the source cluster's kube-apiserver
	// posts audit events, so changes are attributed to the people who made them.
	// +optional
	Audit AuditSpec `json:"audit,omitempty"`
}

// NamespaceLoan lends source namespaces to the WatchRules of a set of
// control-cluster namespaces.
type NamespaceLoan struct {
	// sourceNamespaces of the source cluster that are lent: names, or "*" for
	// every namespace.
	// +required
	// +listType=set
	SourceNamespaces []string `json:"sourceNamespaces"`
	// to chooses the control-cluster namespaces whose WatchRules may read
	// them: Names, Selector or All (Same is what every namespace has already).
	// +required
	To NamespaceSelection `json:"to"`
	// secrets lends the Secrets of these namespaces too, which a provider
	// that reaches another cluster never lends otherwise. Refused with
	// inCluster, where RBAC decides who reads Secrets.
	// +optional
	Secrets bool `json:"secrets,omitempty"`
}

// AuditSpec configures a provider's audit route, POST /audit/<kubeprovider>
// on reverser-controller.
type AuditSpec struct {
	// enabled makes the controller accept audit events for this provider and
	// wait for them (up to the attribution grace) before committing a change.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// bearerTokenSecretRef names the Secret key holding the token that the
	// audit webhook must present. Either it or clientCertificateCommonNames is
	// required when enabled.
	// +optional
	BearerTokenSecretRef *SecretKeyReference `json:"bearerTokenSecretRef,omitempty"`
	// clientCertificateCommonNames lists the client certificate common names
	// accepted on the route.
	// +optional
	// +listType=set
	ClientCertificateCommonNames []string `json:"clientCertificateCommonNames,omitempty"`
}

// KubeProviderStatus reports the state of a KubeProvider.
type KubeProviderStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Reconciling, Stalled, AuditFactsReceived and
	// CommitRequestsServed (the last outside Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// commitRequests reports the source-cluster CommitRequests being served.
	// +optional
	CommitRequests *CommitRequestsServiceStatus `json:"commitRequests,omitempty"`
	// lastAuditFactTime is when the newest audit event arrived on the route.
	// +optional
	LastAuditFactTime *metav1.Time `json:"lastAuditFactTime,omitempty"`
}

// CommitRequestsServiceStatus says where source-cluster CommitRequests are watched.
type CommitRequestsServiceStatus struct {
	// namespaces watched for CommitRequests; ["*"] for one cluster-wide watch.
	// +optional
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// KubeProviderList is a list of KubeProviders.
type KubeProviderList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the KubeProviders.
	Items []KubeProvider `json:"items"`
}
