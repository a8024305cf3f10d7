package applier

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func fluxObject(gvr schema.GroupVersionResource, kind, name, interval string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace("flux-system")
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, interval, "spec", "interval")
	return u
}

func kustomization(name, repo string) *unstructured.Unstructured {
	return fluxObject(v1.FluxKustomizations, "Kustomization", name, "10m",
		map[string]any{"sourceRef": map[string]any{"kind": "GitRepository", "name": repo}, "path": "./apps"})
}

func newFlux(objs ...runtime.Object) *Flux {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1.FluxKustomizations: "KustomizationList", v1.FluxGitRepositories: "GitRepositoryList"}, objs...)
	return &Flux{Client: client}
}

func (f *Flux) get(t *testing.T, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := f.Client.Resource(gvr).Namespace("flux-system").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return obj
}

func interval(obj *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(obj.Object, "spec", "interval")
	return v
}

// TestTakeOverAndReleaseGiveTheScheduleBackAsItWas (E1): a claim holds the
// Kustomization's and its GitRepository's schedules; releasing it leaves
// both exactly as they were.
func TestTakeOverAndReleaseGiveTheScheduleBackAsItWas(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "repo", "1m", map[string]any{"url": "http://127.0.0.1/r.git"})
	apps := kustomization("apps", "repo")
	apps.SetAnnotations(map[string]string{"owner": "team"})
	f := newFlux(apps, repo)
	ks := Ref{Namespace: "flux-system", Name: "apps"}
	before := f.get(t, v1.FluxKustomizations, "apps")

	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil))
	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil), "idempotent")
	held := f.get(t, v1.FluxKustomizations, "apps")
	assert.Equal(t, HeldInterval, interval(held))
	assert.Equal(t, "team/apps", held.GetAnnotations()[v1.ClaimedByAnnotation])
	assert.Equal(t, "10m", held.GetAnnotations()[v1.OriginalIntervalAnnotation])
	assert.Equal(t, HeldInterval, interval(f.get(t, v1.FluxGitRepositories, "repo")))

	err := f.TakeOver(ctx, ks, "other/claim", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "held by FluxClaim team/apps already")

	require.NoError(t, f.Release(ctx, ks, "team/apps"))
	after := f.get(t, v1.FluxKustomizations, "apps")
	assert.Equal(t, "10m", interval(after))
	assert.Equal(t, before.GetAnnotations(), after.GetAnnotations(), "no annotation of Reverser's is left")
	gitRepo := f.get(t, v1.FluxGitRepositories, "repo")
	assert.Equal(t, "1m", interval(gitRepo))
	assert.Empty(t, gitRepo.GetAnnotations())
	require.NoError(t, f.Release(ctx, ks, "team/apps"), "releasing twice is fine")
}

// TestASharedGitRepositoryIsReleasedByItsLastClaim: two Kustomizations of
// one GitRepository, claimed by two claims: the source keeps the held
// interval until both are released, then gets its own back.
func TestASharedGitRepositoryIsReleasedByItsLastClaim(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "repo", "5m", map[string]any{"url": "http://127.0.0.1/r.git"})
	f := newFlux(kustomization("a", "repo"), kustomization("b", "repo"), repo)
	require.NoError(t, f.TakeOver(ctx, Ref{"flux-system", "a"}, "team/a", nil))
	require.NoError(t, f.TakeOver(ctx, Ref{"flux-system", "b"}, "team/b", nil))
	assert.Equal(t, "team/a,team/b", f.get(t, v1.FluxGitRepositories, "repo").GetAnnotations()[v1.ClaimedByAnnotation])

	require.NoError(t, f.Release(ctx, Ref{"flux-system", "a"}, "team/a"))
	assert.Equal(t, HeldInterval, interval(f.get(t, v1.FluxGitRepositories, "repo")), "b still holds it")
	require.NoError(t, f.Release(ctx, Ref{"flux-system", "b"}, "team/b"))
	assert.Equal(t, "5m", interval(f.get(t, v1.FluxGitRepositories, "repo")))
}

func TestOnlyGitRepositoriesAreFollowed(t *testing.T) {
	ks := fluxObject(v1.FluxKustomizations, "Kustomization", "oci", "10m", map[string]any{"sourceRef": map[string]any{"kind": "OCIRepository", "name": "x"}})
	f := newFlux(ks)
	err := f.TakeOver(context.Background(), Ref{"flux-system", "oci"}, "team/oci", nil)
	require.ErrorIs(t, err, ErrNotGitRepository)
	assert.Equal(t, "10m", interval(f.get(t, v1.FluxKustomizations, "oci")), "nothing changed")
}

