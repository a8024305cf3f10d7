package kustomize

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// rendered is the object with id as dir renders it, and edit applied to
// its decoded form: the live object after someone's change.
func rendered(t *testing.T, files Files, dir string, id ID, edit func(obj map[string]any)) (old, live []byte, realID ID) {
	t.Helper()
	objs, err := Render(files, dir)
	require.NoError(t, err)
	for _, o := range objs {
		if sameObject(o.ID, id) || o.ID == id {
			var obj map[string]any
			require.NoError(t, kyaml.Unmarshal(o.YAML, &obj))
			edit(obj)
			out, err := kyaml.Marshal(obj)
			require.NoError(t, err)
			return o.YAML, out, o.ID
		}
	}
	t.Fatalf("%s does not render %s", dir, id)
	return nil, nil, ID{}
}

func data(obj map[string]any) map[string]any { return obj["data"].(map[string]any) }

// planned is the result of a plan: file to content, "" for a deleted file.
func planned(t *testing.T, files Files, dir string, ch Change) map[string]string {
	t.Helper()
	edits, err := Plan(files, dir, ch)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range edits {
		out[e.File] = string(e.Content)
	}
	return out
}

var (
	webSettings = ID{Kind: "ConfigMap", Namespace: "shop", Name: "web-settings"}
	shopWeb     = ID{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web"}
)

func TestAPlainDocumentIsEditedWhereItIsWithItsCommentsAndNeighbours(t *testing.T) {
	got := planned(t, repo(t, "plain"), ".", Change{ID: webSettings,
		New: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-settings\n  namespace: shop\ndata:\n  color: red\n")})
	assert.Equal(t, map[string]string{"apps/web.yaml": `# The web tier: its settings and its Service.
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-settings # read by the web Pods
  namespace: shop
data:
  color: red
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  ports:
  - port: 80
`}, got)
}

func TestAPlainDeletionRemovesItsDocumentOnly(t *testing.T) {
	got := planned(t, repo(t, "plain"), ".", Change{ID: ID{Kind: "Service", Namespace: "shop", Name: "web"}})
	assert.Equal(t, map[string]string{"apps/web.yaml": `# The web tier: its settings and its Service.
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-settings   # read by the web Pods
  namespace: shop
data:
  color: blue
`}, got)
	got = planned(t, repo(t, "plain"), ".", Change{ID: shopWeb})
	assert.Equal(t, map[string]string{"apps/deploy.yml": ""}, got, "the file of its only document goes")
}

func TestANewPlainObjectGoesToItsLayoutPath(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new, namespace: shop}\n"
	got := planned(t, repo(t, "plain"), ".", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "new"}, New: []byte(doc),
		NewPath: "shop/configmaps/new.yaml"})
	assert.Equal(t, map[string]string{"shop/configmaps/new.yaml": doc}, got)
}

func TestAKustomizedDocumentGetsTheLiveChangeNotTheTransformersOutput(t *testing.T) {
	files := repo(t, "resources")
	old, live, _ := rendered(t, files, "site", shopWeb, func(o map[string]any) { o["spec"].(map[string]any)["replicas"] = 4 })
	got := planned(t, files, "site", Change{ID: shopWeb, Old: old, New: live})
	// No namespace: kustomization.yaml's namespace: sets it.
	assert.Equal(t, map[string]string{"site/deploy/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 4
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: shop/web:v1
`}, got)
}

// A new object is written as a person would write it there: the namespace
// the kustomization sets is left to it.
func TestANewObjectIsAFileListedInResources(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: shop\ndata:\n  a: b\n"
	got := planned(t, repo(t, "resources"), "site", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "extra"}, New: []byte(doc),
		NewPath: "site/shop/configmaps/extra.yaml"})
	assert.Equal(t, map[string]string{
		"site/shop/configmaps/extra.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: b\n",
		"site/kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: shop
resources:
- settings.yaml # kept first: the others read it
- deploy
- shop/configmaps/extra.yaml
`}, got)
}

