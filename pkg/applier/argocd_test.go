package applier

import (
	"context"
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

func application(name string, automated map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"source":      map[string]any{"repoURL": "http://127.0.0.1/r.git", "path": "apps", "targetRevision": "main"},
		"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "shop"}}}}
	if automated != nil {
		_ = unstructured.SetNestedMap(u.Object, automated, "spec", "syncPolicy", "automated")
	}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("Application")
	u.SetNamespace("argocd")
	u.SetName(name)
	return u
}

func newArgoCD(objs ...runtime.Object) *ArgoCD {
	return &ArgoCD{Client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1.ArgoCDApplications: "ApplicationList"}, objs...)}
}

func (a *ArgoCD) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := a.Client.Resource(v1.ArgoCDApplications).Namespace("argocd").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return obj
}

// TestAnArgoCDClaimTurnsAutomatedSyncOffAndGivesItBack (E1): the claim
// removes spec.syncPolicy.automated and the release writes back exactly
// what was there; an Application without automated sync stays without.
func TestAnArgoCDClaimTurnsAutomatedSyncOffAndGivesItBack(t *testing.T) {
	ctx := context.Background()
	automated := map[string]any{"prune": true, "selfHeal": true}
	a := newArgoCD(application("apps", automated), application("manual", nil))
	app := Ref{Namespace: "argocd", Name: "apps"}
	require.NoError(t, a.TakeOver(ctx, app, "team/apps", nil))
	_, found, _ := unstructured.NestedMap(a.get(t, "apps").Object, "spec", "syncPolicy", "automated")
	assert.False(t, found, "automated sync off while held")
	held, ns, err := a.HeldBy(ctx, app, "team/apps")
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, "shop", ns, "documents without a namespace go to spec.destination.namespace")
	require.NoError(t, a.TakeOver(ctx, app, "team/apps", nil), "idempotent")
	assert.ErrorContains(t, a.TakeOver(ctx, app, "other/apps", nil), "is held by ArgoCDClaim team/apps")

	require.NoError(t, a.Release(ctx, app, "team/apps"))
	got, found, _ := unstructured.NestedMap(a.get(t, "apps").Object, "spec", "syncPolicy", "automated")
	assert.True(t, found)
	assert.Equal(t, automated, got, "given back as it was")
	assert.Empty(t, a.get(t, "apps").GetAnnotations(), "nothing of Reverser's left")

	manual := Ref{Namespace: "argocd", Name: "manual"}
	require.NoError(t, a.TakeOver(ctx, manual, "team/manual", nil))
	require.NoError(t, a.Release(ctx, manual, "team/manual"))
	_, found, _ = unstructured.NestedMap(a.get(t, "manual").Object, "spec", "syncPolicy", "automated")
	assert.False(t, found, "a manual Application stays manual")
}

// TestASyncFollowsTheOperationState (E1): a converge writes .operation with
// its token; it is done once the operationState carrying the token reached
// a final phase, with the revision Argo CD synced.
func TestASyncFollowsTheOperationState(t *testing.T) {
	ctx := context.Background()
	a := newArgoCD(application("apps", nil))
	app := &Application{ArgoCD: a, Ref: Ref{Namespace: "argocd", Name: "apps"}}
	op, err := app.Send(ctx, "t1")
	require.NoError(t, err)
	infos, _, _ := unstructured.NestedSlice(a.get(t, "apps").Object, "operation", "info")
	assert.Equal(t, []any{map[string]any{"name": ConvergeInfo, "value": "t1"}}, infos)

	setState := func(token, phase string) {
		obj := a.get(t, "apps")
		require.NoError(t, unstructured.SetNestedMap(obj.Object, map[string]any{
			"phase": phase, "message": "hooks failed",
			"operation":  map[string]any{"info": []any{map[string]any{"name": ConvergeInfo, "value": token}}},
			"syncResult": map[string]any{"revision": "0123"}}, "status", "operationState"))
		_, err := a.Client.Resource(v1.ArgoCDApplications).Namespace("argocd").Update(ctx, obj, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	p, err := op.Follow(ctx, nil)
	require.NoError(t, err)
	assert.False(t, p.Done, "not started")
	setState("t0", "Succeeded")
	p, _ = op.Follow(ctx, nil)
	assert.False(t, p.Done, "another operation's state")
	setState("t1", "Running")
	p, _ = op.Follow(ctx, nil)
	assert.False(t, p.Done)
	setState("t1", "Succeeded")
	p, _ = op.Follow(ctx, nil)
	assert.Equal(t, "0123", p.Revision)
	assert.True(t, p.Done)
	assert.Empty(t, p.Failure)
	setState("t1", "Failed")
	p, _ = op.Follow(ctx, nil)
	assert.Equal(t, "sync Failed: hooks failed", p.Failure)
}
