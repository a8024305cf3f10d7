package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The corpus of real layouts (testdata/layouts, features R1, R2): each
// folder is applied into a namespace the way its applier applies it, then
// mirrored by a GitTarget that knows that namespace; live edits of every
// kind must land in the user's own lines, and after each the folder,
// rendered as its applier renders it, equals the cluster, with no file a
// person would not have written.

// layoutEdit is one live edit, made by alice, and where it must land.
type layoutEdit struct {
	what  string
	args  []string // kubectl, in the layout's namespace
	stdin string
	// file (under the folder) must hold want afterwards, and no longer
	// hold gone.
	file, want, gone string
	// adds and removes are the files the edit makes or takes.
	adds, removes string
}

type layoutCase struct {
	name string
	// apply is how the folder reaches the cluster: "f" (kubectl apply -n
	// NS -f, as Argo CD applies a directory into destination.namespace),
	// "k" (kubectl apply -n NS -k) or "flux" (Flux, spec.targetNamespace).
	apply string
	// targetSpec is added to the GitTarget's spec.
	targetSpec string
	// folder is the layout's sub-folder that its applier applies and the
	// GitTarget mirrors ("": the layout's root); edits name files from
	// the layout's root.
	folder string
	// setsNamespace: the folder's kustomization names the namespace.
	setsNamespace bool
	// helm: the layout holds a HelmRelease, mirrored too.
	helm  bool
	edits []layoutEdit
}

