package integration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// TestMetadataClientDeletesCollections does what kube-controller-manager's
// namespace deleter does: list and delete by metadata, preferring protobuf.
// Our types have no protobuf form, so the server must answer in JSON.
func TestMetadataClientDeletesCollections(t *testing.T) {
	s := startServer(t, serverSetup{dir: t.TempDir()})
	ctx, c := ctxT(t), s.adminClient()
	for _, name := range []string{"a", "b"} {
		_, err := c.GitTargets(ns).Create(ctx, gitTarget(name), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	cfg := rest.CopyConfig(s.admin)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	md := metadata.NewForConfigOrDie(cfg).Resource(v1.SchemeGroupVersion.WithResource("gittargets")).Namespace(ns)

	list, err := md.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 2)
	require.NoError(t, md.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	left, err := c.GitTargets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, left.Items)
}
