package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConvergeReason says why Reverser asked an applier to apply.
// +enum
type ConvergeReason string

// Reasons for a converge.
const (
	ConvergeStartup       ConvergeReason = "Startup"
	ConvergeForeignCommit ConvergeReason = "ForeignCommit"
	ConvergeRepair        ConvergeReason = "Repair"
	ConvergeRefusal       ConvergeReason = "Refusal"
	ConvergeCatchUp       ConvergeReason = "CatchUp"
)

// ApplierOperation is the converge Reverser asked of an applier most recently.
type ApplierOperation struct {
	// reason the converge was asked for.
	// +optional
	Reason ConvergeReason `json:"reason,omitempty"`
	// revision the applier was asked to reach ("<branch>@sha1:<sha>").
	// +optional
	Revision string `json:"revision,omitempty"`
	// startedAt is when the converge was sent.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when the applier reported the revision.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// ApplierClaimStatus reports the state of a claimed applier.
type ApplierClaimStatus struct {
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
	// operation is the newest converge.
	// +optional
	Operation *ApplierOperation `json:"operation,omitempty"`
	// lastAppliedRevision is the revision the applier reports as applied.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// authorizedBy is the user whose rights the claim acts with: the one who
	// created it or last changed its spec, written by the API server after it
	// checked that they may patch the applier object the claim names. Clients
	// cannot set or change it.
	// +optional
	AuthorizedBy *Author `json:"authorizedBy,omitempty"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FluxClaim hands a Flux Kustomization to Reverser: Reverser suspends its own
// schedule and asks it to apply when the branch needs it.
type FluxClaim struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the Kustomization.
	// +optional
	Spec FluxClaimSpec `json:"spec,omitempty"`
	// status reports the converges.
	// +optional
	Status ApplierClaimStatus `json:"status,omitempty"`
}

// FluxClaimSpec names a Flux Kustomization.
type FluxClaimSpec struct {
	// kubeProviderRef names the KubeProvider of the cluster that runs Flux.
	// +required
	KubeProviderRef LocalObjectReference `json:"kubeProviderRef"`
	// kustomizationRef names the Kustomization; namespace required.
	// +required
	KustomizationRef ObjectReference `json:"kustomizationRef"`
	// catchUpAfter asks a CatchUp apply once the Kustomization has been behind
	// the branch tip this long; 0s turns it off.
	// +optional
	// +default="1m"
	CatchUpAfter *metav1.Duration `json:"catchUpAfter,omitempty"`
	// suspend gives the applier back its own schedule, as if no GitTarget
	// named the claim, until it is false again; the claim and who
	// authorised it stay.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FluxClaimList is a list of FluxClaims.
type FluxClaimList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the FluxClaims.
	Items []FluxClaim `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ArgoCDClaim hands an Argo CD Application to Reverser: Reverser turns off its
// automated sync and asks it to sync when the branch needs it.
type ArgoCDClaim struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the Application.
	// +optional
	Spec ArgoCDClaimSpec `json:"spec,omitempty"`
	// status reports the converges.
	// +optional
	Status ApplierClaimStatus `json:"status,omitempty"`
}

// ArgoCDClaimSpec names an Argo CD Application.
type ArgoCDClaimSpec struct {
	// kubeProviderRef names the KubeProvider of the cluster that runs Argo CD.
	// +required
	KubeProviderRef LocalObjectReference `json:"kubeProviderRef"`
	// applicationRef names the Application; namespace required.
	// +required
	ApplicationRef ObjectReference `json:"applicationRef"`
	// catchUpAfter asks a CatchUp sync once the Application has been behind
	// the branch tip this long; 0s (the default) turns it off, because a sync
	// runs hooks and Argo CD's refresh already compares against the tip.
	// +optional
	// +default="0s"
	CatchUpAfter *metav1.Duration `json:"catchUpAfter,omitempty"`
	// suspend gives the applier back its own schedule, as if no GitTarget
	// named the claim, until it is false again; the claim and who
	// authorised it stay.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ArgoCDClaimList is a list of ArgoCDClaims.
type ArgoCDClaimList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ArgoCDClaims.
	Items []ArgoCDClaim `json:"items"`
}