func TestADeletedObjectTakesItsFileAndEntry(t *testing.T) {
	got := planned(t, repo(t, "resources"), "site", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}})
	assert.Equal(t, map[string]string{
		"site/settings.yaml": "",
		"site/kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: shop
resources:
- deploy
`}, got)
}

func TestABaseUnderOverlaysIsReadOnly(t *testing.T) {
	files := repo(t, "overlays")
	id := ID{Group: "apps", Kind: "Deployment", Namespace: "staging", Name: "web"}
	old, live, _ := rendered(t, files, "overlays/staging", id, func(o map[string]any) {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"tier": "front"}
	})
	_, err := Plan(files, "overlays/staging", Change{ID: id, Old: old, New: live})
	var r *Refusal
	require.True(t, errors.As(err, &r), "%v", err)
	assert.Equal(t, id, r.ID)
	assert.Contains(t, r.Reason, "base/deployment.yaml")

	// Changed back to what the base renders: nothing to write, no refusal.
	edits, err := Plan(files, "overlays/staging", Change{ID: id, Old: live, New: old})
	require.NoError(t, err)
	assert.Empty(t, edits)
}

func TestAGeneratedConfigMapIsWrittenIntoItsInputs(t *testing.T) {
	files := repo(t, "generator")
	settings := ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings-0000000000"}
	old, live, id := rendered(t, files, "app", settings, func(o map[string]any) {
		d := data(o)
		d["color"] = "red"   // a literal changed
		delete(d, "size")    // a literal removed
		d["shape"] = "round" // a key added
	})
	got := planned(t, files, "app", Change{ID: id, Old: old, New: live})
	assert.Equal(t, map[string]string{"app/kustomization.yaml": `namespace: shop
configMapGenerator:
- name: settings
  literals:
  - color=red
  - shape=round
- name: properties
  files:
  - app.properties
- name: environment
  envs:
  - vars.env
secretGenerator:
- name: token
  literals:
  - token=not-a-secret
resources:
- deployment.yaml
`}, got)

	old, live, id = rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "environment-0000000000"}, func(o map[string]any) {
		data(o)["MODE"] = "slow"
	})
	got = planned(t, files, "app", Change{ID: id, Old: old, New: live})
	assert.Equal(t, map[string]string{"app/vars.env": "MODE=slow\nLEVEL=2\n"}, got, "the env file's line, where it stands")

	old, live, id = rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "properties-0000000000"}, func(o map[string]any) {
		data(o)["app.properties"] = "greeting=hi\nlimit=10\n"
	})
	got = planned(t, files, "app", Change{ID: id, Old: old, New: live})
	assert.Equal(t, map[string]string{"app/app.properties": "greeting=hi\nlimit=10\n"}, got, "the file's content")
}

func TestADeletedGeneratedConfigMapTakesItsEntryAndKeepsItsInputs(t *testing.T) {
	files := repo(t, "generator")
	_, _, id := rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "environment-0000000000"}, func(map[string]any) {})
	got := planned(t, files, "app", Change{ID: id})
	assert.Equal(t, map[string]string{"app/kustomization.yaml": `namespace: shop
configMapGenerator:
- name: settings
  literals:
  - color=blue
  - size=large
- name: properties
  files:
  - app.properties
secretGenerator:
- name: token
  literals:
  - token=not-a-secret
resources:
- deployment.yaml
`}, got, "vars.env stays")
}

func TestAnUnchangedObjectPlansNoWrite(t *testing.T) {
	files := repo(t, "generator")
	old, live, id := rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings-0000000000"}, func(map[string]any) {})
	edits, err := Plan(files, "app", Change{ID: id, Old: old, New: live})
	require.NoError(t, err)
	assert.Empty(t, edits, "a live object the generator already renders")
}

// Two generated ConfigMaps of one kustomization deleted in one commit.
func TestTwoGeneratedConfigMapsDeletedTogether(t *testing.T) {
	files := repo(t, "generator")
	var changes []Change
	for _, name := range []string{"settings", "environment"} {
		_, _, id := rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: name + "-0000000000"}, func(map[string]any) {})
		changes = append(changes, Change{ID: id})
	}
	edits, outcomes, err := PlanAll(files, "app", changes)
	require.NoError(t, err)
	assert.Equal(t, []Outcome{{Verb: "delete"}, {Verb: "delete"}}, outcomes)
	require.Len(t, edits, 1)
	assert.Equal(t, `namespace: shop
configMapGenerator:
- name: properties
  files:
  - app.properties
secretGenerator:
- name: token
  literals:
  - token=not-a-secret
resources:
- deployment.yaml
`, string(edits[0].Content))
}

// A generator in a base the overlay builds: what it already renders plans
// nothing; a change that would write into it is refused.
func TestAGeneratorInAReadOnlyBase(t *testing.T) {
	files := repo(t, "generator")
	files["overlay/kustomization.yaml"] = []byte("resources:\n- ../app\nnamePrefix: x-\n")
	old, live, id := rendered(t, files, "overlay", ID{Kind: "ConfigMap", Namespace: "shop", Name: "x-settings-0000000000"}, func(map[string]any) {})
	edits, err := Plan(files, "overlay", Change{ID: id, Old: old, New: live})
	require.NoError(t, err)
	assert.Empty(t, edits)
	old, live, id = rendered(t, files, "overlay", ID{Kind: "ConfigMap", Namespace: "shop", Name: "x-settings-0000000000"}, func(o map[string]any) {
		data(o)["color"] = "red"
	})
	_, err = Plan(files, "overlay", Change{ID: id, Old: old, New: live})
	var r *Refusal
	require.True(t, errors.As(err, &r), "%v", err)
	assert.Contains(t, r.Reason, "app/kustomization.yaml, a base outside overlay")
}

// values.yaml is both a generator input and a HelmRelease's values file:
// a live edit of the ConfigMap is refused, with who else reads it; a
// deletion keeps it; the entry's other inputs are written as usual.
func TestAGeneratorInputSharedWithAHelmReleaseIsNotWritten(t *testing.T) {
	files := repo(t, "shared")
	old, live, id := rendered(t, files, "apps/web", ID{Kind: "ConfigMap", Namespace: "shop", Name: "web-values-0000000000"}, func(o map[string]any) {
		data(o)["values.yaml"] = "replicaCount: 9\n"
	})
	_, err := Plan(files, "apps/web", Change{ID: id, Old: old, New: live})
	var r *Refusal
	require.True(t, errors.As(err, &r), "%v", err)
	assert.Contains(t, r.Reason, "HelmRelease shop/web")

	got := planned(t, files, "apps/web", Change{ID: id})
	assert.NotContains(t, got, "apps/web/values.yaml", "the shared input stays")
	assert.Contains(t, got, "apps/web/kustomization.yaml")

	old, live, id = rendered(t, files, "apps/web", ID{Kind: "ConfigMap", Namespace: "shop", Name: "web-flags-0000000000"}, func(o map[string]any) {
		data(o)["debug"] = "true"
	})
	assert.Contains(t, planned(t, files, "apps/web", Change{ID: id, Old: old, New: live})["apps/web/kustomization.yaml"], "- debug=true")
}

func TestAnArgoCDApplicationsValueFileIsShared(t *testing.T) {
	files := repo(t, "shared")
	delete(files, "clusters/web.yaml")
	files["clusters/app.yaml"] = []byte(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: web, namespace: argocd}
spec:
  source:
    path: apps/web
    helm:
      valueFiles: [values.yaml]
`)
	assert.Equal(t, "Application argocd/web", sharedWith(files, "apps/web/values.yaml"))
	assert.Empty(t, sharedWith(files, "apps/web/kustomization.yaml"))
}

