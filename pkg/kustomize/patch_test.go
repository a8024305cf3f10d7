package kustomize

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	podinfoRelease = ID{Group: "helm.toolkit.fluxcd.io", Kind: "HelmRelease", Namespace: "podinfo", Name: "podinfo"}
	podinfoWeb     = ID{Group: "apps", Kind: "Deployment", Namespace: "podinfo", Name: "web"}
)

// Flux's documented layout: a base HelmRelease outside the folder, and the
// staging overlay's values patch. A value the patch sets is written there.
func TestAValueAPatchSetsIsWrittenIntoThePatch(t *testing.T) {
	files := repo(t, "patches")
	old, live, _ := rendered(t, files, "apps/staging", podinfoRelease, func(o map[string]any) {
		o["spec"].(map[string]any)["values"].(map[string]any)["replicaCount"] = 3
	})
	got := planned(t, files, "apps/staging", Change{ID: podinfoRelease, Old: old, New: live})
	assert.Equal(t, map[string]string{"apps/staging/podinfo-values.yaml": `---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
spec:
  chart:
    spec:
      version: ">=1.0.0-alpha"
  values:
    # Two replicas: staging takes the load tests.
    replicaCount: 3
    ingress:
      hosts:
        - host: podinfo.staging
`}, got)
}

// After a restart the state before is not known: the render stands in.
func TestAPatchedValueIsWrittenFromASnapshot(t *testing.T) {
	files := repo(t, "patches")
	_, live, _ := rendered(t, files, "apps/staging", podinfoRelease, func(o map[string]any) {
		o["spec"].(map[string]any)["values"].(map[string]any)["replicaCount"] = 3
		o["status"] = map[string]any{"observedGeneration": 2}
	})
	got := planned(t, files, "apps/staging", Change{ID: podinfoRelease, New: live})
	assert.Contains(t, got["apps/staging/podinfo-values.yaml"], "replicaCount: 3\n")
	assert.Len(t, got, 1)
}

