//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
)

// kustomizedEdit: one edit until its commit is pushed, in a folder
// kustomize builds that lists n ConfigMaps in resources:, against the same
// edit among the same n ConfigMaps in the plain layout.
func kustomizedEdit(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, n, edits int) {
	measure := func(mode string) []time.Duration {
		ns := "kz-" + mode
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for i := range n {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)},
				Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		bare, err := gitserver.CreateRepo(env.GitRoot, ns)
		require.NoError(t, err)
		url := env.GitBaseURL + "/" + ns + ".git"
		// Where the edited object's document is.
		doc := "mirror/" + ns + "/configmaps/cm-0000.yaml"
		if mode == "kustomized" {
			doc = "mirror/cm-0000.yaml"
			seedKustomized(t, url, ns, n)
		}
		apply(t, env, target("plain", ns, url, "0s", configMapRule(ns)))
		var took []time.Duration
		// The first edit waits for the initial state to be handled; it is
		// not counted.
		for i := 0; i <= edits; i++ {
			before := serverHead(bare)
			start := time.Now()
			_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-0000", types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i+1),
				metav1.PatchOptions{})
			require.NoError(t, err)
			want := fmt.Sprintf("v: \"%d\"", i+1)
			require.NoError(t, waitPushed(ctx, bare, before, doc, want, 5*time.Minute), "edit %d of %s not pushed", i, mode)
			if i > 0 {
				took = append(took, time.Since(start))
			}
		}
		return took
	}
	plain := measure("plain")
	kz := measure("kustomized")
	p := quantile
	fmt.Printf("Kustomized: edit→push in a kustomized folder (%d ConfigMaps in resources:, %d edits): %s; the plain layout floor %s; ratio p50 %.1fx\n",
		n, edits, summary(kz), summary(plain), float64(p(kz, 0.5))/float64(p(plain, 0.5)))
	record(row{name: fmt.Sprintf("edit→push, kustomized (%d objects)", n), measured: summary(kz), floor: "plain layout " + summary(plain),
		ratio: float64(p(kz, 0.5)) / float64(p(plain, 0.5)), goal: "as the plain layout"})
}

// seedKustomized pushes a kustomization listing n ConfigMap documents that
// render as the cluster holds them.
func seedKustomized(t *testing.T, url, ns string, n int) {
	work := t.TempDir()
	run(t, work, "git", "clone", "--quiet", url, "src")
	dir := filepath.Join(work, "src", "mirror")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var k strings.Builder
	fmt.Fprintf(&k, "namespace: %s\nresources:\n", ns)
	for i := range n {
		name := fmt.Sprintf("cm-%04d", i)
		fmt.Fprintf(&k, "- %s.yaml\n", name)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".yaml"),
			fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  v: \"0\"\n", name), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o644))
	src := filepath.Join(work, "src")
	run(t, src, "git", "add", "-A")
	run(t, src, "git", "commit", "--quiet", "-m", "the kustomized folder")
	run(t, src, "git", "push", "--quiet", "origin", "HEAD:main")
}
