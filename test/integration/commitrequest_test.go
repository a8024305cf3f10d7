package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	typed "reverser.dev/reverser/pkg/generated/clientset/versioned/typed/reverser/v1alpha1"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/worker"
)

// The tests of this file run the CommitRequest controller against the
// in-process API server, with a branch worker that only records saves: they
// prove the claim, conflict and retention rules of D3 at the API's level,
// on a fake clock.

// recordingSaver is the worker side of saves: it records each Save and
// ends it as the test says.
type recordingSaver struct {
	mu    sync.Mutex
	saves []worker.SaveRequest
	// onSave runs inside Save, with the request.
	onSave func(worker.SaveRequest)
	// found is the commit FindSave finds for every request: a save made
	// before a restart.
	found string
}

func (s *recordingSaver) Save(_ context.Context, req worker.SaveRequest) {
	s.mu.Lock()
	s.saves = append(s.saves, req)
	on := s.onSave
	s.mu.Unlock()
	if on != nil {
		on(req)
	}
}

func (s *recordingSaver) FindSave(_ context.Context, _ string, done func(string, error)) {
	s.mu.Lock()
	found := s.found
	s.mu.Unlock()
	done(found, nil)
}

func (s *recordingSaver) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.saves)
}

// conflicting injects a concurrent write, a label patch, just before the
// controller's first status write of each kind (claim, outcome): the write
// is decided from a resourceVersion that is no longer current, and the
// server refuses it with a conflict.
type conflicting struct {
	versioned.Interface
	mu        sync.Mutex
	before    map[string]bool // "claim", "outcome": patched once already
	conflicts []string
}

func (c *conflicting) ReverserV1alpha1() typed.ReverserV1alpha1Interface {
	return conflictingGroup{c.Interface.ReverserV1alpha1(), c}
}

type conflictingGroup struct {
	typed.ReverserV1alpha1Interface
	c *conflicting
}

func (g conflictingGroup) CommitRequests(namespace string) typed.CommitRequestInterface {
	return conflictingRequests{g.ReverserV1alpha1Interface.CommitRequests(namespace), g.c}
}

type conflictingRequests struct {
	typed.CommitRequestInterface
	c *conflicting
}