func TestAContainerOfAStrategicMergePatchIsMatchedByName(t *testing.T) {
	files := repo(t, "patches")
	old, live, _ := rendered(t, files, "apps/staging", podinfoWeb, func(o map[string]any) {
		cs := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		cs[0].(map[string]any)["image"] = "busybox:1.38" // the patch put it first
	})
	got := planned(t, files, "apps/staging", Change{ID: podinfoWeb, Old: old, New: live})
	assert.Equal(t, map[string]string{"apps/staging/web-sidecar.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
        - name: sidecar
          image: busybox:1.38 # pinned for staging
`}, got)
}

// Replicas a patch sets are the patch's, not a replicas: entry's.
func TestAValueAJSON6902PatchSetsIsWrittenIntoItsOperation(t *testing.T) {
	files := repo(t, "patches")
	old, live, _ := rendered(t, files, "apps/staging", podinfoWeb, func(o map[string]any) {
		o["spec"].(map[string]any)["replicas"] = 4
	})
	got := planned(t, files, "apps/staging", Change{ID: podinfoWeb, Old: old, New: live})
	require.Len(t, got, 1)
	assert.Contains(t, got["apps/staging/kustomization.yaml"], `  # Staging runs two web pods.
  - target:
      kind: Deployment
      name: web
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 4
`)
}

// The base's own patch is the base's: other folders build it too.
func TestAValueABasesPatchSetsIsRefused(t *testing.T) {
	files := repo(t, "patches")
	old, live, _ := rendered(t, files, "apps/staging", podinfoWeb, func(o map[string]any) {
		md := o["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
		md["annotations"].(map[string]any)["prometheus.io/scrape"] = "false"
	})
	_, err := Plan(files, "apps/staging", Change{ID: podinfoWeb, Old: old, New: live})
	var r *Refusal
	require.ErrorAs(t, err, &r)
	assert.Contains(t, r.Reason, "apps/base/podinfo/kustomization.yaml (patches[0])")
	assert.Contains(t, r.Reason, "outside apps/staging")
}

// A change of a patched field and of one the base sets: the first is
// written, the second cannot be (the base is read-only), so neither is.
func TestAChangeHalfInAPatchAndHalfInABaseIsRefused(t *testing.T) {
	files := repo(t, "patches")
	old, live, _ := rendered(t, files, "apps/staging", podinfoRelease, func(o map[string]any) {
		spec := o["spec"].(map[string]any)
		spec["values"].(map[string]any)["replicaCount"] = 3
		spec["interval"] = "10m"
	})
	_, err := Plan(files, "apps/staging", Change{ID: podinfoRelease, Old: old, New: live})
	var r *Refusal
	require.ErrorAs(t, err, &r)
	assert.Contains(t, r.Reason, "apps/base/podinfo/release.yaml")
}

// A file whose lists are indented under their key stays so.
func TestAFileKeepsItsSequenceIndentation(t *testing.T) {
	doc := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 1
  template:
    spec:
      containers:
        - name: web # the shop's front
          image: web:1
`
	files := Files{"web.yaml": []byte(doc)}
	got := planned(t, files, ".", Change{ID: shopWeb, Old: []byte(doc),
		New: []byte(strings.Replace(doc, "replicas: 1", "replicas: 3", 1))})
	assert.Equal(t, strings.Replace(doc, "replicas: 1", "replicas: 3", 1), got["web.yaml"])
}

// An overlay that sets the namespace and merges into a base's generator:
// the merged ConfigMap is the base generator's, and the overlay's other
// objects are written as ever.
func TestAnOverlaysMergedGeneratorLeavesTheRestWritable(t *testing.T) {
	files := Files{
		"base/kustomization.yaml": []byte("resources:\n- cache.yaml\nconfigMapGenerator:\n- name: web-env\n  literals:\n  - MODE=slow\n"),
		"base/cache.yaml":         []byte(configMapDoc("base-settings", "blue")),
		"staging/kustomization.yaml": []byte("namespace: staging\nresources:\n- ../base\n- settings.yaml\n" +
			"configMapGenerator:\n- name: web-env\n  behavior: merge\n  literals:\n  - COLOR=green\n"),
		"staging/settings.yaml": []byte(configMapDoc("settings", "blue")),
	}
	objs, err := Render(files, "staging")
	require.NoError(t, err)
	var merged Object
	for _, o := range objs {
		if o.ID.Kind == "ConfigMap" && strings.HasPrefix(o.ID.Name, "web-env-") {
			merged = o
		}
	}
	assert.Equal(t, Source{Kind: FromGenerator, File: "base/kustomization.yaml", GeneratorKind: "ConfigMapGenerator", Generator: "web-env"},
		merged.Source)

	id := ID{Kind: "ConfigMap", Namespace: "staging", Name: "settings"}
	old, live, _ := rendered(t, files, "staging", id, func(o map[string]any) { data(o)["color"] = "red" })
	got := planned(t, files, "staging", Change{ID: id, Old: old, New: live})
	assert.Contains(t, got["staging/settings.yaml"], "color: red")
}

func configMapDoc(name, color string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  color: " + color + "\n"
}

// Attack: a tenant's folder names another team's file as its patch. That
// file is never written: kustomize does not load it, and nothing outside
// the folder is the target's to change.
func TestAPatchOutsideTheFolderIsNeverWritten(t *testing.T) {
	files := Files{
		"team-a/kustomization.yaml": []byte("resources:\n- settings.yaml\npatches:\n- path: ../team-b/color.yaml\n"),
		"team-a/settings.yaml":      []byte(configMapDoc("settings", "green")),
		"team-b/color.yaml":         []byte(configMapDoc("settings", "blue")),
	}
	id := ID{Kind: "ConfigMap", Name: "settings"}
	_, err := Plan(files, "team-a", Change{ID: id, Old: []byte(configMapDoc("settings", "blue")), New: []byte(configMapDoc("settings", "red"))})
	var r *Refusal
	require.ErrorAs(t, err, &r)

	// Even were it loaded, writing it is refused.
	_, _, err = planPatched(files, "team-a", Object{}, Change{ID: id, Old: []byte(configMapDoc("settings", "blue")),
		New: []byte(configMapDoc("settings", "red"))})
	require.ErrorAs(t, err, &r)
	assert.Contains(t, r.Reason, "team-b/color.yaml")
}

// A patch whose target names several objects by a pattern is the patch of
// each: a value written into it would change the others too.
func TestAPatchOfSeveralObjectsIsNotWrittenForOne(t *testing.T) {
	files := Files{
		"site/kustomization.yaml": []byte("resources:\n- settings.yaml\n- other.yaml\npatches:\n" +
			"- target: {kind: ConfigMap, name: \"settings|other\"}\n  patch: |\n    apiVersion: v1\n    kind: ConfigMap\n" +
			"    metadata: {name: greeted}\n    data: {color: blue}\n"),
		"site/settings.yaml": []byte(configMapDoc("settings", "green")),
		"site/other.yaml":    []byte(configMapDoc("other", "green")),
	}
	id := ID{Kind: "ConfigMap", Name: "settings"}
	old, live, _ := rendered(t, files, "site", id, func(o map[string]any) { data(o)["color"] = "red" })
	_, err := Plan(files, "site", Change{ID: id, Old: old, New: live})
	var r *Refusal
	require.ErrorAs(t, err, &r)
	assert.Contains(t, r.Reason, "would also change ConfigMap/other")
}