var layouts = []layoutCase{{
	name: "plain", apply: "f", targetSpec: "  targetNamespace: ${NAMESPACE}",
	edits: []layoutEdit{
		{what: "scale", args: []string{"scale", "deployment", "web", "--replicas=3"},
			file: "web-deployment.yaml", want: "replicas: 3 # raised by hand during incidents"},
		{what: "image", args: []string{"set", "image", "deployment/web", "web=nginx:1.28"},
			file: "web-deployment.yaml", want: "image: nginx:1.28 # pinned"},
		{what: "label", args: []string{"label", "service", "web", "tier=front"}, file: "web-svc.yaml", want: "tier: front"},
		{what: "annotation", args: []string{"annotate", "configmap", "web-flags", "owner=team-web"}, file: "settings.yaml", want: "owner: team-web"},
		{what: "data", args: []string{"patch", "configmap", "web-settings", "--type=merge", "-p", `{"data":{"color":"red"}}`},
			file: "settings.yaml", want: "color: red # the brand's"},
		{what: "env", args: []string{"set", "env", "deployment/web", "MODE=fast"}, file: "web-deployment.yaml", want: "value: fast"},
		{what: "create", args: []string{"create", "configmap", "fresh", "--from-literal=a=b"},
			file: "fresh-configmap.yaml", want: "name: fresh", adds: "fresh-configmap.yaml"},
		{what: "delete", args: []string{"delete", "configmap", "web-flags"}, file: "settings.yaml", want: "web-settings", gone: "web-flags"},
	},
}, {
	// The rules read one namespace: that is the folder's.
	name: "prefix", apply: "k",
	edits: []layoutEdit{
		{what: "scale", args: []string{"scale", "deployment", "shop-web-v2", "--replicas=4"}, file: "deployment.yaml", want: "replicas: 4"},
		{what: "image", args: []string{"set", "image", "deployment/shop-web-v2", "web=nginx:1.28"}, file: "deployment.yaml", want: "image: nginx:1.28"},
		{what: "label", args: []string{"label", "service", "shop-web-v2", "tier=front"}, file: "service.yaml", want: "tier: front"},
		{what: "annotation", args: []string{"annotate", "configmap", "shop-settings-v2", "owner=shop"}, file: "config.yaml", want: "owner: shop"},
		{what: "data", args: []string{"patch", "configmap", "shop-settings-v2", "--type=merge", "-p", `{"data":{"color":"red"}}`},
			file: "config.yaml", want: "color: red # the brand's"},
		{what: "env", args: []string{"set", "env", "deployment/shop-web-v2", "MODE=fast"}, file: "deployment.yaml",
			want: "- name: MODE # how the shop runs\n          value: fast"},
		{what: "create", args: []string{"create", "configmap", "shop-fresh-v2", "--from-literal=a=b"},
			file: "kustomization.yaml", want: "- shop-fresh-v2-configmap.yaml", adds: "shop-fresh-v2-configmap.yaml"},
		{what: "delete", args: []string{"delete", "service", "shop-web-v2"}, file: "kustomization.yaml", want: "resources:",
			gone: "service.yaml", removes: "service.yaml"},
	},
}, {
	name: "base-app", apply: "flux",
	edits: []layoutEdit{
		{what: "scale", args: []string{"scale", "deployment", "frontend", "--replicas=2"}, file: "base/frontend-deployment.yaml", want: "replicas: 2"},
		{what: "image", args: []string{"set", "image", "deployment/frontend", "server=nginx:1.28"},
			file: "base/frontend-deployment.yaml", want: "image: nginx:1.28"},
		{what: "label", args: []string{"label", "service", "cart", "tier=back"}, file: "base/cart-service.yaml", want: "tier: back",
			gone: "part-of"},
		{what: "annotation", args: []string{"annotate", "configmap", "email-config", "owner=mail"}, file: "base/email-config.yaml",
			want: "owner: mail"},
		{what: "data", args: []string{"patch", "configmap", "cart-config", "--type=merge", "-p", `{"data":{"LOG_LEVEL":"debug"}}`},
			file: "base/cart-config.yaml", want: "LOG_LEVEL: debug"},
		{what: "env", args: []string{"set", "env", "deployment/frontend", "MODE=fast"}, file: "base/frontend-deployment.yaml", want: "value: fast"},
		// Made as the folder's objects are: with the app's label.
		{what: "create", args: []string{"apply", "-f", "-"}, stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n" +
			"  labels: {app.kubernetes.io/part-of: store}\ndata: {a: b}\n",
			file: "kustomization.yaml", want: "- fresh-configmap.yaml", adds: "fresh-configmap.yaml"},
		{what: "delete", args: []string{"delete", "service", "review"}, file: "base/kustomization.yaml", want: "cart-service.yaml",
			gone: "review-service.yaml", removes: "base/review-service.yaml"},
	},
}, {
	// The GitTarget mirrors the overlay; the base beside it is read-only.
	name: "overlay", apply: "k", folder: "staging", setsNamespace: true, helm: true,
	edits: []layoutEdit{
		{what: "scale", args: []string{"scale", "deployment", "web", "--replicas=3"}, file: "staging/kustomization.yaml",
			want: "replicas:\n  - name: web\n    count: 3"},
		{what: "image", args: []string{"set", "image", "deployment/cache", "cache=redis:7.4"}, file: "staging/cache.yaml",
			want: "image: redis:7.4 # what production ran last"},
		{what: "label", args: []string{"label", "service", "cache", "tier=back"}, file: "staging/cache.yaml", want: "tier: back"},
		{what: "annotation", args: []string{"annotate", "deployment", "cache", "owner=team-cache"}, file: "staging/cache.yaml",
			want: "owner: team-cache"},
		{what: "data", args: []string{"patch", "configmap", "cache-config", "--type=merge", "-p", `{"data":{"MAXMEMORY":"128mb"}}`},
			file: "staging/cache.yaml", want: "MAXMEMORY: 128mb # small on purpose"},
		{what: "env", args: []string{"set", "env", "deployment/cache", "MODE=fast"}, file: "staging/cache.yaml", want: "value: fast"},
		// A value the overlay's patch sets goes into the patch.
		{what: "values", args: []string{"patch", "helmrelease", "podinfo", "--type=merge", "-p", `{"spec":{"values":{"replicaCount":3}}}`},
			file: "staging/podinfo-values.yaml", want: "replicaCount: 3 # staging takes the load tests"},
		{what: "create", args: []string{"apply", "-f", "-"}, stdin: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n" +
			"  labels: {env: staging}\ndata: {a: b}\n",
			file: "staging/kustomization.yaml", want: "- fresh-configmap.yaml", adds: "staging/fresh-configmap.yaml"},
		{what: "delete", args: []string{"delete", "service", "cache"}, file: "staging/cache.yaml", want: "name: cache-config",
			gone: "kind: Service"},
	},
}}

