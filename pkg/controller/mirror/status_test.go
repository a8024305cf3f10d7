package mirror

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/resolve"
)

// TestAReportWritesTheStatusWithoutAReconcile (#28): a worker's report of a
// push rewrites lastPush and GitReachable from the last reconcile's
// findings; nothing asks for a reconcile, which would check every
// precondition (SubjectAccessReviews, Secrets, discovery) again for it.
func TestAReportWritesTheStatusWithoutAReconcile(t *testing.T) {
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site", Generation: 1}, Spec: v1.GitTargetSpec{Branch: "main"}}
	client := fake.NewSimpleClientset(gt)
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, targets.Add(gt))
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	statuses := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk})
	t.Cleanup(queue.ShutDown)
	t.Cleanup(statuses.ShutDown)
	events := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Reverser: client, Events: event.New(events)}, targets: listers.NewGitTargetLister(targets), queue: queue,
		statusQueue: statuses, reports: map[string]*report{}, observations: map[string]*observed{"team/site": {}}}

	reporter{c}.Rejected([]string{"team/site"})
	reporter{c}.Pushed([]string{"team/site"}, "0123abc", clk.Now())
	clk.Step(time.Second) // past the coalescing delay
	require.Eventually(t, func() bool { return statuses.Len() == 1 }, 10*time.Second, 10*time.Millisecond, "the report queued a status write")
	key, _ := statuses.Get()
	require.NoError(t, c.refreshStatus(t.Context(), key))
	statuses.Done(key)

	written, err := client.ReverserV1alpha1().GitTargets("team").Get(t.Context(), "site", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, written.Status.LastPush)
	assert.Equal(t, "0123abc", written.Status.LastPush.SHA)
	reachable := meta.FindStatusCondition(written.Status.Conditions, v1.ConditionGitReachable)
	require.NotNil(t, reachable)
	assert.Equal(t, "Pushed", reachable.Reason)
	assert.Zero(t, queue.Len(), "no reconcile asked for")
	assert.Equal(t, []string{
		"Normal Replayed Branch main had moved (a commit Reverser did not make): Reverser fetched it and replays its open commits on top, " +
			"then the cluster's state",
		"Normal Pushed Pushed commit 0123abc to branch main",
		"Warning NoRules No WatchRule or ClusterWatchRule selects anything for this GitTarget.",
	}, event.Drain(events), "the replay, the push and the change of Ready, once each")
	require.NoError(t, targets.Update(written)) // the informer catches up
	require.NoError(t, c.refreshStatus(t.Context(), key))
	assert.Empty(t, event.Drain(events), "a status written again records nothing again")
}

// TestALastingProblemStalls (#29): a precondition that only a person can
// restore (a KubeProvider or GitProvider gone, a Secret missing,
// credentials refused a push) sets Stalled with its reason, so kstatus
// tools call the GitTarget Failed, not Current; a moment's failure (an
// unreachable remote) does not.
func TestALastingProblemStalls(t *testing.T) {
	for _, tc := range []struct {
		st      observed
		stalled string
	}{
		{observed{source: problemf("KubeProviderNotFound", "KubeProvider local does not exist")}, "KubeProviderNotFound"},
		{observed{git: problemf("GitProviderNotFound", "GitProvider repo does not exist").in(areaGit)}, "GitProviderNotFound"},
		{observed{git: problemf("SecretNotFound", "Secret team/git does not exist").in(areaGit)}, "SecretNotFound"},
		{observed{git: problemf(ReasonPushNotAllowed, "refused").in(areaGit)}, ReasonPushNotAllowed},
		{observed{git: asProblem(errors.New("connection refused"), "GitUnreachable").in(areaGit)}, ""},
		{observed{source: asProblem(errors.New("connection refused"), "SourceUnreachable")}, ""},
	} {
		gt := &v1.GitTarget{}
		status := &v1.GitTargetStatus{}
		meta.SetStatusCondition(&status.Conditions, fromProblem(v1.ConditionSourceReachable, tc.st.source, "Reachable", ""))
		meta.SetStatusCondition(&status.Conditions, fromProblem(v1.ConditionGitReachable, tc.st.git, "Pushed", ""))
		readiness(gt, &tc.st, reported{}, nil, status, "")
		stalled := meta.FindStatusCondition(status.Conditions, v1.ConditionStalled)
		if tc.stalled == "" {
			assert.Nil(t, stalled, "%+v", tc.st)
			continue
		}
		require.NotNil(t, stalled, tc.stalled)
		assert.Equal(t, metav1.ConditionTrue, stalled.Status)
		assert.Equal(t, tc.stalled, stalled.Reason)
		assert.Equal(t, tc.stalled, meta.FindStatusCondition(status.Conditions, v1.ConditionReady).Reason)
	}
}

