package kustomize

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repo reads testdata/<name> as a repository snapshot.
func repo(t *testing.T, name string) Files {
	t.Helper()
	root := filepath.Join("testdata", name)
	files := Files{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = data
		return nil
	}))
	return files
}

func TestADocumentIsFoundWhereverItIs(t *testing.T) {
	docs, err := Documents(repo(t, "plain"), ".")
	require.NoError(t, err)
	assert.Equal(t, map[ID]Location{
		{Kind: "ConfigMap", Namespace: "shop", Name: "web-settings"}:        {File: "apps/web.yaml", Index: 0},
		{Kind: "Service", Namespace: "shop", Name: "web"}:                   {File: "apps/web.yaml", Index: 1},
		{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web"}: {File: "apps/deploy.yml", Index: 0},
	}, docs, "every object's file and document; the values file holds none")
}

func TestAnObjectInTwoDocumentsIsReportedNotGuessed(t *testing.T) {
	files := repo(t, "plain")
	files["apps/copy.yaml"] = files["apps/deploy.yml"]
	_, err := Documents(files, "apps")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Deployment.apps/shop/web in apps/copy.yaml and apps/deploy.yml")
}

// sources renders dir and keys each object's source by its ID's string.
func sources(t *testing.T, files Files, dir string) map[string]Source {
	t.Helper()
	objs, err := Render(files, dir)
	require.NoError(t, err)
	out := map[string]Source{}
	for _, o := range objs {
		out[o.ID.String()] = o.Source
		assert.NotContains(t, string(o.YAML), "config.kubernetes.io/origin", "build annotations stay out of the documents")
	}
	return out
}

func TestRenderedObjectsComeFromTheirDocuments(t *testing.T) {
	assert.Equal(t, map[string]Source{
		"ConfigMap/shop/settings":  {Kind: FromDocument, File: "site/settings.yaml"},
		"Deployment.apps/shop/web": {Kind: FromDocument, File: "site/deploy/deployment.yaml"},
	}, sources(t, repo(t, "resources"), "site"))
}

func TestAnOverlayRendersTheBasesDocuments(t *testing.T) {
	files := repo(t, "overlays")
	for _, env := range []string{"staging", "prod"} {
		assert.Equal(t, map[string]Source{
			"Deployment.apps/" + env + "/web": {Kind: FromDocument, File: "base/deployment.yaml"},
			"Service/" + env + "/web":         {Kind: FromDocument, File: "base/service.yaml"},
		}, sources(t, files, "overlays/"+env), env)
	}
}

func TestGeneratedObjectsComeFromTheirGeneratorEntries(t *testing.T) {
	got := sources(t, repo(t, "generator"), "app")
	t.Logf("%v", got)
	want := map[string]Source{
		"settings":    {Kind: FromGenerator, File: "app/kustomization.yaml", GeneratorKind: "ConfigMapGenerator", Generator: "settings", GeneratorNamespace: "shop"},
		"properties":  {Kind: FromGenerator, File: "app/kustomization.yaml", GeneratorKind: "ConfigMapGenerator", Generator: "properties", GeneratorNamespace: "shop"},
		"environment": {Kind: FromGenerator, File: "app/kustomization.yaml", GeneratorKind: "ConfigMapGenerator", Generator: "environment", GeneratorNamespace: "shop"},
		"token":       {Kind: FromGenerator, File: "app/kustomization.yaml", GeneratorKind: "SecretGenerator", Generator: "token", GeneratorNamespace: "shop"},
	}
	for id, src := range got {
		if strings.HasPrefix(id, "Deployment") {
			assert.Equal(t, Source{Kind: FromDocument, File: "app/deployment.yaml"}, src)
			continue
		}
		// Generated names carry kustomize's content hash.
		name := id[strings.LastIndex(id, "/")+1 : strings.LastIndex(id, "-")]
		assert.Equal(t, want[name], src, id)
		delete(want, name)
	}
	assert.Empty(t, want, "generated objects not rendered")
}

func TestARemoteBaseIsRefusedByName(t *testing.T) {
	_, err := Render(repo(t, "remote"), "site")
	var remote *RemoteError
	require.True(t, errors.As(err, &remote), "%v", err)
	assert.Equal(t, "site/kustomization.yaml", remote.Kustomization)
	assert.Equal(t, "https://git.example.com/org/platform//base?ref=v1.2.0", remote.Entry)
}

func TestAFolderWithoutAKustomizationIsNotRendered(t *testing.T) {
	_, err := Render(repo(t, "plain"), "apps")
	require.ErrorContains(t, err, "holds no kustomization")
}

// Two entries of one name, told apart by namespace, one without its hash.
func TestGeneratorEntriesAreFoundByNameAndNamespace(t *testing.T) {
	files := Files{"k/kustomization.yaml": []byte(`configMapGenerator:
- name: settings
  namespace: a
  literals: [x=1]
- name: settings
  namespace: b
  literals: [x=2]
  options: {disableNameSuffixHash: true}
`)}
	objs, err := Render(files, "k")
	require.NoError(t, err)
	got := map[string]string{}
	for _, o := range objs {
		got[o.ID.Namespace+"/"+o.ID.Name] = o.Source.GeneratorNamespace + "/" + o.Source.Generator
	}
	require.Len(t, got, 2)
	assert.Equal(t, "b/settings", got["b/settings"], "the unhashed one")
	for k, v := range got {
		if strings.HasPrefix(k, "a/") {
			assert.Equal(t, "a/settings", v, k)
		}
	}
}

// Helm charts and generator plugins would run programs: refused.
func TestWhatWouldRunAProgramIsRefused(t *testing.T) {
	for name, k := range map[string]string{
		"helm":        "helmCharts:\n- name: web\n  repo: https://charts.example.com\n  version: 1.0.0\n",
		"exec plugin": "generators:\n- gen.yaml\n",
	} {
		files := Files{"k/kustomization.yaml": []byte(k), "k/gen.yaml": []byte(
			"apiVersion: example.com/v1\nkind: Run\nmetadata:\n  name: run\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: /bin/sh\n")}
		_, err := Render(files, "k")
		assert.Error(t, err, name)
	}
}

// The repository is a tenant's input: a kustomization that names the
// controller's own files, or a program, reads nothing of the host.
func TestAKustomizationCannotReadTheHost(t *testing.T) {
	host, err := os.ReadFile("/etc/hostname")
	if err != nil {
		host = []byte("no-such-content")
	}
	for name, k := range map[string]string{
		"absolute resource":  "resources:\n- /etc/hostname\n",
		"escaping resource":  "resources:\n- ../../../../../../etc/hostname\n",
		"generator file":     "configMapGenerator:\n- name: stolen\n  files:\n  - /etc/hostname\n",
		"escaping generator": "configMapGenerator:\n- name: stolen\n  files:\n  - ../../../../../../etc/hostname\n",
		"env file":           "configMapGenerator:\n- name: stolen\n  envs:\n  - /proc/self/environ\n",
	} {
		objs, err := Render(Files{"site/kustomization.yaml": []byte(k)}, "site")
		require.Error(t, err, name)
		assert.NotContains(t, err.Error(), strings.TrimSpace(string(host)), name)
		assert.Empty(t, objs, name)
	}
}