func (r conflictingRequests) UpdateStatus(ctx context.Context, cr *v1.CommitRequest, o metav1.UpdateOptions) (*v1.CommitRequest, error) {
	kind := "outcome"
	if c := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady); c != nil && c.Status == metav1.ConditionUnknown {
		kind = "claim"
	}
	r.c.mu.Lock()
	first := !r.c.before[kind]
	r.c.before[kind] = true
	r.c.mu.Unlock()
	if first {
		_, err := r.CommitRequestInterface.Patch(ctx, cr.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"touched-before-`+kind+`":"yes"}}}`), metav1.PatchOptions{})
		if err != nil {
			return nil, err
		}
	}
	out, err := r.CommitRequestInterface.UpdateStatus(ctx, cr, o)
	if apierrors.IsConflict(err) {
		r.c.mu.Lock()
		r.c.conflicts = append(r.c.conflicts, kind)
		r.c.mu.Unlock()
	}
	return out, err
}

type saveHarness struct {
	server *testServer
	alice  typed.ReverserV1alpha1Interface
	admin  typed.ReverserV1alpha1Interface
	saver  *recordingSaver
	writes *conflicting
	clock  *clocktesting.FakeClock
}

func startSaves(t *testing.T, ttl time.Duration) *saveHarness {
	authz := newTestAuthz()
	authz.grantSave("alice", ns, "site")
	s := startServer(t, serverSetup{dir: t.TempDir(), authz: authz})
	h := &saveHarness{server: s, alice: s.as("alice", "devs"), admin: s.adminClient(), saver: &recordingSaver{},
		clock: clocktesting.NewFakeClock(time.Now())}
	ctx := ctxT(t)
	_, err := h.admin.KubeProviders().Create(ctx, kubeProvider("local"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = h.admin.GitTargets(ns).Create(ctx, gitTarget("site"), metav1.CreateOptions{})
	require.NoError(t, err)

	client := versioned.NewForConfigOrDie(s.admin)
	h.writes = &conflicting{Interface: client, before: map[string]bool{}}
	factory := informers.NewSharedInformerFactory(client, 0)
	c := commitrequest.New(commitrequest.ControlCluster(commitrequest.Config{
		Kube: kubefake.NewClientset(), Authorizer: authz, TTL: ttl, Clock: h.clock,
		Savers: func(string) (commitrequest.SaveTarget, bool) {
			return commitrequest.SaveTarget{Saver: h.saver, Domain: "example.com"}, true
		},
	}, h.writes, factory))
	runCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(runCtx.Done())
	go func() { _ = c.Run(runCtx, 2) }()
	return h
}

func (h *saveHarness) poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctxT(t), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }), what)
}

func (h *saveHarness) ready(t *testing.T, name string) *metav1.Condition {
	cr, err := h.admin.CommitRequests(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
}

// TestClaimBeforeSaveAndConflictsNeverSaveTwice (D3): the save is handed to
// the worker only once the claim is stored; a conflict on the claim decides
// again, and a conflict on the outcome writes the worker's outcome again:
// neither starts a second save.
func TestClaimBeforeSaveAndConflictsNeverSaveTwice(t *testing.T) {
	h := startSaves(t, time.Hour)
	ctx := ctxT(t)
	claimedAtSave := make(chan bool, 1)
	h.saver.onSave = func(req worker.SaveRequest) {
		cr, err := h.admin.CommitRequests(ns).Get(ctx, "first", metav1.GetOptions{})
		c := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
		claimedAtSave <- err == nil && c != nil && c.Reason == v1.ReasonSaving && cr.Status.GitTargetUID != ""
		req.Done(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: "0123456789abcdef0123456789abcdef01234567"})
	}
	_, err := h.alice.CommitRequests(ns).Create(ctx, commitRequest("first", "site"), metav1.CreateOptions{})
	require.NoError(t, err)

	h.poll(t, "the request Committed", func() bool {
		c := h.ready(t, "first")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	select {
	case claimed := <-claimedAtSave:
		assert.True(t, claimed, "the claim was stored before the save began")
	default:
		t.Fatal("the worker was never asked to save")
	}
	assert.Equal(t, 1, h.saver.count(), "one save, whatever the conflicts")
	h.writes.mu.Lock()
	// Each write met the conflict made for it; a retry that read the cache
	// before it caught up may meet another, harmlessly: what counts is one
	// save.
	assert.Contains(t, h.writes.conflicts, "claim", "the claim met a conflict")
	assert.Contains(t, h.writes.conflicts, "outcome", "the outcome met a conflict")
	h.writes.mu.Unlock()
	cr, err := h.admin.CommitRequests(ns).Get(ctx, "first", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef0123456789abcdef01234567", cr.Status.Commit)
	assert.Equal(t, "main", cr.Status.Branch)
	assert.Equal(t, "yes", cr.Labels["touched-before-outcome"], "the concurrent write was kept")
}

// TestFinishedRequestsAreDeletedAfterTheirTTL (D4 retention, control
// cluster): a finished request is stamped with its deletion time and deleted
// once the clock passes it, not before.
func TestFinishedRequestsAreDeletedAfterTheirTTL(t *testing.T) {
	h := startSaves(t, 10*time.Minute)
	ctx := ctxT(t)
	h.saver.onSave = func(req worker.SaveRequest) {
		req.Done(worker.SaveResult{Outcome: worker.SaveNoWindow, Message: "alice has no open changes on this GitTarget"})
	}
	_, err := h.alice.CommitRequests(ns).Create(ctx, commitRequest("done", "site"), metav1.CreateOptions{})
	require.NoError(t, err)
	var stamp string
	h.poll(t, "the finished request stamped for deletion", func() bool {
		cr, err := h.admin.CommitRequests(ns).Get(ctx, "done", metav1.GetOptions{})
		if err != nil {
			return false
		}
		stamp = cr.Annotations[v1.DeleteAfterAnnotation]
		return stamp != ""
	})
	at, err := time.Parse(time.RFC3339, stamp)
	require.NoError(t, err)
	assert.WithinDuration(t, h.clock.Now().Add(10*time.Minute), at, time.Second)

	h.clock.Step(9 * time.Minute)
	_, err = h.admin.CommitRequests(ns).Get(ctx, "done", metav1.GetOptions{})
	require.NoError(t, err, "not deleted before its time")
	h.clock.Step(time.Minute + time.Second)
	h.poll(t, "the request deleted once its time passed", func() bool {
		_, err := h.admin.CommitRequests(ns).Get(ctx, "done", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestASaveFoundAfterARestartIsReportedNotRepeated (D3): a claimed request
// whose commit the branch already holds, saved by a controller that stopped
// before it could report it, ends Committed with that commit and is never
// saved again.
func TestASaveFoundAfterARestartIsReportedNotRepeated(t *testing.T) {
	h := startSaves(t, time.Hour)
	h.saver.found = "89abcdef0123456789abcdef0123456789abcdef"
	ctx := ctxT(t)
	_, err := h.alice.CommitRequests(ns).Create(ctx, commitRequest("resumed", "site"), metav1.CreateOptions{})
	require.NoError(t, err)
	h.poll(t, "the request Committed", func() bool {
		c := h.ready(t, "resumed")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	cr, err := h.admin.CommitRequests(ns).Get(ctx, "resumed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, h.saver.found, cr.Status.Commit)
	assert.Equal(t, 0, h.saver.count(), "the save found on the branch is not made again")
}

// TestAppliedIsReportedAndRetentionWaitsForIt (E3): a committed save reports
// its apply in the Applied condition and status.appliedRevision as the
// worker hears it, never changing Ready, and is stamped for deletion only
// once Applied is settled.
func TestAppliedIsReportedAndRetentionWaitsForIt(t *testing.T) {
	h := startSaves(t, time.Hour)
	ctx := ctxT(t)
	asked := make(chan worker.SaveRequest, 1)
	h.saver.onSave = func(req worker.SaveRequest) {
		req.Done(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: "0123456789abcdef0123456789abcdef01234567"})
		req.Applied(worker.ApplyResult{Reason: v1.ReasonApplying, Message: "a converge is asked for the pushed commit"})
		asked <- req
	}
	cr := commitRequest("applied", "site")
	cr.Spec.CatchUp = v1.CatchUpAfterPush
	_, err := h.alice.CommitRequests(ns).Create(ctx, cr, metav1.CreateOptions{})
	require.NoError(t, err)
	req := <-asked
	assert.True(t, req.CatchUp, "AfterPush asks the worker for a converge")
	applied := func() (*metav1.Condition, *v1.CommitRequest) {
		cr, err := h.admin.CommitRequests(ns).Get(ctx, "applied", metav1.GetOptions{})
		if err != nil {
			return nil, nil
		}
		return meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied), cr
	}
	h.poll(t, "Applied=Unknown Applying", func() bool {
		c, _ := applied()
		return c != nil && c.Status == metav1.ConditionUnknown && c.Reason == v1.ReasonApplying
	})
	_, got := applied()
	assert.Equal(t, v1.ReasonCommitted, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady).Reason)
	assert.Empty(t, got.Annotations[v1.DeleteAfterAnnotation], "not retained while its apply is unsettled")

	req.Applied(worker.ApplyResult{Reason: v1.ReasonApplied, Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567", Settled: true,
		Message: "the applier applied 0123456, which holds the commit"})
	h.poll(t, "Applied=True, then stamped for deletion", func() bool {
		c, cr := applied()
		return c != nil && c.Status == metav1.ConditionTrue && cr.Status.AppliedRevision == "main@sha1:0123456789abcdef0123456789abcdef01234567" &&
			cr.Annotations[v1.DeleteAfterAnnotation] != ""
	})
	c, got := applied()
	assert.Equal(t, "The applier applied 0123456, which holds the commit.", c.Message)
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady).Status, "Ready never changes")
}