func container(o map[string]any) map[string]any {
	return at(o, "spec", "template", "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)
}

// Replicas and images set by the overlay's replicas: and images: entries
// are written there; a base's document the overlay has no entry for gets
// one in the overlay.
func TestReplicasAndImagesGoWhereKustomizeSetsThem(t *testing.T) {
	files := repo(t, "overlays")
	id := ID{Group: "apps", Kind: "Deployment", Namespace: "staging", Name: "web"}
	old, live, _ := rendered(t, files, "overlays/staging", id, func(o map[string]any) {
		o["spec"].(map[string]any)["replicas"] = 5
		container(o)["image"] = "shop/web:v3"
	})
	assert.Equal(t, map[string]string{"overlays/staging/kustomization.yaml": `namespace: staging
resources:
- ../../base
images:
- name: shop/web
  newTag: v3
replicas:
- name: web
  count: 5
`}, planned(t, files, "overlays/staging", Change{ID: id, Old: old, New: live}))

	files["overlays/prod/kustomization.yaml"] = []byte("namespace: prod\nresources:\n- ../../base\n")
	id.Namespace = "prod"
	old, live, _ = rendered(t, files, "overlays/prod", id, func(o map[string]any) {
		o["spec"].(map[string]any)["replicas"] = 2
		container(o)["image"] = "mirror.example/web:v4"
	})
	assert.Equal(t, map[string]string{"overlays/prod/kustomization.yaml": `namespace: prod
resources:
- ../../base
replicas:
- name: web
  count: 2
images:
- name: shop/web
  newName: mirror.example/web
  newTag: v4
`}, planned(t, files, "overlays/prod", Change{ID: id, Old: old, New: live}), "the base stays as it is")
}

// After a write-back the applier makes the ConfigMap under its new hash and
// prunes the old one: that deletion plans nothing.
func TestPruningAnOlderGenerationPlansNothing(t *testing.T) {
	files := repo(t, "generator")
	edits, err := Plan(files, "app", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings-0000000000"}})
	require.NoError(t, err)
	assert.Empty(t, edits)
}

// One commit's changes planned together; the one that cannot be written is
// refused alone.
func TestACommitsChangesArePlannedTogetherAndARefusalStaysAlone(t *testing.T) {
	files := repo(t, "resources")
	old, live, _ := rendered(t, files, "site", shopWeb, func(o map[string]any) { o["spec"].(map[string]any)["replicas"] = 4 })
	extra := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: shop\n"
	// Moving the Deployment to another namespace is what kustomization.yaml's
	// namespace: decides: the render cannot show it.
	_, moved, _ := rendered(t, files, "site", ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}, func(o map[string]any) {
		o["metadata"].(map[string]any)["namespace"] = "elsewhere"
	})
	edits, outcomes, err := PlanAll(files, "site", []Change{
		{ID: shopWeb, Old: old, New: live},
		{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "extra"}, New: []byte(extra), NewPath: "site/extra.yaml"},
		{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}, New: moved},
	})
	require.NoError(t, err)
	assert.Equal(t, "update", outcomes[0].Verb)
	assert.Equal(t, "create", outcomes[1].Verb)
	require.NotNil(t, outcomes[2].Refused)
	assert.Equal(t, "settings", outcomes[2].Refused.ID.Name)
	assert.Nil(t, outcomes[0].Refused)
	var paths []string
	for _, e := range edits {
		paths = append(paths, e.File)
	}
	assert.Equal(t, []string{"site/deploy/deployment.yaml", "site/extra.yaml", "site/kustomization.yaml"}, paths)
}

