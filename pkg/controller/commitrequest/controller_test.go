package commitrequest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/worker"
)

func TestOutcomeLabels(t *testing.T) {
	for reason, want := range map[string]string{
		v1.ReasonCommitted: "committed", v1.ReasonNoWindow: "no_window", v1.ReasonNothingToCommit: "nothing_to_commit",
		v1.ReasonSaveInProgress: "save_in_progress", v1.ReasonGitTargetNotFound: "git_target_not_found", v1.ReasonNotAllowed: "not_allowed",
		v1.ReasonAuthorUnresolved: "author_unresolved", v1.ReasonSaveFailed: "save_failed",
	} {
		assert.Equal(t, want, snake(reason))
	}
}

func TestFromResult(t *testing.T) {
	gt := &v1.GitTarget{Spec: v1.GitTargetSpec{Branch: "main"}}
	o := fromResult(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: "0123456789abcdef"}, gt)
	assert.Equal(t, outcome{reason: v1.ReasonCommitted, ok: true, commit: "0123456789abcdef", branch: "main",
		message: "Saved as 0123456 on branch main."}, o, "Applied comes from the worker, which knows the claim")
	assert.Equal(t, v1.ReasonNothingToApply, fromResult(worker.SaveResult{Outcome: worker.SaveNothingToCommit, Message: "x"}, gt).applied.Reason,
		"no commit, nothing to apply")
	assert.Equal(t, metav1.ConditionTrue, fromResult(worker.SaveResult{Outcome: worker.SaveTargetGone, Message: "x"}, gt).applied.Status)

	o = fromResult(worker.SaveResult{Outcome: worker.SaveInProgress, Message: "another save is waiting"}, gt)
	assert.False(t, o.ok)
	assert.Equal(t, "Another save is waiting.", o.message)
	assert.True(t, fromResult(worker.SaveResult{Outcome: worker.SaveTargetGone, Message: "gone"}, gt).ok, "NoWindow is benign")

	o = fromResult(worker.SaveResult{Outcome: worker.SaveFailed, Message: "committed as abc1234 but not pushed in time: 500"}, gt)
	assert.Equal(t, outcome{reason: v1.ReasonSaveFailed, message: "Not saved: committed as abc1234 but not pushed in time: 500."}, o,
		"a save that gave up is a failure, and says why")
}

func TestAppliedCondition(t *testing.T) {
	for _, tc := range []struct {
		result *worker.ApplyResult
		status metav1.ConditionStatus
		reason string
	}{
		{nil, metav1.ConditionUnknown, v1.ReasonApplying},
		{&worker.ApplyResult{Reason: v1.ReasonRetrying, Message: "the applier failed"}, metav1.ConditionUnknown, v1.ReasonRetrying},
		{&worker.ApplyResult{Reason: v1.ReasonApplied, Revision: "main@sha1:x"}, metav1.ConditionTrue, v1.ReasonApplied},
		{&worker.ApplyResult{Reason: v1.ReasonNoApplierClaim}, metav1.ConditionTrue, v1.ReasonNoApplierClaim},
		{&worker.ApplyResult{Reason: v1.ReasonApplierGone}, metav1.ConditionTrue, v1.ReasonApplierGone},
		{&worker.ApplyResult{Reason: v1.ReasonCommitDropped}, metav1.ConditionFalse, v1.ReasonCommitDropped},
		{&worker.ApplyResult{Reason: v1.ReasonLost}, metav1.ConditionUnknown, v1.ReasonLost},
	} {
		c := appliedCondition(tc.result)
		assert.Equal(t, tc.status, c.Status, tc.reason)
		assert.Equal(t, tc.reason, c.Reason)
	}
	assert.Equal(t, "The applier failed.", appliedCondition(&worker.ApplyResult{Reason: v1.ReasonRetrying, Message: "the applier failed"}).Message)
}

func TestControlClusterFrontEnd(t *testing.T) {
	cfg := ControlCluster(Config{}, nil, nil)
	assert.True(t, cfg.Owns(&v1.KubeProvider{Spec: v1.KubeProviderSpec{InCluster: true}}))
	assert.False(t, cfg.Owns(&v1.KubeProvider{}))
	who, retry := cfg.Author(&v1.CommitRequest{}, nil, nil)
	assert.Nil(t, who.User)
	assert.False(t, who.Unnamed, "the control cluster always names the requester")
	assert.Zero(t, retry)
	assert.Contains(t, who.Unresolved, "status.author is empty")
	who, _ = cfg.Author(&v1.CommitRequest{Status: v1.CommitRequestStatus{Author: &v1.Author{Username: "alice"}}}, nil, nil)
	assert.Equal(t, "alice", who.User.Username)

	ignoring := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "far"}, Spec: v1.KubeProviderSpec{CommitRequests: v1.CommitRequestsIgnore}}
	assert.Contains(t, cfg.Foreign(ignoring, "team/site"), "set the provider's spec.commitRequests")
	serving := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "far"}, Spec: v1.KubeProviderSpec{CommitRequests: v1.CommitRequestsReconcile}}
	assert.Contains(t, cfg.Foreign(serving, "team/site"), `save on that cluster, with a CommitRequest whose spec.gitTargetRef names namespace "team"`)
}

// TestAFinishedSaveIsAnEventOnItsGitTarget (#29): `kubectl describe
// gittarget` shows each save's outcome beside the pushes, and the request
// shows its own; a source cluster's request, which lives where the
// recorder does not write, gets none.
func TestAFinishedSaveIsAnEventOnItsGitTarget(t *testing.T) {
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site"}, Spec: v1.GitTargetSpec{Branch: "main"}}
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, targets.Add(gt))
	saved := &v1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "save-1"}, Spec: v1.CommitRequestSpec{
		GitTargetRef: v1.ObjectReference{Name: "site"}}}
	refused := saved.DeepCopy()
	refused.Name = "save-2"
	rec := record.NewFakeRecorder(10)
	c := &Controller{cfg: ControlCluster(Config{Events: event.New(rec), Clock: clocktesting.NewFakeClock(time.Now())},
		fake.NewSimpleClientset(saved, refused), nil), targets: listers.NewGitTargetLister(targets)}

	require.NoError(t, c.finish(t.Context(), saved, fromResult(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: "0123abcdef"}, gt)))
	require.NoError(t, c.finish(t.Context(), refused, outcome{reason: v1.ReasonNotAllowed, message: "user \"eve\" may no longer save GitTarget team/site"}))
	assert.Equal(t, []string{
		"Normal Committed Saved as 0123abc on branch main.",
		"Normal Saved CommitRequest team/save-1: Saved as 0123abc on branch main.",
		"Warning NotAllowed user \"eve\" may no longer save GitTarget team/site",
		"Warning SaveFailed CommitRequest team/save-2: NotAllowed: user \"eve\" may no longer save GitTarget team/site",
	}, event.Drain(rec))

	c.cfg.EventsOnRequests = false
	again := saved.DeepCopy()
	again.Name = "save-3"
	_, err := c.cfg.Requests.ReverserV1alpha1().CommitRequests("team").Create(t.Context(), again, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.finish(t.Context(), again, outcome{reason: v1.ReasonNoWindow, ok: true, message: "No window to save."}))
	assert.Equal(t, []string{"Normal Saved CommitRequest team/save-3: No window to save."}, event.Drain(rec))
}
