//go:build bench

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/test/controlplane"
)

// benchCRD serves GitProviders of the group bench.reverser.dev from
// kube-apiserver itself, with the fields this row writes typed as ours are.
const benchCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gitproviders.bench.reverser.dev}
spec:
  group: bench.reverser.dev
  names: {kind: GitProvider, listKind: GitProviderList, plural: gitproviders, singular: gitprovider}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [url]
            properties:
              url: {type: string}
              allowedBranches: {type: array, items: {type: string}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// apiVsCRD is P6: creating n GitProviders one after another, and listing
// them, through our aggregated API against the same objects as a CRD on
// the same kube-apiserver, both warmed with as many requests first. The
// ratio is ours over the CRD's, as in every row: higher is worse. Our API
// is also measured directly, bypassing the aggregator, and as kubectl's
// Table, to tell where a gap comes from.
func apiVsCRD(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, n, lists int) {
	apply(t, env, benchCRD)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	cfg.QPS, cfg.Burst = 2000, 2000
	direct := rest.CopyConfig(cfg)
	direct.Host = env.ReverserAPIServer
	direct.TLSClientConfig.Insecure, direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = true, nil, "" // loopback, bench only
	ours := schema.GroupVersionResource{Group: "reverser.dev", Version: "v1alpha1", Resource: "gitproviders"}
	crd := schema.GroupVersionResource{Group: "bench.reverser.dev", Version: "v1alpha1", Resource: "gitproviders"}
	aggregated := dynamic.NewForConfigOrDie(cfg)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := aggregated.Resource(crd).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}), "the CRD is not served")

	type figures struct{ create, list, table time.Duration }
	create := func(c *rest.Config, gvr schema.GroupVersionResource, ns string) figures {
		res := dynamic.NewForConfigOrDie(c).Resource(gvr).Namespace(ns)
		namespace(ctx, t, kube, ns)
		start := time.Now()
		for i := range n {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": gvr.GroupVersion().String(), "kind": "GitProvider",
				"metadata": map[string]any{"name": fmt.Sprintf("repo-%04d", i)},
				"spec":     map[string]any{"url": fmt.Sprintf("http://127.0.0.1:1/repo-%04d.git", i), "allowedBranches": []any{"main"}},
			}}
			_, err := res.Create(ctx, u, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		return figures{create: time.Since(start)}
	}
	list := func(f *figures, c *rest.Config, gvr schema.GroupVersionResource, ns string) {
		res := dynamic.NewForConfigOrDie(c).Resource(gvr).Namespace(ns)
		var took, tables []time.Duration
		httpClient, err := rest.HTTPClientFor(c)
		require.NoError(t, err)
		url := fmt.Sprintf("%s/apis/%s/namespaces/%s/%s", c.Host, gvr.GroupVersion(), ns, gvr.Resource)
		for range lists {
			start := time.Now()
			list, err := res.List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			require.Len(t, list.Items, n)
			took = append(took, time.Since(start))

			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(t, err)
			req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
			start = time.Now()
			resp, err := httpClient.Do(req)
			require.NoError(t, err)
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			tables = append(tables, time.Since(start))
		}
		f.list, f.table = quantile(took, 0.5), quantile(tables, 0.5)
	}
	// Where our API server spends a create, bypassing the aggregator.
	pprofClient, err := rest.HTTPClientFor(direct)
	require.NoError(t, err)
	// Both warmed with as many requests first: a CRD is served cold for a
	// while after it is installed, and so is a resource of ours.
	create(cfg, crd, "p6-warm-crd")
	create(cfg, ours, "p6-warm-api")
	cpu := profileOf(ctx, t, "P6", pprofClient, direct.Host+"/debug/pprof", "profile?seconds=2")
	viaAggregator := create(cfg, ours, "p6-api")
	cpu("our API server's CPU during the first 2 s of 500 creates", "-top", "-cum")
	asCRD := create(cfg, crd, "p6-crd")
	directly := create(direct, ours, "p6-direct")
	// The GitProvider controller writes each of ours a status: lists are
	// compared once it is done, with the CRD's objects given the same
	// status, so both carry the same bytes and nothing writes meanwhile.
	settled(ctx, t, aggregated.Resource(ours), "p6-api", n)
	settled(ctx, t, aggregated.Resource(ours), "p6-direct", n)
	copyStatuses(ctx, t, aggregated.Resource(ours).Namespace("p6-api"), aggregated.Resource(crd).Namespace("p6-crd"))
	list(&viaAggregator, cfg, ours, "p6-api")
	list(&asCRD, cfg, crd, "p6-crd")
	list(&directly, direct, ours, "p6-direct")
	fmt.Printf("P6 %d GitProviders: create one after another: ours %v, CRD %v (%.2fx), ours without the aggregator %v; "+
		"list p50: ours %v, CRD %v (%.2fx), direct %v; list as Table p50: ours %v, CRD %v, direct %v\n", n,
		viaAggregator.create.Round(time.Millisecond), asCRD.create.Round(time.Millisecond),
		float64(viaAggregator.create)/float64(asCRD.create), directly.create.Round(time.Millisecond),
		viaAggregator.list.Round(time.Millisecond), asCRD.list.Round(time.Millisecond), float64(viaAggregator.list)/float64(asCRD.list),
		directly.list.Round(time.Millisecond), viaAggregator.table.Round(time.Millisecond), asCRD.table.Round(time.Millisecond),
		directly.table.Round(time.Millisecond))
	record(row{name: fmt.Sprintf("P6 create %d, our API vs a CRD", n), measured: viaAggregator.create.Round(time.Millisecond).String() +
		" (direct " + directly.create.Round(time.Millisecond).String() + ")",
		floor: "CRD " + asCRD.create.Round(time.Millisecond).String(), ratio: float64(viaAggregator.create) / float64(asCRD.create), goal: "≤ 1.1×"})
	record(row{name: fmt.Sprintf("P6 list %d, our API vs a CRD", n), measured: viaAggregator.list.Round(time.Millisecond).String() +
		" (direct " + directly.list.Round(time.Millisecond).String() + ")",
		floor: "CRD " + asCRD.list.Round(time.Millisecond).String(), ratio: float64(viaAggregator.list) / float64(asCRD.list), goal: "≤ 1.1×"})
}

// settled waits until the controller has written the status of every one
// of the n GitProviders in ns for their generation.
func settled(ctx context.Context, t *testing.T, res dynamic.NamespaceableResourceInterface, ns string, n int) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := res.Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != n {
			return false, nil
		}
		for _, u := range list.Items {
			observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			if observed != u.GetGeneration() {
				return false, nil
			}
		}
		return true, nil
	}), "the GitProvider controller did not write every status in %s", ns)
}

// copyStatuses gives each object of to the status of its namesake in from.
func copyStatuses(ctx context.Context, t *testing.T, from, to dynamic.ResourceInterface) {
	t.Helper()
	list, err := from.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, u := range list.Items {
		target, err := to.Get(ctx, u.GetName(), metav1.GetOptions{})
		require.NoError(t, err)
		target.Object["status"] = u.Object["status"]
		_, err = to.UpdateStatus(ctx, target, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
}
