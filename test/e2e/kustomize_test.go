package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kustomized seeds the repository with a kustomization that generates a
// ConfigMap and lists a plain one, and applies its render to the namespace,
// as an applier would have before Reverser came.
func kustomized(f *mirrorFixture) {
	t := f.t
	work := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", f.url, work)
	dir := filepath.Join(work, mirrorPath)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), fmt.Appendf(nil, `namespace: %s
# The shop's settings, generated.
configMapGenerator:
- name: settings
  literals:
  - color=blue # the brand's
  - size=large
resources:
- app.yaml
`, f.ns), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: hi\n"), 0o644))
	git(t, work, "add", "-A")
	git(t, work, "commit", "--quiet", "-m", "The shop")
	git(t, work, "push", "--quiet", "origin", "HEAD:main")
	applyRender(t, f)
}

// applyRender applies `kustomize build` of the remote's folder, as Flux
// would, pruning the ConfigMaps it no longer renders.
func applyRender(t *testing.T, f *mirrorFixture) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "render")
	git(t, filepath.Dir(work), "clone", "--quiet", f.url, work)
	out, err := exec.Command("kubectl", "kustomize", filepath.Join(work, mirrorPath)).Output()
	require.NoError(t, err)
	kubectlOK(t, admin, string(out), "apply", "-f", "-", "--prune", "-n", f.ns, "-l", "!reverser-e2e-keep", "--prune-allowlist=core/v1/ConfigMap")
	return string(out)
}

// TestAGeneratedConfigMapIsWrittenIntoItsGenerator: a live edit of a
// generated ConfigMap changes the generator's literal in Git, the render
// equals the cluster, and no stray document appears; the applier's new
// generation and its pruning of the old commit nothing.
func TestAGeneratedConfigMapIsWrittenIntoItsGenerator(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: `  - apiGroups: [""]
    resources: [configmaps]`, seed: kustomized})
	f.waitReady()
	seed := git(t, f.bare, "rev-parse", "main")
	generated := strings.TrimSpace(kubectlOK(t, admin, "", "get", "configmaps", "-n", f.ns, "-o", "name"))
	var settings string
	for _, n := range strings.Fields(generated) {
		if strings.HasPrefix(n, "configmap/settings-") {
			settings = strings.TrimPrefix(n, "configmap/")
		}
	}
	require.NotEmpty(t, settings, "the generated ConfigMap: %s", generated)

	kubectlOK(t, alice, "", "patch", "configmap", settings, "-n", f.ns, "--type=merge", "-p", `{"data":{"color":"red"}}`)
	f.waitFile(mirrorPath+"/kustomization.yaml", func(s string) bool { return strings.Contains(s, "color=red") }, "the literal written back")
	assert.Equal(t, seed, git(t, f.bare, "rev-parse", "main~1"), "the initial state, equal to the render, committed nothing")
	assert.Equal(t, "alice", git(t, f.bare, "log", "-1", "--format=%an", "main"))
	assert.Contains(t, f.file(mirrorPath+"/kustomization.yaml"), "- color=red # the brand's", "in place, with its comment")
	for _, p := range f.files() {
		assert.NotContains(t, p, "/configmaps/", "no stray document beside the sources: %s", p)
	}

	// Flux applies the new generation and prunes the old: nothing to commit.
	render := applyRender(t, f)
	assert.Contains(t, render, "color: red")
	writeBack := git(t, f.bare, "rev-parse", "main")
	kubectlOK(t, alice, "", "patch", "configmap", "app", "-n", f.ns, "--type=merge", "-p", `{"data":{"greeting":"hello"}}`)
	f.waitFile(mirrorPath+"/app.yaml", func(s string) bool { return strings.Contains(s, "greeting: hello") }, "the plain document edited")
	assert.Equal(t, writeBack, git(t, f.bare, "rev-parse", "main~1"), "the applier's new generation and pruning committed nothing")
	assert.NotContains(t, f.file(mirrorPath+"/app.yaml"), "namespace:", "the namespace stays the kustomization's to set")
}
