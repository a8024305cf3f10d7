package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"reverser.dev/reverser/pkg/apiserver"
)

// TestRestartKeepsObjects stops the server and starts a new one on the same
// embedded etcd directory and PKI: every object is still there, unchanged,
// and the old admin kubeconfig still works.
func TestRestartKeepsObjects(t *testing.T) {
	dir := t.TempDir()
	first := startServer(t, serverSetup{dir: dir})
	ctx, c := ctxT(t), first.adminClient()
	uids := map[string]types.UID{}
	for _, name := range []string{"one", "two", "three"} {
		gt, err := c.GitTargets(ns).Create(ctx, gitTarget(name), metav1.CreateOptions{})
		require.NoError(t, err)
		uids[name] = gt.UID
	}
	cr, err := c.CommitRequests(ns).Create(ctx, commitRequest("kept", "one"), metav1.CreateOptions{})
	require.NoError(t, err)
	oldAdmin := first.admin
	first.stop()

	second := startServer(t, serverSetup{dir: dir})
	assert.Equal(t, oldAdmin.CAData, second.admin.CAData, "the CA survives a restart")
	c = second.adminClient()
	list, err := c.GitTargets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 3)
	for _, gt := range list.Items {
		assert.Equal(t, uids[gt.Name], gt.UID)
	}
	got, err := c.CommitRequests(ns).Get(ctx, "kept", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, cr.Status.Author, got.Status.Author)
	assert.Equal(t, cr.Spec, got.Spec)
}

// TestTwoServersShareOneEtcd runs two API servers on one external etcd, as
// replicas do: what one writes, the other reads and watches.
func TestTwoServersShareOneEtcd(t *testing.T) {
	etcd, err := apiserver.StartEmbeddedEtcd(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(etcd.Close)
	pki := t.TempDir() // one CA, so one kubeconfig fits both
	a := startServer(t, serverSetup{dir: pki, etcdEndpoints: []string{etcd.Endpoint}})
	b := startServer(t, serverSetup{dir: pki, etcdEndpoints: []string{etcd.Endpoint}})
	ctx := ctxT(t)

	w, err := b.adminClient().GitTargets(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	defer w.Stop()

	_, err = a.adminClient().GitTargets(ns).Create(ctx, gitTarget("replicated"), metav1.CreateOptions{})
	require.NoError(t, err)
	got, err := b.adminClient().GitTargets(ns).Get(ctx, "replicated", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "main", got.Spec.Branch)

	select {
	case ev := <-w.ResultChan():
		assert.Equal(t, watch.Added, ev.Type)
	case <-time.After(30 * time.Second):
		t.Fatal("server b did not see server a's create")
	}

	// An update through b conflicts with a stale copy from a, as on one server.
	stale, err := a.adminClient().GitTargets(ns).Get(ctx, "replicated", metav1.GetOptions{})
	require.NoError(t, err)
	got.Spec.Prune = "OnEvent"
	_, err = b.adminClient().GitTargets(ns).Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	stale.Labels = map[string]string{"x": "y"}
	_, err = a.adminClient().GitTargets(ns).Update(ctx, stale, metav1.UpdateOptions{})
	require.Error(t, err, "optimistic concurrency holds across replicas")
}
