package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryfake "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
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
	c := &Controller{rules: listers.NewWatchRuleLister(rules),
		crules: listers.NewClusterWatchRuleLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))}
	src := &source{discovery: fake}
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
		_, err := c.discover(src, c.resolvesEverything(gt, src))
		require.NoError(t, err)
	}

	rule("a", "one", "configmaps")
	rule("b", "two", "configmaps")
	reconcile("a", "one")
	reconcile("b", "two")
	reconcile("a", "one")
	assert.Equal(t, 1, discoveries(), "one discovery for both GitTargets")
	assert.False(t, src.discoveredAt.IsZero(), "the KubeProvider's status knows the source answered")

	rule("b", "two", "widgets") // a CRD the last discovery did not list
	reconcile("b", "two")
	assert.Equal(t, 2, discoveries(), "a rule asking for what was not served discovers again")
}
