package mirror

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	discoveryfake "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/kubeprovider"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
)

// TestOneDiscoveryServesManyGitTargets: GitTargets reconciled one after
// another share their source's discovery, unless a rule asks for what it
// does not list (a CRD created since), which discovers again.
func TestOneDiscoveryServesManyGitTargets(t *testing.T) {
	fake := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}
	fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: []string{"list", "watch"}}}}}
	rules := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	clusters := &kubeprovider.Clusters{}
	c := &Controller{cfg: Config{Clusters: clusters}, rules: listers.NewWatchRuleLister(rules),
		clusterRules: listers.NewClusterWatchRuleLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))}
	src := &kubeprovider.Cluster{Discovery: fake}
	discoveries := func() (n int) {
		for _, a := range fake.Actions() {
			if a.GetResource().Resource == "resource" {
				n++
			}
		}
		return n
	}
	rule := func(ns, target, resource string) {
		require.NoError(t, rules.Add(&v1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: target + "-" + resource},
			Spec: v1.WatchRuleSpec{GitTargetRef: v1.LocalObjectReference{Name: target},
				Rules: []v1.ResourceRule{{APIGroups: []string{""}, Resources: []string{resource}}}}}))
	}
	reconcile := func(ns, name string) {
		t.Helper()
		gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		_, err := clusters.Discover(src, c.resolvesEverything(gt, src))
		require.NoError(t, err)
	}

	rule("a", "one", "configmaps")
	rule("b", "two", "configmaps")
	reconcile("a", "one")
	reconcile("b", "two")
	reconcile("a", "one")
	assert.Equal(t, 1, discoveries(), "one discovery for both GitTargets")
	_, ok := clusters.Served(src)
	assert.True(t, ok, "the cluster's discovery is kept")

	rule("b", "two", "widgets") // a CRD the last discovery did not list
	reconcile("b", "two")
	assert.Equal(t, 2, discoveries(), "a rule asking for what was not served discovers again")
}

// TestAGitProviderReconcilesItsGitTargets: a GitProvider's change enqueues
// the GitTargets using it and those writing to the same repository (a path
// conflict may start or end), not every GitTarget.
func TestAGitProviderReconcilesItsGitTargets(t *testing.T) {
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	gps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	c := &Controller{targets: listers.NewGitTargetLister(targets), gps: listers.NewGitProviderLister(gps), queue: queue}
	provider := func(ns, name, url string) *v1.GitProvider {
		gp := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.GitProviderSpec{URL: url}}
		require.NoError(t, gps.Add(gp))
		return gp
	}
	target := func(ns, name, gp string) {
		require.NoError(t, targets.Add(&v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.GitTargetSpec{GitProviderRef: v1.LocalObjectReference{Name: gp}}}))
	}
	shop := provider("a", "repo", "https://git.example/shop.git")
	provider("b", "repo", "https://GIT.example/shop") // the same repository
	provider("c", "repo", "https://git.example/other.git")
	target("a", "uses", "repo")
	target("a", "other-provider", "none")
	target("b", "same-repository", "repo")
	target("c", "elsewhere", "repo")

	c.enqueueUsing(shop)
	var got []string
	for queue.Len() > 0 {
		key, _ := queue.Get()
		got = append(got, key)
		queue.Done(key)
	}
	assert.ElementsMatch(t, []string{"a/uses", "b/same-repository"}, got)
}

// TestNamespaceLabelsAreReadFromTheInformer: a reconcile reads a
// Namespace's labels from the informer's cache, which keeps only its name
// and labels; a Namespace the informer has not seen yet is asked for.
func TestNamespaceLabelsAreReadFromTheInformer(t *testing.T) {
	cached := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"},
		Annotations: map[string]string{"big": "x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}}}
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{"team": "b"}}}
	kube := kubefake.NewClientset(fresh)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	trimmed, err := namespaceLabelsOnly(cached)
	require.NoError(t, err)
	require.NoError(t, indexer.Add(trimmed))
	c := &Controller{cfg: Config{Kube: kube}, nsLister: corelisters.NewNamespaceLister(indexer)}

	got, err := c.namespaceLabels(context.Background(), "team-a")
	require.NoError(t, err)
	assert.Equal(t, labels.Set{"team": "a"}, got)
	assert.Empty(t, kube.Actions(), "a cached Namespace costs no request")
	kept, _, _ := indexer.GetByKey("team-a")
	assert.Equal(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}}, kept,
		"the cache keeps the name and labels only")

	got, err = c.namespaceLabels(context.Background(), "team-b")
	require.NoError(t, err)
	assert.Equal(t, labels.Set{"team": "b"}, got, "not cached yet: asked for")
	_, err = c.namespaceLabels(context.Background(), "gone")
	assert.Error(t, err)
}

// TestANamespaceLabelChangeReconcilesItsGitTargets: the labels select the
// namespace's GitTargets as consumers and receivers of loans; a change of
// them reconciles those GitTargets, no others, and a change of anything
// else reconciles none.
func TestANamespaceLabelChangeReconcilesItsGitTargets(t *testing.T) {
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	c := &Controller{targets: listers.NewGitTargetLister(targets), queue: queue}
	for _, key := range []string{"team-a/one", "team-a/two", "team-b/three"} {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		require.NoError(t, targets.Add(&v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
	}
	ns := func(rv string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", ResourceVersion: rv, Labels: labels}}
	}
	drain := func() []string { return queued(queue) }
	c.namespaceUpdated(ns("1", map[string]string{"lend": "yes"}), ns("2", map[string]string{"lend": "yes"}))
	assert.Empty(t, drain(), "the labels did not change")
	c.namespaceUpdated(ns("2", map[string]string{"lend": "yes"}), ns("3", nil))
	assert.ElementsMatch(t, []string{"team-a/one", "team-a/two"}, drain())
}

// TestADeletedGitTargetIsReconciled: a GitTarget's delete reconciles its own
// key, which tears its mirror down (it was never, so its streams, informers
// and worker ran on until a rule of its namespace changed), and every other
// GitTarget; a resync also reconciles the mirrors whose GitTarget is gone,
// should a delete have been missed.
func TestADeletedGitTargetIsReconciled(t *testing.T) {
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	c := &Controller{targets: listers.NewGitTargetLister(targets), queue: queue, mirrors: map[string]*mirrorState{}}
	require.NoError(t, targets.Add(&v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "kept"}}))
	drain := func() []string { return queued(queue) }
	gone := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "gone"}}
	c.targetDeleted(gone)
	assert.ElementsMatch(t, []string{"team-a/gone", "team-a/kept"}, drain())
	c.targetDeleted(cache.DeletedFinalStateUnknown{Key: "team-b/missed", Obj: gone})
	assert.ElementsMatch(t, []string{"team-b/missed", "team-a/kept"}, drain(), "a tombstone's key")

	c.mirrors["team-c/stale"] = &mirrorState{}
	c.enqueueAll()
	assert.ElementsMatch(t, []string{"team-a/kept", "team-c/stale"}, drain(), "a resync reaches a mirror whose GitTarget is gone")
}

// queued takes every key from queue, in order.
func queued(queue workqueue.TypedRateLimitingInterface[string]) []string {
	var got []string
	for queue.Len() > 0 {
		key, _ := queue.Get()
		got = append(got, key)
		queue.Done(key)
	}
	return got
}
