package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionApplied reports the apply that follows a save; it never changes Ready.
const ConditionApplied = "Applied"

// Reasons of a CommitRequest's Ready condition.
const (
	ReasonSaving            = "Saving"
	ReasonCommitted         = "Committed"
	ReasonNoWindow          = "NoWindow"
	ReasonNothingToCommit   = "NothingToCommit"
	ReasonGitTargetNotFound = "GitTargetNotFound"
	ReasonNotAllowed        = "NotAllowed"
	ReasonAuthorUnresolved  = "AuthorUnresolved"
	ReasonSaveInProgress    = "SaveInProgress"
	// ReasonSaveFailed: the save's commit was not made, or not pushed,
	// within the controller's --save-timeout; the changes are not lost.
	ReasonSaveFailed = "SaveFailed"
)

// Reasons of a CommitRequest's Applied condition.
const (
	ReasonApplying       = "Applying"
	ReasonRetrying       = "Retrying"
	ReasonLost           = "Lost"
	ReasonApplied        = "Applied"
	ReasonNothingToApply = "NothingToApply"
	ReasonNoApplierClaim = "NoApplierClaim"
	ReasonApplierGone    = "ApplierGone"
	ReasonCommitDropped  = "CommitDropped"
)

// AttachMode says which commit window a CommitRequest saves.
// +enum
type AttachMode string

const (
	// AttachCurrent saves the requester's open window, or ends NoWindow when there is none.
	AttachCurrent AttachMode = "Current"
	// AttachNext waits for the requester's next window and saves it.
	AttachNext AttachMode = "Next"
)

// NothingToCommitPolicy says what a save does when the window holds no change.
// +enum
type NothingToCommitPolicy string

const (
	// NothingToCommitSkip ends the request NothingToCommit without a commit.
	NothingToCommitSkip NothingToCommitPolicy = "Skip"
	// NothingToCommitCommitEmpty writes an empty commit carrying the message.
	NothingToCommitCommitEmpty NothingToCommitPolicy = "CommitEmpty"
)

// CatchUpMode says when the GitTarget's applier applies a save.
// +enum
type CatchUpMode string

const (
	// CatchUpAsDefinedOnClaim leaves the apply to the claim's catchUpAfter.
	CatchUpAsDefinedOnClaim CatchUpMode = "AsDefinedOnClaim"
	// CatchUpAfterPush asks the applier to converge right after the save is pushed.
	CatchUpAfterPush CatchUpMode = "AfterPush"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CommitRequest saves the requester's open work on a GitTarget now, as one
// commit with the given message, authored by the requester. Its spec cannot
// change after creation. status.author is set by the API server from the
// authenticated request on the control cluster, and by reverser-controller
// from the source cluster's audit event on a source cluster.
//
// Schema revision 2, compatible from revision 1.
type CommitRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to save. Immutable.
	// +optional
	Spec CommitRequestSpec `json:"spec,omitempty"`
	// status reports the author and the outcome.
	// +optional
	Status CommitRequestStatus `json:"status,omitempty"`
}

// CommitRequestSpec says which GitTarget to save and with which message.
type CommitRequestSpec struct {
	// gitTargetRef names the GitTarget to save. The namespace defaults to the
	// CommitRequest's own; on a source cluster it must be given.
	// +required
	GitTargetRef ObjectReference `json:"gitTargetRef"`
	// message of the commit: 1 to 1024 characters, line breaks and tabs
	// allowed, no other control characters.
	// +required
	Message string `json:"message"`
	// attach chooses the window: Current (the requester's open window) or
	// Next (the next one the requester opens).
	// +optional
	// +default="Current"
	Attach AttachMode `json:"attach,omitempty"`
	// whenNothingToCommit: Skip ends NothingToCommit; CommitEmpty writes an
	// empty commit with the message.
	// +optional
	// +default="Skip"
	WhenNothingToCommit NothingToCommitPolicy `json:"whenNothingToCommit,omitempty"`
	// catchUp: AsDefinedOnClaim leaves the apply to the claim's catchUpAfter;
	// AfterPush asks the applier to converge right after the push.
	// +optional
	// +default="AsDefinedOnClaim"
	CatchUp CatchUpMode `json:"catchUp,omitempty"`
	// window tunes how the request attaches.
	// +optional
	Window CommitRequestWindow `json:"window,omitempty"`
}

// CommitRequestWindow tunes the attach of a CommitRequest.
type CommitRequestWindow struct {
	// attachTimeout is how long the request waits for its GitTarget and
	// window before it ends GitTargetNotFound or NoWindow.
	// +optional
	// +default="5s"
	AttachTimeout *metav1.Duration `json:"attachTimeout,omitempty"`
}

// Author is the identity of an authenticated requester.
type Author struct {
	// username as authenticated by the API server.
	// +optional
	Username string `json:"username,omitempty"`
	// uid of the user, when the authenticator knows one.
	// +optional
	UID string `json:"uid,omitempty"`
	// groups the user belonged to when recorded, system:masters left out:
	// re-checks use them only until the record is older than the
	// controller's --recorded-groups-max-age, then the username alone.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty"`
	// recordedAt is when the API server recorded the identity.
	// +optional
	RecordedAt *metav1.Time `json:"recordedAt,omitempty"`
}

// CommitRequestStatus reports the author and outcome of a save.
type CommitRequestStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// author is the authenticated requester: written by the API server at
	// create on the control cluster, where clients cannot set or change it;
	// on a source cluster written by reverser-controller when it claims the
	// request, from that cluster's audit event of the create.
	// +optional
	Author *Author `json:"author,omitempty"`
	// conditions: Ready (Unknown Saving; True Committed, NoWindow or
	// NothingToCommit; False GitTargetNotFound, NotAllowed, AuthorUnresolved,
	// SaveInProgress or SaveFailed) and Applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// gitTargetUID is the uid of the GitTarget that admitted the request; a
	// replacement GitTarget must admit it again.
	// +optional
	GitTargetUID string `json:"gitTargetUID,omitempty"`
	// commit is the sha of the commit the save produced.
	// +optional
	Commit string `json:"commit,omitempty"`
	// branch the commit was pushed to.
	// +optional
	Branch string `json:"branch,omitempty"`
	// appliedRevision is the applier revision that holds the commit.
	// +optional
	AppliedRevision string `json:"appliedRevision,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// CommitRequestList is a list of CommitRequests.
type CommitRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the CommitRequests.
	Items []CommitRequest `json:"items"`
}