// TestARuleOfAMissingGitTargetSaysSo (#29): a WatchRule or ClusterWatchRule
// naming a GitTarget that does not exist is Ready=False and Stalled=True
// GitTargetNotFound, rather than carrying no status at all; a rule of
// another GitTarget is left alone.
func TestARuleOfAMissingGitTargetSaysSo(t *testing.T) {
	orphan := &v1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orphan", Generation: 2},
		Spec: v1.WatchRuleSpec{GitTargetRef: v1.LocalObjectReference{Name: "gone"}}}
	other := &v1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "other"},
		Spec: v1.WatchRuleSpec{GitTargetRef: v1.LocalObjectReference{Name: "site"}}}
	cluster := &v1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1.ClusterWatchRuleSpec{GitTargetRef: v1.ObjectReference{Namespace: "team", Name: "gone"}}}
	client := fake.NewSimpleClientset(orphan, other, cluster)
	index := func(objs ...any) cache.Indexer { return indexOf(t, objs...) }
	events := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Reverser: client, Events: event.New(events)}, targets: listers.NewGitTargetLister(index()),
		rules: listers.NewWatchRuleLister(index(orphan, other)), clusterRules: listers.NewClusterWatchRuleLister(index(cluster))}
	require.NoError(t, c.reconcile(t.Context(), "team/gone"))
	gone := "Warning GitTargetNotFound GitTarget team/gone does not exist: create it or fix spec.gitTargetRef"
	assert.Equal(t, []string{gone, gone}, event.Drain(events), "an Event on each rule of the missing GitTarget")
	require.NoError(t, c.reconcile(t.Context(), "team/gone"))

	wr, err := client.ReverserV1alpha1().WatchRules("team").Get(t.Context(), "orphan", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), wr.Status.ObservedGeneration)
	for _, typ := range []string{v1.ConditionReady, v1.ConditionStalled} {
		c := meta.FindStatusCondition(wr.Status.Conditions, typ)
		require.NotNil(t, c, typ)
		assert.Equal(t, "GitTargetNotFound", c.Reason)
		assert.Contains(t, c.Message, "GitTarget team/gone does not exist")
	}
	assert.True(t, meta.IsStatusConditionTrue(wr.Status.Conditions, v1.ConditionStalled))
	cwr, err := client.ReverserV1alpha1().ClusterWatchRules().Get(t.Context(), "platform", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "GitTargetNotFound", meta.FindStatusCondition(cwr.Status.Conditions, v1.ConditionReady).Reason)
	untouched, err := client.ReverserV1alpha1().WatchRules("team").Get(t.Context(), "other", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, untouched.Status.Conditions)

	// A rule refused for a moment (a SubjectAccessReview not answered) is
	// not stalled; one refused for good is, until it is resolved.
	s := ruleStatus(v1.WatchRuleStatus{}, 1, resolve.Result{}, &problem{reason: "CheckFailed", transient: true})
	assert.Nil(t, meta.FindStatusCondition(s.Conditions, v1.ConditionStalled))
	s = ruleStatus(s, 1, resolve.Result{}, problemf("NotAuthorized", "no"))
	assert.True(t, meta.IsStatusConditionTrue(s.Conditions, v1.ConditionStalled))
	s = ruleStatus(s, 1, resolve.Result{GVRs: nil, Unresolved: nil}, nil)
	assert.Nil(t, meta.FindStatusCondition(s.Conditions, v1.ConditionStalled))
}

// TestASuspendedGitTargetSaysSo (#29): spec.suspend is Ready=True
// Suspended, not Stalled (it was asked for), Reconciling while its worker
// still pushes what it received; the reconcile-requested-at annotation is
// echoed once answered.
func TestASuspendedGitTargetSaysSo(t *testing.T) {
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site", Generation: 2,
		Annotations: map[string]string{v1.ReconcileRequestedAtAnnotation: "2026-12-04T15:00:00Z"}},
		Spec: v1.GitTargetSpec{Branch: "main", Suspend: true}}
	client := fake.NewSimpleClientset(gt)
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, targets.Add(gt))
	events := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Reverser: client, Events: event.New(events)}, targets: listers.NewGitTargetLister(targets),
		mirrors: map[string]*mirrorState{}, reports: map[string]*report{}, observations: map[string]*observed{},
		suspensions: map[string]*suspension{"team/site": {workerKey: "w"}}, workers: newWorkers(t.TempDir(), nil, nil, nil),
		rules:        listers.NewWatchRuleLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		clusterRules: listers.NewClusterWatchRuleLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))}
	written := func() *v1.GitTarget {
		got, err := client.ReverserV1alpha1().GitTargets("team").Get(t.Context(), "site", metav1.GetOptions{})
		require.NoError(t, err)
		return got
	}

	require.NoError(t, c.reconcile(t.Context(), "team/site"))
	got := written()
	assert.Equal(t, "2026-12-04T15:00:00Z", got.Status.LastHandledReconcileAt)
	assert.Equal(t, v1.ReasonSuspending, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReconciling).Reason,
		"its worker has not said it is done")
	suspended := "Normal Suspended spec.suspend is true: nothing is mirrored until it is false again (kubectl reverser resume)"
	assert.Equal(t, []string{suspended}, event.Drain(events), "asked for: Ready")

	c.suspensions["team/site"].ended = "Done"
	require.NoError(t, targets.Update(got))
	require.NoError(t, c.reconcile(t.Context(), "team/site"))
	got = written()
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReconciling))
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionStalled), "asked for: not Stalled")
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	assert.Equal(t, metav1.ConditionTrue, ready.Status, "asked for: kstatus Current")
	assert.Equal(t, v1.ReasonSuspended, ready.Reason)
	assert.Empty(t, c.suspensions, "the worker reference is given back")
	assert.Equal(t, 1.0, testutil.ToFloat64(metrics.GitTargetReady.WithLabelValues("team", "site")), "reverser_gittarget_ready")
	require.NoError(t, targets.Delete(got))
	require.NoError(t, c.reconcile(t.Context(), "team/site"))
	assert.Zero(t, testutil.CollectAndCount(metrics.GitTargetReady), "a deleted GitTarget's series goes with it")
	assert.Empty(t, event.Drain(events), "once")
}