// A snapshot knows no state before: the live object's defaults and an
// applier's labels are not written into the sources.
func TestASnapshotWritesNoDefaults(t *testing.T) {
	files := repo(t, "resources")
	_, live, _ := rendered(t, files, "site", shopWeb, func(o map[string]any) {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"kustomize.toolkit.fluxcd.io/name": "site"}
		o["spec"].(map[string]any)["revisionHistoryLimit"] = 10
		o["spec"].(map[string]any)["strategy"] = map[string]any{"type": "RollingUpdate"}
	})
	edits, err := Plan(files, "site", Change{ID: shopWeb, New: live})
	require.NoError(t, err)
	assert.Empty(t, edits)

	_, live, _ = rendered(t, files, "site", shopWeb, func(o map[string]any) {
		o["spec"].(map[string]any)["revisionHistoryLimit"] = 10
		o["spec"].(map[string]any)["replicas"] = 6
	})
	got := planned(t, files, "site", Change{ID: shopWeb, New: live})
	assert.Contains(t, got["site/deploy/deployment.yaml"], "replicas: 6", "what the render sets is carried")
	assert.NotContains(t, got["site/deploy/deployment.yaml"], "revisionHistoryLimit")
}

func TestAFolderWithARemoteBaseRefusesEveryChangeByName(t *testing.T) {
	_, outcomes, err := PlanAll(repo(t, "remote"), "site", []Change{{ID: ID{Kind: "ConfigMap", Name: "local"},
		New: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local}\ndata: {a: b}\n")}})
	require.NoError(t, err)
	require.NotNil(t, outcomes[0].Refused)
	assert.Contains(t, outcomes[0].Refused.Error(), "ConfigMap/local cannot be written: site/kustomization.yaml names \"https://git.example.com/org/platform//base?ref=v1.2.0\"")
}

// A change that fails to plan (here a ConfigMap whose data is not text)
// refuses that change only.
func TestAChangeThatCannotBePlannedIsRefusedAlone(t *testing.T) {
	files := repo(t, "generator")
	_, bad, id := rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings-0000000000"}, func(o map[string]any) {
		data(o)["color"] = map[string]any{"not": "text"}
	})
	old, good, id2 := rendered(t, files, "app", ID{Kind: "ConfigMap", Namespace: "shop", Name: "environment-0000000000"}, func(o map[string]any) {
		data(o)["MODE"] = "slow"
	})
	edits, outcomes, err := PlanAll(files, "app", []Change{{ID: id, New: bad}, {ID: id2, Old: old, New: good}})
	require.NoError(t, err)
	require.NotNil(t, outcomes[0].Refused)
	assert.Equal(t, id, outcomes[0].Refused.ID)
	assert.Equal(t, "update", outcomes[1].Verb)
	require.Len(t, edits, 1)
	assert.Equal(t, "app/vars.env", edits[0].File)
}

