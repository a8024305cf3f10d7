package claims

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
)

// One model reads both kinds of claim: the same fields from a FluxClaim
// and an ArgoCDClaim, a copy the cache does not share, and writes that go
// to the claim's own kind.
func TestOneModelReadsAndWritesBothKinds(t *testing.T) {
	fc := &v1.FluxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "apps"}, Spec: v1.FluxClaimSpec{
		KubeProviderRef: v1.LocalObjectReference{Name: "local"}, KustomizationRef: v1.ObjectReference{Namespace: "flux-system", Name: "apps"},
		CatchUpAfter: &metav1.Duration{Duration: time.Minute}}}
	ac := &v1.ArgoCDClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "apps"}, Spec: v1.ArgoCDClaimSpec{
		KubeProviderRef: v1.LocalObjectReference{Name: "remote"}, ApplicationRef: v1.ObjectReference{Namespace: "argocd", Name: "web"}}}
	client := fake.NewSimpleClientset(fc, ac)
	f := informers.NewSharedInformerFactory(client, 0)
	r := NewReader(f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	synced := f.WaitForCacheSync(ctx.Done())
	require.NotEmpty(t, synced)
	for typ, ok := range synced {
		require.True(t, ok, "%v", typ)
	}

	flux, err := r.Get(v1.ApplierKindFluxClaim, "team", "apps")
	require.NoError(t, err)
	assert.Equal(t, "FluxClaim/team/apps", flux.Key())
	assert.Equal(t, "local", flux.KubeProvider)
	assert.Equal(t, applier.Ref{Namespace: "flux-system", Name: "apps"}, flux.Target)
	assert.Equal(t, time.Minute, flux.CatchUpAfter.Duration)

	argo, err := r.Get(v1.ApplierKindArgoCDClaim, "team", "apps")
	require.NoError(t, err)
	assert.Equal(t, "ArgoCDClaim/team/apps", argo.Key(), "two kinds may share a name")
	assert.Equal(t, applier.Ref{Namespace: "argocd", Name: "web"}, argo.Target)
	assert.Nil(t, argo.CatchUpAfter)

	_, err = r.Get(v1.ApplierKindFluxClaim, "team", "absent")
	assert.True(t, apierrors.IsNotFound(err))
	_, err = r.Get("Other", "team", "apps")
	assert.Error(t, err)

	argo.Status.LastAppliedRevision = "main@sha1:abc"
	again, err := r.Get(v1.ApplierKindArgoCDClaim, "team", "apps")
	require.NoError(t, err)
	assert.Empty(t, again.Status.LastAppliedRevision, "a copy: the cache is untouched")
	require.NoError(t, argo.write(ctx, client.ReverserV1alpha1(), true))
	stored, err := client.ReverserV1alpha1().ArgoCDClaims("team").Get(ctx, "apps", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "main@sha1:abc", stored.Status.LastAppliedRevision)
	flux.Meta.Finalizers = []string{Finalizer}
	require.NoError(t, flux.write(ctx, client.ReverserV1alpha1(), false))
	storedFlux, err := client.ReverserV1alpha1().FluxClaims("team").Get(ctx, "apps", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{Finalizer}, storedFlux.Finalizers)
}
