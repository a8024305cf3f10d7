//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// fluxSync applies the folder mirror of url's main branch, on a held-long
// interval, as Kustomization name.
func fluxSync(t *testing.T, env *controlplane.Env, name, url string) {
	apply(t, env, harness.FluxSync(controlplane.FluxNamespace, name, url, "./mirror", "", "1h", ""))
}

// saveApplied measures, with the real Flux, a save with catchUp AfterPush
// from Committed to Applied=True, against the floor of Flux applying a
// commit pushed with the git CLI when asked directly (requestedAt on the
// GitRepository, then the Kustomization), in the same run.
func saveApplied(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, n int) {
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	cfg.QPS, cfg.Burst = 2000, 2000 // client-go's 5 QPS would throttle the polling, and the figure with it
	rev := versioned.NewForConfigOrDie(cfg)
	flux := &applier.Flux{Client: dynamic.NewForConfigOrDie(cfg)}
	poll := func(what string, cond func() (bool, error)) {
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 2*time.Minute, true,
			func(context.Context) (bool, error) { return cond() }), what)
	}
	applied := func(name string) string {
		ks, err := flux.Client.Resource(v1.FluxKustomizations).Namespace(controlplane.FluxNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		rev, _, _ := unstructured.NestedString(ks.Object, "status", "lastAppliedRevision")
		return applier.CommitOf(rev)
	}

	// The floor: the git CLI pushes, Flux is asked directly.
	_, err = gitserver.CreateRepo(env.GitRoot, "applied-floor")
	require.NoError(t, err)
	url := env.GitBaseURL + "/applied-floor.git"
	work := filepath.Join(t.TempDir(), "work")
	run(t, filepath.Dir(work), "git", "clone", "--quiet", url, work)
	push := func(i int) string {
		require.NoError(t, os.MkdirAll(filepath.Join(work, "mirror"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(work, "mirror", "cm.yaml"), []byte(fmt.Sprintf(
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: floor, namespace: applied-floor}\ndata: {i: %q}\n", strconv.Itoa(i))), 0o644))
		run(t, work, "git", "add", "-A")
		run(t, work, "git", "commit", "--quiet", "-m", "floor "+strconv.Itoa(i))
		run(t, work, "git", "push", "--quiet", "origin", "HEAD:main")
		return run(t, work, "git", "rev-parse", "HEAD")
	}
	apply(t, env, "apiVersion: v1\nkind: Namespace\nmetadata: {name: applied-floor}\n")
	first := push(-1)
	fluxSync(t, env, "applied-floor", url)
	poll("the floor's first apply", func() (bool, error) { return applied("applied-floor") == first, nil })
	ks := applier.Ref{Namespace: controlplane.FluxNamespace, Name: "applied-floor"}
	var floor []time.Duration
	for i := range n {
		sha := push(i)
		start := time.Now()
		c, err := flux.Request(ctx, ks, start.UTC().Format(time.RFC3339Nano))
		require.NoError(t, err)
		poll("the floor's apply", func() (bool, error) {
			p, err := flux.Follow(ctx, ks, c, nil)
			return p.Done && applier.CommitOf(p.Applied) == sha, err
		})
		floor = append(floor, time.Since(start))
	}

	// Saves on a claimed target: Reverser pushes, then asks Flux.
	ns := "applied-save"
	_, err = gitserver.CreateRepo(env.GitRoot, ns)
	require.NoError(t, err)
	url = env.GitBaseURL + "/" + ns + ".git"
	apply(t, env, harness.Docs(providers, harness.Namespace(ns), gitProvider(ns, url),
		gitTarget("local", ns, "10m", "  applierRef: {kind: FluxClaim, name: apps}"), configMapRule(ns)))
	poll("the mirror streaming", func() (bool, error) {
		gt, err := rev.ReverserV1alpha1().GitTargets(ns).Get(ctx, "site", metav1.GetOptions{})
		return err == nil && gt.Status.Streams.Running == 1, nil
	})
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}, Data: map[string]string{"a": "1"}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	save := func(i int) *v1.CommitRequest {
		cr, err := rev.ReverserV1alpha1().CommitRequests(ns).Create(ctx, &v1.CommitRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "save-"},
			Spec: v1.CommitRequestSpec{GitTargetRef: v1.ObjectReference{Name: "site"}, Message: fmt.Sprintf("Save %d", i),
				CatchUp: v1.CatchUpAfterPush}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return cr
	}
	get := func(name string) *v1.CommitRequest {
		cr, err := rev.ReverserV1alpha1().CommitRequests(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return cr
	}
	seed := save(-1)
	poll("the seed saved", func() (bool, error) {
		c := meta.FindStatusCondition(get(seed.Name).Status.Conditions, v1.ConditionReady)
		if c != nil && c.Status != metav1.ConditionUnknown && c.Reason != v1.ReasonCommitted {
			return false, fmt.Errorf("the seed's save ended %s: %s", c.Reason, c.Message)
		}
		return c != nil && c.Reason == v1.ReasonCommitted, nil
	})
	fluxSync(t, env, ns, url)
	apply(t, env, harness.FluxClaim(ns, "apps", "local", controlplane.FluxNamespace, ns, "  catchUpAfter: 0s"))
	poll("the claim held and its Startup applied", func() (bool, error) {
		fc, err := rev.ReverserV1alpha1().FluxClaims(ns).Get(ctx, "apps", metav1.GetOptions{})
		return err == nil && fc.Status.Operation != nil && fc.Status.Operation.FinishedAt != nil, nil
	})
	var saved, whole []time.Duration
	for i := range n {
		start := time.Now()
		_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "seed", types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"a":%q}}`, strconv.Itoa(i))),
			metav1.PatchOptions{})
		require.NoError(t, err)
		cr := save(i)
		var committed time.Time
		poll("the save applied", func() (bool, error) {
			got := get(cr.Name)
			if got.Status.Commit != "" && committed.IsZero() {
				committed = time.Now()
			}
			a := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionApplied)
			if a != nil && a.Status == metav1.ConditionFalse {
				return false, fmt.Errorf("save %d: Applied=False %s: %s", i, a.Reason, a.Message)
			}
			return a != nil && a.Status == metav1.ConditionTrue && strings.HasSuffix(got.Status.AppliedRevision, got.Status.Commit), nil
		})
		saved = append(saved, time.Since(committed))
		whole = append(whole, time.Since(start))
	}
	p := quantile
	// The push happens just before the status says Committed, so the first
	// figure slightly undercounts; the edit-to-Applied one includes the save.
	fmt.Printf("P4 save Committed→Applied=True with Flux (%d saves, catchUp AfterPush): %s; "+
		"floor (Flux applying a pushed commit when asked directly) %s; ratio p50 %.1fx; edit+save→Applied p50 %v\n",
		n, summary(saved), summary(floor), float64(p(saved, 0.5))/float64(p(floor, 0.5)), p(whole, 0.5).Round(time.Millisecond))
	record(row{name: "P4 save Committed→Applied (Flux)", measured: summary(saved), floor: "Flux asked directly " + summary(floor),
		ratio: float64(p(saved, 0.5)) / float64(p(floor, 0.5)), goal: "none set"})
}