// helmReleaseCRD serves HelmReleases as Flux's helm-controller does, for a
// layout that holds one; nothing here installs charts.
const helmReleaseCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: helmreleases.helm.toolkit.fluxcd.io}
spec:
  group: helm.toolkit.fluxcd.io
  scope: Namespaced
  names: {kind: HelmRelease, listKind: HelmReleaseList, plural: helmreleases, singular: helmrelease}
  versions:
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
# As Flux's install does: who may edit a namespace edits its HelmReleases.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-helmrelease-edit
  labels: {rbac.authorization.k8s.io/aggregate-to-edit: "true"}
rules:
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: [helmreleases]
  verbs: [get, list, watch, create, update, patch, delete]
`

func TestRealLayouts(t *testing.T) {
	for _, lc := range layouts {
		t.Run(lc.name, func(t *testing.T) { lc.run(t) })
	}
}

func (lc layoutCase) run(t *testing.T) {
	var seed string
	files := map[string]bool{}
	rules := `  - apiGroups: [""]
    resources: [configmaps, services]
  - apiGroups: [apps]
    resources: [deployments]`
	if lc.helm {
		kubectlOK(t, admin, helmReleaseCRD, "apply", "--server-side", "-f", "-")
		kubectlOK(t, admin, "", "wait", "--for=condition=Established", "crd/helmreleases.helm.toolkit.fluxcd.io", "--timeout=60s")
		rules += `
  - apiGroups: [helm.toolkit.fluxcd.io]
    resources: [helmreleases]`
	}
	f := newMirrorWith(t, mirrorOptions{
		rules:      rules,
		path:       path.Join(mirrorPath, lc.folder),
		targetSpec: lc.targetSpec,
		seed: func(f *mirrorFixture) {
			var seeded []string
			seed, seeded = lc.seed(f)
			for _, p := range seeded {
				files[mirrorPath+"/"+p] = true
			}
			// alice edits as a team member with edit rights in her namespace.
			kubectlOK(t, admin, "", "create", "rolebinding", "alice-edit", "-n", f.ns, "--clusterrole=edit", "--user="+alice)
		},
	})
	f.waitReady()
	f.renderEqualsCluster(lc)
	for i, e := range lc.edits {
		kubectlOK(t, alice, e.stdin, append(e.args, "-n", f.ns)...)
		f.waitFile(mirrorPath+"/"+e.file, func(s string) bool {
			return strings.Contains(s, e.want) && (e.gone == "" || !strings.Contains(s, e.gone))
		}, e.what+" lands in "+e.file)
		if i == 0 {
			assert.Equal(t, seed, git(t, f.bare, "rev-parse", "main~1"), "the start committed nothing: %s",
				git(t, f.bare, "log", "-p", "--format=%h %an: %s", seed+"..main"))
		}
		assert.Equal(t, alice, git(t, f.bare, "log", "-1", "--format=%an", "main"), "%s is alice's", e.what)
		if e.adds != "" {
			files[mirrorPath+"/"+e.adds] = true
		}
		if e.removes != "" {
			delete(files, mirrorPath+"/"+e.removes)
		}
		assert.ElementsMatch(t, slices.Collect(maps.Keys(files)), f.files(), "after %s: no file a person would not have written", e.what)
		f.renderEqualsCluster(lc)
	}
}

// seed pushes the layout into the repository's folder and applies it the
// way its applier would; it returns the seed commit and the folder's files.
func (lc layoutCase) seed(f *mirrorFixture) (string, []string) {
	t := f.t
	work := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", f.url, work)
	dir := filepath.Join(work, mirrorPath)
	src := filepath.Join("testdata", "layouts", lc.name)
	var files []string
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		files = append(files, filepath.ToSlash(rel))
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte("${NAMESPACE}"), []byte(f.ns))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755))
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	}))
	git(t, work, "add", "-A")
	git(t, work, "commit", "--quiet", "-m", "The "+lc.name+" app")
	git(t, work, "push", "--quiet", "origin", "HEAD:main")
	head := git(t, work, "rev-parse", "HEAD")
	dir = filepath.Join(dir, lc.folder)
	switch lc.apply {
	case "f":
		kubectlOK(t, admin, "", "apply", "-n", f.ns, "-f", dir)
	case "k":
		kubectlOK(t, admin, "", "apply", "-n", f.ns, "-k", dir)
	case "flux":
		f.flux = fluxSync(t, f.url, "./"+path.Join(mirrorPath, lc.folder), f.ns, "24h")
		waitApplied(t, f.flux, head)
	}
	return head, files
}

// renderEqualsCluster renders the folder as its applier does and checks
// that each rendered object is live with the fields the render sets, and
// that the namespace holds no other object of the mirrored kinds.
func (f *mirrorFixture) renderEqualsCluster(lc layoutCase) {
	t := f.t
	t.Helper()
	checkout := filepath.Join(t.TempDir(), "checkout")
	git(t, filepath.Dir(checkout), "clone", "--quiet", f.bare, checkout)
	dir := filepath.Join(checkout, mirrorPath, lc.folder)
	var stream []byte
	if lc.apply == "f" {
		// kubectl apply -f, like an Argo CD directory app, reads the
		// folder's own files, not its sub-folders.
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
				data, err := os.ReadFile(filepath.Join(dir, e.Name()))
				require.NoError(t, err)
				stream = append(append(stream, "\n---\n"...), data...)
			}
		}
	} else {
		stream = []byte(kubectlOK(t, admin, "", "kustomize", dir))
	}
	rendered := map[string]bool{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if doc == nil {
			continue
		}
		md, _ := doc["metadata"].(map[string]any)
		require.NotNil(t, md, "a document without metadata: %v", doc)
		if lc.setsNamespace {
			assert.Equal(t, f.ns, md["namespace"], "the folder's kustomization sets the namespace: %v", md)
		} else {
			assert.Nil(t, md["namespace"], "the folder leaves namespaces to its applier: %v", md)
		}
		kind, name := strings.ToLower(doc["kind"].(string)), md["name"].(string)
		rendered[kind+"/"+name] = true
		var live map[string]any
		getJSON(t, admin, &live, kind, name, "-n", f.ns)
		want := normalized(t, doc)
		delete(want["metadata"].(map[string]any), "namespace")
		assert.Equal(t, want, project(live, want), "%s/%s: the render sets what the cluster holds", kind, name)
	}
	kinds := "configmaps,services,deployments.apps"
	if lc.helm {
		kinds += ",helmreleases.helm.toolkit.fluxcd.io"
	}
	out := kubectlOK(t, admin, "", "get", kinds, "-n", f.ns, "-o", "name")
	var liveNames []string
	for _, n := range strings.Fields(out) {
		if n != "configmap/kube-root-ca.crt" {
			n = strings.Replace(n, "deployment.apps/", "deployment/", 1)
			liveNames = append(liveNames, strings.Replace(n, "helmrelease.helm.toolkit.fluxcd.io/", "helmrelease/", 1))
		}
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(rendered)), liveNames, "the folder renders every object of the namespace, and only those")
}

// normalized is doc as JSON decodes it, so numbers compare with the live
// object's.
func normalized(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out))
	return out
}

// project keeps of live what shape sets.
func project(live, shape any) any {
	switch s := shape.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return live
		}
		out := map[string]any{}
		for k, v := range s {
			if lv, ok := l[k]; ok {
				out[k] = project(lv, v)
			}
		}
		return out
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(s) {
			return live
		}
		out := make([]any, len(l))
		for i := range l {
			out[i] = project(l[i], s[i])
		}
		return out
	default:
		return live
	}
}