func TestANewObjectWithNowhereToGoIsRefused(t *testing.T) {
	_, err := Plan(repo(t, "plain"), ".", Change{ID: ID{Kind: "ConfigMap", Name: "x"}, New: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")})
	var r *Refusal
	require.True(t, errors.As(err, &r), "%v", err)
}

// A foreign commit changed the source under a known object: its next
// change re-asserts the cluster's state on what the render sets.
func TestAForeignCommitUnderAKnownObjectIsReasserted(t *testing.T) {
	files := repo(t, "resources")
	live, _, _ := rendered(t, files, "site", ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}, func(map[string]any) {})
	files["site/settings.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: green # by hand\n")
	got := planned(t, files, "site", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}, Old: live, New: live})
	assert.Equal(t, map[string]string{"site/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue # by hand\n"}, got)
}

// Tenancy: a plan writes only under its folder. Another team's
// kustomization that lists this folder's file is left as it is when the
// object goes.
func TestAPlanNeverWritesOutsideItsFolder(t *testing.T) {
	files := repo(t, "resources")
	files["other-team/kustomization.yaml"] = []byte("resources:\n- ../site/settings.yaml\n")
	got := planned(t, files, "site", Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "settings"}})
	assert.Contains(t, got, "site/kustomization.yaml")
	assert.NotContains(t, got, "other-team/kustomization.yaml")
	for f := range got {
		assert.True(t, strings.HasPrefix(f, "site/"), "%s is outside site", f)
	}
}

// A file that starts with "---" keeps it, and a document whose object did
// not change is not rewritten, however its author formatted it.
func TestAFileKeepsItsLeadingSeparatorAndItsFormat(t *testing.T) {
	file := "---\n# Flags.\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: flags}\ndata:\n    beta: \"false\"\n---\n" +
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\ndata: {a: b}\n"
	files := Files{"apps/flags.yaml": []byte(file)}
	live := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: flags\n  namespace: shop\n  uid: x\ndata:\n  beta: \"false\"\n"
	pl := &Planner{Namespace: "shop"}
	edits, outcomes, err := pl.PlanAll(files, "apps", []Change{{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "flags"}, New: []byte(live)}})
	require.NoError(t, err)
	assert.Nil(t, outcomes[0].Refused)
	assert.Empty(t, edits, "the snapshot of an unchanged object writes nothing")

	edits, _, err = pl.PlanAll(files, "apps", []Change{{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "other"}}})
	require.NoError(t, err)
	require.Len(t, edits, 1)
	assert.True(t, strings.HasPrefix(string(edits[0].Content), "---\n# Flags.\n"), "the leading separator stays:\n%s", edits[0].Content)
}

// A label a person adds live to an object whose labels the kustomization's
// labels: transformer sets goes into the document, without the
// transformer's.
func TestALabelBesideATransformersLabelsIsWritten(t *testing.T) {
	files := Files{
		"app/kustomization.yaml":      []byte("labels:\n- pairs:\n    part-of: store\nresources:\n- base\n"),
		"app/base/kustomization.yaml": []byte("resources:\n- cart.yaml\n"),
		"app/base/cart.yaml":          []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: cart # the cart\nspec:\n  ports:\n  - port: 80\n"),
	}
	pl := &Planner{Namespace: "shop"}
	cart := ID{Kind: "Service", Namespace: "shop", Name: "cart"}
	old := "apiVersion: v1\nkind: Service\nmetadata:\n  name: cart\n  namespace: shop\n  labels: {part-of: store}\nspec:\n  ports:\n  - port: 80\n"
	live := strings.Replace(old, "{part-of: store}", "{part-of: store, tier: back}", 1)
	edits, outcomes, err := pl.PlanAll(files, "app", []Change{{ID: cart, Old: []byte(old), New: []byte(live)}})
	require.NoError(t, err)
	require.Nil(t, outcomes[0].Refused)
	require.Len(t, edits, 1)
	assert.Equal(t, "apiVersion: v1\nkind: Service\nmetadata:\n  name: cart # the cart\n  labels:\n    tier: back\nspec:\n  ports:\n  - port: 80\n",
		string(edits[0].Content))
}
