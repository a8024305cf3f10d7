package commitrequest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
)

func discoveryWith(groups ...*metav1.APIResourceList) *fakediscovery.FakeDiscovery {
	return &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: groups}}
}

// TestNotServed: a cluster serving other versions of the group is told
// apart from one without the kind, and each message names the fix.
func TestNotServed(t *testing.T) {
	state := notServed(discoveryWith(&metav1.APIResourceList{GroupVersion: "v1"}))
	assert.Equal(t, ReasonCRDNotInstalled, state.reason)
	assert.Contains(t, state.message, "kubectl apply --server-side -k artifacts/source")

	state = notServed(discoveryWith(&metav1.APIResourceList{GroupVersion: "reverser.dev/v1beta9",
		APIResources: []metav1.APIResource{{Name: "commitrequests"}}}))
	assert.Equal(t, ReasonVersionNotServed, state.reason)
	assert.Contains(t, state.message, "serves reverser.dev in versions v1beta9, not v1alpha1")
}

// TestFromError: refusals are Forbidden, naming the rights; anything else
// is Unreachable.
func TestFromError(t *testing.T) {
	gr := schema.GroupResource{Group: v1.GroupName, Resource: "commitrequests"}
	state := fromError(apierrors.NewForbidden(gr, "", errors.New("RBAC")), "listing commitrequests in namespace a")
	assert.Equal(t, ReasonForbidden, state.reason)
	assert.Contains(t, state.message, "grant it get, list and watch on commitrequests and update on commitrequests/status")
	assert.Equal(t, ReasonForbidden, fromError(apierrors.NewUnauthorized("expired"), "discovery").reason)
	state = fromError(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "discovery")
	assert.Equal(t, ReasonUnreachable, state.reason)
	assert.Contains(t, state.message, "check the kubeconfig's server address")
	assert.Contains(t, neededRights(v1.CommitRequestsReconcileAndDeleteFinished), "patch and delete")
}

// TestLent: a provider lends each of its GitTargets the source namespace
// of its own namespace's name and the loans to it; a loan of "*" is one
// watch; other providers' GitTargets and refused consumers lend nothing.
func TestLent(t *testing.T) {
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, gt := range []*v1.GitTarget{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a"}, Spec: v1.GitTargetSpec{KubeProviderRef: v1.LocalObjectReference{Name: "far"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "b"}, Spec: v1.GitTargetSpec{KubeProviderRef: v1.LocalObjectReference{Name: "far"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "c"}, Spec: v1.GitTargetSpec{KubeProviderRef: v1.LocalObjectReference{Name: "near"}}},
	} {
		require.NoError(t, targets.Add(gt))
	}
	s := &Sources{targets: listers.NewGitTargetLister(targets)}
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "far"}, Spec: v1.KubeProviderSpec{
		Lend: []v1.NamespaceLoan{{SourceNamespaces: []string{"shared", "web"}, To: v1.NamespaceSelection{From: v1.NamespacesFromNames,
			Names: []string{"team"}}}},
	}}
	got, err := s.lent(context.Background(), kp)
	require.NoError(t, err)
	assert.Equal(t, []string{"shared", "web"}, got, "another cluster lends no namespace for its name alone (#27 finding 5)")

	kp.Spec.LendSameNamespaces = true
	got, err = s.lent(context.Background(), kp)
	require.NoError(t, err)
	assert.Equal(t, []string{"ops", "shared", "team", "web"}, got)

	kp.Spec.ConsumerNamespaces = &v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"ops"}}
	got, err = s.lent(context.Background(), kp)
	require.NoError(t, err)
	assert.Equal(t, []string{"ops"}, got, "a GitTarget the provider refuses lends nothing")

	kp.Spec.ConsumerNamespaces = nil
	kp.Spec.Lend = []v1.NamespaceLoan{{SourceNamespaces: []string{"*"}, To: v1.NamespaceSelection{From: v1.NamespacesFromAll}}}
	got, err = s.lent(context.Background(), kp)
	require.NoError(t, err)
	assert.Equal(t, []string{"*"}, got, "one watch over the cluster")

	got, err = s.lent(context.Background(), &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "unused"}})
	require.NoError(t, err)
	assert.Empty(t, got)
}

// TestFrontEndsPerNamespace: a namespace lent later starts its own front
// end and leaves the running ones (and their saves) alone; one withdrawn
// stops only its own; a rotated credential restarts them all.
func TestFrontEndsPerNamespace(t *testing.T) {
	f := &frontEnds{ctx: context.Background(), running: map[string]map[string]*frontEnd{}}
	started := map[string]int{}
	contexts := map[string]context.Context{}
	start := func(ctx context.Context, ns string) error {
		started[ns]++
		contexts[ns] = ctx
		return nil
	}
	key := frontEndKey{fingerprint: "a", mode: v1.CommitRequestsReconcile}
	require.NoError(t, f.ensure("far", []string{"team"}, key, start))
	assert.True(t, f.serving("far", []string{"team"}, key))
	require.NoError(t, f.ensure("far", []string{"ops", "team"}, key, start))
	assert.Equal(t, map[string]int{"team": 1, "ops": 1}, started, "team's front end kept running")
	assert.NoError(t, contexts["team"].Err())

	f.prune("far", []string{"ops"}, key)
	assert.Error(t, contexts["team"].Err(), "a withdrawn namespace stops")
	assert.NoError(t, contexts["ops"].Err())
	assert.False(t, f.serving("far", []string{"ops", "team"}, key))

	rotated := frontEndKey{fingerprint: "b", mode: v1.CommitRequestsReconcile}
	require.NoError(t, f.ensure("far", []string{"ops"}, rotated, start))
	assert.Equal(t, 2, started["ops"], "a rotated credential restarts it")
	assert.True(t, f.serving("far", []string{"ops"}, rotated))
	f.stopAll()
	assert.Error(t, contexts["ops"].Err())
	assert.False(t, f.serving("far", []string{"ops"}, rotated))
}
