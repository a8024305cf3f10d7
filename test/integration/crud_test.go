package integration

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	ac "reverser.dev/reverser/pkg/generated/applyconfiguration/reverser/v1alpha1"
)

type object interface {
	runtime.Object
	metav1.Object
}

// kindClient is what every generated typed client offers.
type kindClient[T object, L runtime.Object, A any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	UpdateStatus(context.Context, T, metav1.UpdateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Get(context.Context, string, metav1.GetOptions) (T, error)
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error)
	Apply(context.Context, A, metav1.ApplyOptions) (T, error)
}

// crud drives one kind through create, get, list, watch, update, status
// update, patch, server-side apply and delete.
type crud[T object, L runtime.Object, A any] struct {
	client kindClient[T, L, A]
	obj    T
	// mutate changes the spec (or, for immutable specs, metadata).
	mutate      func(T)
	specMutable bool
	// labelApply returns an apply configuration setting one label.
	labelApply func(name string, labels map[string]string) A
}

func (c crud[T, L, A]) run(t *testing.T) {
	ctx := ctxT(t)
	name := c.obj.GetName()
	w, err := c.client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(t, err)
	defer w.Stop()

	created, err := c.client.Create(ctx, c.obj, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, created.GetGeneration())

	got, err := c.client.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, created.GetUID(), got.GetUID())

	list, err := c.client.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Contains(t, names(t, list), name)

	// A status write on the main resource is ignored.
	setConditions(got, []metav1.Condition{readyCondition("Forged")})
	c.mutate(got)
	updated, err := c.client.Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Empty(t, *conditions(updated), "status written through the main resource")
	wantGen := int64(1)
	if c.specMutable {
		wantGen = 2
	}
	assert.Equal(t, wantGen, updated.GetGeneration(), "generation counts spec changes")

	// The status subresource writes status and nothing else.
	setConditions(updated, []metav1.Condition{readyCondition("Reconciled")})
	updated.SetLabels(map[string]string{"through": "status"})
	statused, err := c.client.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Len(t, *conditions(statused), 1)
	assert.Equal(t, "Reconciled", (*conditions(statused))[0].Reason)
	assert.NotContains(t, statused.GetLabels(), "through", "metadata written through the status subresource")
	assert.Equal(t, wantGen, statused.GetGeneration(), "status writes do not bump generation")

	patched, err := c.client.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Equal(t, "yes", patched.GetLabels()["patched"])

	applied, err := c.client.Apply(ctx, c.labelApply(name, map[string]string{"applied": "yes"}),
		metav1.ApplyOptions{FieldManager: "integration", Force: true})
	require.NoError(t, err)
	assert.Equal(t, "yes", applied.GetLabels()["applied"])
	assert.Equal(t, "yes", applied.GetLabels()["patched"], "apply keeps fields other managers own")
	assert.Len(t, *conditions(applied), 1, "apply on the main resource keeps status")

	require.NoError(t, c.client.Delete(ctx, name, metav1.DeleteOptions{}))
	_, err = c.client.Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "get after delete: %v", err)

	seen := map[watch.EventType]int{}
	deadline := time.After(30 * time.Second)
	for seen[watch.Deleted] == 0 {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "watch closed early")
			seen[ev.Type]++
		case <-deadline:
			t.Fatalf("watch did not see the delete; saw %v", seen)
		}
	}
	assert.Equal(t, 1, seen[watch.Added])
	assert.GreaterOrEqual(t, seen[watch.Modified], 4, "update, status, patch and apply each notify")
}