// setStatus plays Flux's controllers: obj handled token.
func (f *Flux) setStatus(t *testing.T, gvr schema.GroupVersionResource, name string, status map[string]any) {
	t.Helper()
	obj := f.get(t, gvr, name)
	require.NoError(t, unstructured.SetNestedMap(obj.Object, status, "status"))
	_, err := f.Client.Resource(gvr).Namespace("flux-system").Update(context.Background(), obj, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// TestAConvergeFetchesThenApplies (E1): the GitRepository is asked first;
// the Kustomization only once the fetch was handled; the converge ends
// with the revision the Kustomization reports.
func TestAConvergeFetchesThenApplies(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "repo", "1m", map[string]any{"url": "http://127.0.0.1/r.git"})
	f := newFlux(kustomization("apps", "repo"), repo)
	ks := Ref{"flux-system", "apps"}
	c, err := f.Request(ctx, ks, "2026-11-30T12:00:00Z")
	require.NoError(t, err)
	assert.Equal(t, "2026-11-30T12:00:00Z", f.get(t, v1.FluxGitRepositories, "repo").GetAnnotations()[RequestedAtAnnotation])
	assert.Empty(t, f.get(t, v1.FluxKustomizations, "apps").GetAnnotations()[RequestedAtAnnotation], "not before the fetch")

	p, err := f.Follow(ctx, ks, c, nil)
	require.NoError(t, err)
	assert.False(t, p.Done)
	assert.False(t, c.Applying, "the fetch is not handled yet")

	f.setStatus(t, v1.FluxGitRepositories, "repo", map[string]any{"lastHandledReconcileAt": "2026-11-30T12:00:00Z"})
	p, err = f.Follow(ctx, ks, c, nil)
	require.NoError(t, err)
	assert.False(t, p.Done)
	assert.True(t, c.Applying)
	assert.Equal(t, "2026-11-30T12:00:00Z", f.get(t, v1.FluxKustomizations, "apps").GetAnnotations()[RequestedAtAnnotation])

	f.setStatus(t, v1.FluxKustomizations, "apps", map[string]any{"lastHandledReconcileAt": "2026-11-30T12:00:00Z",
		"lastAppliedRevision": "main@sha1:0123", "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}})
	p, err = f.Follow(ctx, ks, c, nil)
	require.NoError(t, err)
	assert.Equal(t, Progress{Done: true, Applied: "main@sha1:0123"}, p)
}

// TestAConvergeMayYieldBeforeItApplies (E2): once the fetch is handled, a
// resume that says no abandons the converge before the Kustomization is
// asked, so nothing reaches the cluster.
func TestAConvergeMayYieldBeforeItApplies(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "repo", "1m", map[string]any{"url": "http://127.0.0.1/r.git"})
	f := newFlux(kustomization("apps", "repo"), repo)
	k := &Kustomization{Flux: f, Ref: Ref{"flux-system", "apps"}}
	op, err := k.Send(ctx, "2026-11-30T12:00:00Z")
	require.NoError(t, err)
	f.setStatus(t, v1.FluxGitRepositories, "repo", map[string]any{"lastHandledReconcileAt": "2026-11-30T12:00:00Z"})
	p, err := op.Follow(ctx, func() bool { return false })
	require.NoError(t, err)
	assert.True(t, p.Done && p.Abandoned)
	assert.Empty(t, f.get(t, v1.FluxKustomizations, "apps").GetAnnotations()[RequestedAtAnnotation], "the Kustomization was never asked")
}

func TestCommitOf(t *testing.T) {
	assert.Equal(t, "0123", CommitOf("main@sha1:0123"))
	assert.Equal(t, "0123", CommitOf("0123"))
}

// TestHeldByReadsTheAnnotationOnlyTakeOverWrites (tenancy): whether a claim
// holds a Kustomization is read from the Kustomization, which a tenant who
// may only write the claim's status cannot change; a forged Held condition
// hands nobody Flux.
func TestHeldByReadsTheAnnotationOnlyTakeOverWrites(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "repo", "1m", map[string]any{"url": "http://127.0.0.1/r.git"})
	f := newFlux(kustomization("apps", "repo"), repo)
	ks := Ref{"flux-system", "apps"}
	held, ns, err := f.HeldBy(ctx, ks, "team/apps")
	require.NoError(t, err)
	assert.False(t, held, "not taken over")
	assert.Empty(t, ns, "no spec.targetNamespace")
	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil))
	obj := f.get(t, v1.FluxKustomizations, "apps")
	require.NoError(t, unstructured.SetNestedField(obj.Object, "shop", "spec", "targetNamespace"))
	_, err = f.Client.Resource(v1.FluxKustomizations).Namespace("flux-system").Update(ctx, obj, metav1.UpdateOptions{})
	require.NoError(t, err)
	held, ns, err = f.HeldBy(ctx, ks, "team/apps")
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, "shop", ns, "documents without a namespace go to spec.targetNamespace")
	held, _, err = f.HeldBy(ctx, ks, "mallory/apps")
	require.NoError(t, err)
	assert.False(t, held, "another namespace's claim of the same name holds nothing")
	_, _, err = f.HeldBy(ctx, Ref{"flux-system", "gone"}, "team/apps")
	assert.Error(t, err)
}