// TestTheRulesOfATornDownGitTargetSaySo (#29): a GitTarget that stops
// before its rules are checked (its KubeProvider deleted) tells its rules
// why, rather than leaving them Resolved for a mirror that is gone; the fix
// is the GitTarget's, so they are not Stalled.
func TestTheRulesOfATornDownGitTargetSaySo(t *testing.T) {
	resolved := v1.WatchRuleStatus{Resolved: []string{"configmaps.v1"}, Conditions: []metav1.Condition{
		{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Resolved", Message: "1 resources selected."}}}
	wr := &v1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "apps"},
		Spec: v1.WatchRuleSpec{GitTargetRef: v1.LocalObjectReference{Name: "site"}}, Status: resolved}
	cwr := &v1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1.ClusterWatchRuleSpec{GitTargetRef: v1.ObjectReference{Namespace: "team", Name: "site"}}, Status: resolved}
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site"},
		Spec: v1.GitTargetSpec{KubeProviderRef: v1.LocalObjectReference{Name: "deleted"}}}
	client := fake.NewSimpleClientset(wr, cwr, gt)
	index := func(objs ...any) cache.Indexer { return indexOf(t, objs...) }
	c := &Controller{cfg: Config{Reverser: client, Events: event.New(record.NewFakeRecorder(10))},
		kps: listers.NewKubeProviderLister(index()), rules: listers.NewWatchRuleLister(index(wr)),
		clusterRules: listers.NewClusterWatchRuleLister(index(cwr))}
	st := &observed{}
	c.ensure(t.Context(), gt, st)
	require.NotNil(t, st.source)
	assert.Equal(t, "KubeProviderNotFound", st.source.reason)

	got, err := client.ReverserV1alpha1().WatchRules("team").Get(t.Context(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, "GitTargetNotReady", ready.Reason)
	assert.Contains(t, ready.Message, `GitTarget team/site does not mirror (KubeProviderNotFound): KubeProvider "deleted" does not exist`)
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionStalled), "the GitTarget is Stalled, not its rule")
	assert.Empty(t, got.Status.Resolved, "nothing is mirrored")
	cluster, err := client.ReverserV1alpha1().ClusterWatchRules().Get(t.Context(), "platform", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "GitTargetNotReady", meta.FindStatusCondition(cluster.Status.Conditions, v1.ConditionReady).Reason)

	// A passing failure (the namespace's labels unreadable for a moment)
	// leaves a mirror running, and its rules as they were.
	fresh := &v1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fresh"},
		Spec: v1.WatchRuleSpec{GitTargetRef: v1.LocalObjectReference{Name: "site"}}, Status: resolved}
	client = fake.NewSimpleClientset(fresh)
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server did not answer")
	})
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1.KubeProviderSpec{InCluster: true,
		ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromSelector, Selector: &metav1.LabelSelector{}}}}
	c = &Controller{cfg: Config{Reverser: client, Kube: kube, Events: event.New(record.NewFakeRecorder(10))},
		kps: listers.NewKubeProviderLister(index(kp)), nsLister: corelisters.NewNamespaceLister(index()),
		rules: listers.NewWatchRuleLister(index(fresh)), clusterRules: listers.NewClusterWatchRuleLister(index())}
	gt.Spec.KubeProviderRef.Name = "local"
	st = &observed{}
	c.ensure(t.Context(), gt, st)
	require.NotNil(t, st.source)
	assert.Equal(t, "KubeProviderCheckFailed", st.source.reason)
	assert.True(t, st.source.transient)
	got, err = client.ReverserV1alpha1().WatchRules("team").Get(t.Context(), "fresh", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "Resolved", meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady).Reason)
}

// indexOf is an informer's index holding objs, for listers.
func indexOf(t *testing.T, objs ...any) cache.Indexer {
	t.Helper()
	i := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		require.NoError(t, i.Add(o))
	}
	return i
}
