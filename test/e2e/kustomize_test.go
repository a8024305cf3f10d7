package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/test/controlplane"
)

// kustomized seeds the repository with a kustomization that generates a
// ConfigMap and lists a plain one, and has the real Flux apply it into the
// namespace (interval 24h: it applies when asked), as it was before
// Reverser came. extra is added to the kustomization.
func kustomized(extra string) func(f *mirrorFixture) {
	return func(f *mirrorFixture) {
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
%s`, f.ns, extra), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "app.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  greeting: hi\n"), 0o644))
		git(t, work, "add", "-A")
		git(t, work, "commit", "--quiet", "-m", "The shop")
		git(t, work, "push", "--quiet", "origin", "HEAD:main")
		f.flux = fluxSync(t, f.url, "./"+mirrorPath, f.ns, "24h")
		waitApplied(t, f.flux, git(t, work, "rev-parse", "HEAD"))
	}
}

// fluxApplies asks Flux to fetch and apply the remote's head, pruning what
// it no longer renders, and waits until it has. The Kustomization is asked
// only once the GitRepository has fetched, as pkg/applier asks: asked both
// at once, Flux may first apply the revision it already has again, which
// reverts a live edit of an object that revision renders (Reverser then
// rightly commits Flux's revert: the flake CI saw).
func fluxApplies(t *testing.T, f *mirrorFixture) {
	t.Helper()
	head := git(t, f.bare, "rev-parse", "main")
	now := time.Now().Format(time.RFC3339Nano)
	kubectlOK(t, admin, "", "annotate", "--overwrite", "-n", controlplane.FluxNamespace, "gitrepository", f.flux, "reconcile.fluxcd.io/requestedAt="+now)
	eventually(t, 2*time.Minute, "Flux fetched "+head, func() (bool, error) {
		return strings.HasSuffix(fluxField(t, "gitrepository", f.flux, ".status.artifact.revision"), head), nil
	})
	kubectlOK(t, admin, "", "annotate", "--overwrite", "-n", controlplane.FluxNamespace, "kustomization", f.flux, "reconcile.fluxcd.io/requestedAt="+now)
	waitApplied(t, f.flux, head)
}

func (f *mirrorFixture) generatedName(prefix string) string {
	f.t.Helper()
	out := kubectlOK(f.t, admin, "", "get", "configmaps", "-n", f.ns, "-o", "name")
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, "configmap/"+prefix+"-") {
			return strings.TrimPrefix(n, "configmap/")
		}
	}
	f.t.Fatalf("no generated ConfigMap %s in %s", prefix, out)
	return ""
}

// TestAGeneratedConfigMapIsWrittenIntoItsGenerator: a live edit of a
// generated ConfigMap changes the generator's literal in Git, the render
// equals the cluster, and no stray document appears; Flux's new generation
// and its pruning of the old commit nothing.
func TestAGeneratedConfigMapIsWrittenIntoItsGenerator(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: `  - apiGroups: [""]
    resources: [configmaps]`, seed: kustomized("")})
	f.waitReady()
	seed := git(t, f.bare, "rev-parse", "main")
	settings := f.generatedName("settings")

	kubectlOK(t, alice, "", "patch", "configmap", settings, "-n", f.ns, "--type=merge", "-p", `{"data":{"color":"red"}}`)
	f.waitFile(mirrorPath+"/kustomization.yaml", func(s string) bool { return strings.Contains(s, "color=red") }, "the literal written back")
	assert.Equal(t, seed, git(t, f.bare, "rev-parse", "main~1"), "the initial state, equal to the render, committed nothing")
	assert.Equal(t, "alice", git(t, f.bare, "log", "-1", "--format=%an", "main"))
	assert.Contains(t, f.file(mirrorPath+"/kustomization.yaml"), "- color=red # the brand's", "in place, with its comment")
	for _, p := range f.files() {
		assert.NotContains(t, p, "/configmaps/", "no stray document beside the sources: %s", p)
	}

	// Flux applies the new generation and prunes the old: the render equals
	// the cluster, and nothing is committed for it.
	writeBack := git(t, f.bare, "rev-parse", "main")
	fluxApplies(t, f)
	renamed := f.generatedName("settings")
	assert.NotEqual(t, settings, renamed, "kustomize's content hash names the new generation")
	assert.Equal(t, "red", kubectlOK(t, admin, "", "get", "configmap", renamed, "-n", f.ns, "-o", "jsonpath={.data.color}"))
	eventually(t, time.Minute, "the old generation pruned", func() (bool, error) {
		_, err := kubectl(admin, "", "get", "configmap", settings, "-n", f.ns)
		return err != nil, nil
	})
	kubectlOK(t, alice, "", "patch", "configmap", "app", "-n", f.ns, "--type=merge", "-p", `{"data":{"greeting":"hello"}}`)
	f.waitFile(mirrorPath+"/app.yaml", func(s string) bool { return strings.Contains(s, "greeting: hello") }, "the plain document edited")
	assert.Equal(t, writeBack, git(t, f.bare, "rev-parse", "main~1"), "Flux's new generation and pruning committed nothing: %s",
		git(t, f.bare, "log", "-p", "--format=%h %an: %s%n%b", writeBack+"..main"))
	assert.NotContains(t, f.file(mirrorPath+"/app.yaml"), "namespace:", "the namespace stays the kustomization's to set")
}

// TestAChangeTheRepositoryCannotTakeIsRefusedByName: the kustomization's
// patch sets app's greeting, so a live edit of it cannot be written: the
// GitTarget says so by name, the other changes go on, and the refusal goes
// when the object is as the repository says again.
func TestAChangeTheRepositoryCannotTakeIsRefusedByName(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: `  - apiGroups: [""]
    resources: [configmaps]`, seed: kustomized(`patches:
- target: {kind: ConfigMap, name: "app|settings"}
  patch: |
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: greeted}
    data: {greeting: hi}
`)})
	// One patch greets in two ConfigMaps: written into it, hello would
	// change the generated one too; written into app.yaml, the patch would
	// hide it. Neither is the live change alone.
	f.waitReady()
	kubectlOK(t, alice, "", "patch", "configmap", "app", "-n", f.ns, "--type=merge", "-p", `{"data":{"greeting":"hello"}}`)
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "fresh", "--from-literal=a=b")
	eventually(t, time.Minute, "the GitTarget Stalled, naming app", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "gittarget", "-n", f.ns, f.target, "-o",
			`jsonpath={.status.conditions[?(@.type=="Stalled")].reason} {.status.conditions[?(@.type=="Stalled")].message}`)
		return strings.HasPrefix(out, "WriteRefused ") && strings.Contains(out, "ConfigMap/"+f.ns+"/app cannot be written"), err
	})
	f.waitFile(mirrorPath+"/kustomization.yaml", func(s string) bool { return strings.Contains(s, "fresh-configmap.yaml") }, "the other change committed")
	assert.NotContains(t, f.file(mirrorPath+"/app.yaml"), "hello", "nothing written for the refused object")

	kubectlOK(t, alice, "", "patch", "configmap", "app", "-n", f.ns, "--type=merge", "-p", `{"data":{"greeting":"hi"}}`)
	eventually(t, time.Minute, "the refusal gone", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "gittarget", "-n", f.ns, f.target, "-o", `jsonpath={.status.conditions[?(@.type=="Stalled")].reason}`)
		return out == "", err
	})
}