// TestASourceTheAuthorMayNotPatchIsNeverHeld (#27, finding 1): holding a
// Kustomization also holds its GitRepository, which may be another team's;
// when may refuses it, nothing at all is written.
func TestASourceTheAuthorMayNotPatchIsNeverHeld(t *testing.T) {
	ctx := context.Background()
	repo := fluxObject(v1.FluxGitRepositories, "GitRepository", "platform", "1m", map[string]any{"url": "http://127.0.0.1/r.git"})
	ks := kustomization("apps", "platform")
	f := newFlux(ks, repo)
	refused := errors.New("bob may not patch it")
	var asked []string
	err := f.TakeOver(ctx, Ref{"flux-system", "apps"}, "team/apps", func(_ context.Context, gr schema.GroupResource, obj Ref) error {
		asked = append(asked, gr.String()+" "+obj.String())
		return refused
	})
	require.ErrorIs(t, err, refused)
	assert.Equal(t, []string{"gitrepositories.source.toolkit.fluxcd.io flux-system/platform"}, asked)
	assert.Equal(t, "10m", interval(f.get(t, v1.FluxKustomizations, "apps")), "the Kustomization is not held either")
	assert.Empty(t, f.get(t, v1.FluxKustomizations, "apps").GetAnnotations())
	assert.Equal(t, "1m", interval(f.get(t, v1.FluxGitRepositories, "platform")))
	assert.Empty(t, f.get(t, v1.FluxGitRepositories, "platform").GetAnnotations())
}

// TestWhatWasHeldIsGivenBackWhateverTheSourceRefSaysNow (#27, finding 1):
// the Kustomization's writer points it at another source while held; the
// next hold and the release give the first source back, as it was.
func TestWhatWasHeldIsGivenBackWhateverTheSourceRefSaysNow(t *testing.T) {
	ctx := context.Background()
	platform := fluxObject(v1.FluxGitRepositories, "GitRepository", "platform", "1m", map[string]any{"url": "http://127.0.0.1/p.git"})
	mine := fluxObject(v1.FluxGitRepositories, "GitRepository", "mine", "2m", map[string]any{"url": "http://127.0.0.1/m.git"})
	f := newFlux(kustomization("apps", "platform"), platform, mine)
	ks := Ref{"flux-system", "apps"}
	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil))
	require.Equal(t, HeldInterval, interval(f.get(t, v1.FluxGitRepositories, "platform")))

	moved := f.get(t, v1.FluxKustomizations, "apps")
	require.NoError(t, unstructured.SetNestedField(moved.Object, "mine", "spec", "sourceRef", "name"))
	_, err := f.Client.Resource(v1.FluxKustomizations).Namespace("flux-system").Update(ctx, moved, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Release(ctx, ks, "team/apps"))
	assert.Equal(t, "1m", interval(f.get(t, v1.FluxGitRepositories, "platform")), "the source held, given back")
	assert.Empty(t, f.get(t, v1.FluxGitRepositories, "platform").GetAnnotations())
	assert.Equal(t, "2m", interval(f.get(t, v1.FluxGitRepositories, "mine")), "never held")

	// Held again, then moved: the next hold gives the old source back.
	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil))
	require.Equal(t, HeldInterval, interval(f.get(t, v1.FluxGitRepositories, "mine")))
	moved = f.get(t, v1.FluxKustomizations, "apps")
	require.NoError(t, unstructured.SetNestedField(moved.Object, "platform", "spec", "sourceRef", "name"))
	_, err = f.Client.Resource(v1.FluxKustomizations).Namespace("flux-system").Update(ctx, moved, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.TakeOver(ctx, ks, "team/apps", nil))
	assert.Equal(t, "2m", interval(f.get(t, v1.FluxGitRepositories, "mine")))
	assert.Equal(t, HeldInterval, interval(f.get(t, v1.FluxGitRepositories, "platform")))
}