func TestEveryKindCRUD(t *testing.T) {
	s := startServer(t, serverSetup{dir: t.TempDir()})
	c := s.adminClient()

	t.Run("GitProvider", crud[*v1.GitProvider, *v1.GitProviderList, *ac.GitProviderApplyConfiguration]{
		client: c.GitProviders(ns), obj: gitProvider("repo"), specMutable: true,
		mutate: func(o *v1.GitProvider) { o.Spec.URL = "ssh://git@git.example.com/org/other.git" },
		labelApply: func(n string, l map[string]string) *ac.GitProviderApplyConfiguration {
			return ac.GitProvider(n, ns).WithLabels(l)
		},
	}.run)
	t.Run("KubeProvider", crud[*v1.KubeProvider, *v1.KubeProviderList, *ac.KubeProviderApplyConfiguration]{
		client: c.KubeProviders(), obj: kubeProvider("local"), specMutable: true,
		mutate: func(o *v1.KubeProvider) {
			o.Spec.Lend = []v1.NamespaceLoan{{SourceNamespaces: []string{"team-a"}, To: v1.NamespaceSelection{From: v1.NamespacesFromAll}}}
		},
		labelApply: func(n string, l map[string]string) *ac.KubeProviderApplyConfiguration {
			return ac.KubeProvider(n).WithLabels(l)
		},
	}.run)
	t.Run("GitTarget", crud[*v1.GitTarget, *v1.GitTargetList, *ac.GitTargetApplyConfiguration]{
		client: c.GitTargets(ns), obj: gitTarget("site"), specMutable: true,
		mutate: func(o *v1.GitTarget) { o.Spec.Prune = v1.PruneOnEvent },
		labelApply: func(n string, l map[string]string) *ac.GitTargetApplyConfiguration {
			return ac.GitTarget(n, ns).WithLabels(l)
		},
	}.run)
	t.Run("WatchRule", crud[*v1.WatchRule, *v1.WatchRuleList, *ac.WatchRuleApplyConfiguration]{
		client: c.WatchRules(ns), obj: watchRule("configmaps"), specMutable: true,
		mutate: func(o *v1.WatchRule) { o.Spec.SourceNamespace = "other" },
		labelApply: func(n string, l map[string]string) *ac.WatchRuleApplyConfiguration {
			return ac.WatchRule(n, ns).WithLabels(l)
		},
	}.run)
	t.Run("ClusterWatchRule", crud[*v1.ClusterWatchRule, *v1.ClusterWatchRuleList, *ac.ClusterWatchRuleApplyConfiguration]{
		client: c.ClusterWatchRules(), obj: clusterWatchRule("roles"), specMutable: true,
		mutate: func(o *v1.ClusterWatchRule) {
			o.Spec.Rules[0].Resources = append(o.Spec.Rules[0].Resources, "clusterrolebindings")
		},
		labelApply: func(n string, l map[string]string) *ac.ClusterWatchRuleApplyConfiguration {
			return ac.ClusterWatchRule(n).WithLabels(l)
		},
	}.run)
	t.Run("CommitRequest", crud[*v1.CommitRequest, *v1.CommitRequestList, *ac.CommitRequestApplyConfiguration]{
		client: c.CommitRequests(ns), obj: commitRequest("save", "ghost"), specMutable: false,
		mutate: func(o *v1.CommitRequest) { o.Labels = map[string]string{"team": "a"} },
		labelApply: func(n string, l map[string]string) *ac.CommitRequestApplyConfiguration {
			return ac.CommitRequest(n, ns).WithLabels(l)
		},
	}.run)
	t.Run("FluxClaim", crud[*v1.FluxClaim, *v1.FluxClaimList, *ac.FluxClaimApplyConfiguration]{
		client: c.FluxClaims(ns), obj: fluxClaim("apps"), specMutable: true,
		mutate: func(o *v1.FluxClaim) { o.Spec.CatchUpAfter = &metav1.Duration{Duration: 2 * time.Minute} },
		labelApply: func(n string, l map[string]string) *ac.FluxClaimApplyConfiguration {
			return ac.FluxClaim(n, ns).WithLabels(l)
		},
	}.run)
	t.Run("ArgoCDClaim", crud[*v1.ArgoCDClaim, *v1.ArgoCDClaimList, *ac.ArgoCDClaimApplyConfiguration]{
		client: c.ArgoCDClaims(ns), obj: argoCDClaim("apps"), specMutable: true,
		mutate: func(o *v1.ArgoCDClaim) { o.Spec.CatchUpAfter = &metav1.Duration{Duration: time.Minute} },
		labelApply: func(n string, l map[string]string) *ac.ArgoCDClaimApplyConfiguration {
			return ac.ArgoCDClaim(n, ns).WithLabels(l)
		},
	}.run)
}

func readyCondition(reason string) metav1.Condition {
	return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason,
		Message: "set by the test", LastTransitionTime: metav1.Now()}
}

// conditions reaches status.conditions, which every kind has.
func conditions(obj any) *[]metav1.Condition {
	return reflect.ValueOf(obj).Elem().FieldByName("Status").FieldByName("Conditions").Addr().Interface().(*[]metav1.Condition)
}

func setConditions(obj any, c []metav1.Condition) { *conditions(obj) = c }

func names(t *testing.T, list runtime.Object) []string {
	var out []string
	require.NoError(t, meta.EachListItem(list, func(o runtime.Object) error {
		a, err := meta.Accessor(o)
		if err == nil {
			out = append(out, a.GetName())
		}
		return err
	}))
	return out
}
