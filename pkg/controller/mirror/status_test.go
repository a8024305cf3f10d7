package mirror

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
)

// TestAReportWritesTheStatusWithoutAReconcile (#28): a worker's report of a
// push rewrites lastPush and GitReachable from the last reconcile's
// findings; nothing asks for a reconcile, which would check every
// precondition (SubjectAccessReviews, Secrets, discovery) again for it.
func TestAReportWritesTheStatusWithoutAReconcile(t *testing.T) {
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site", Generation: 1}}
	client := fake.NewSimpleClientset(gt)
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	require.NoError(t, targets.Add(gt))
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	statuses := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Clock: clk})
	t.Cleanup(queue.ShutDown)
	t.Cleanup(statuses.ShutDown)
	c := &Controller{cfg: Config{Reverser: client}, targets: listers.NewGitTargetLister(targets), queue: queue, statusQueue: statuses,
		reports: map[string]*report{}, observations: map[string]*observed{"team/site": {}}}

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
}
