package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"reverser.dev/reverser/pkg/document"
)

// The tests of this file give the worker a repository people already have
// and check that changes land in its files, not beside them.

var shop = Target{Key: "shop/site", Path: "site", Window: short, PruneAlways: true}

func configMap(name, color string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: shop\ndata:\n  color: " + color + "\n"
}

// sendTo sends a ConfigMap change of namespace shop at its layout path.
func (c *clocked) sendTo(tg Target, name, content string, snapshot bool) {
	c.t.Helper()
	var body []byte
	if content != "" {
		body = []byte(content)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	c.w.Change(c.ctx, tg.Key, document.Change{Path: document.DocumentPath(tg.Path, gvr, "shop", name), Content: body,
		Desc: "ConfigMap shop/" + name, Seen: c.clock.Now(), GVR: gvr, Namespace: "shop", Name: name, Snapshot: snapshot})
	c.settle()
}

func seeded(t *testing.T, files map[string]string) (url, bare string) {
	url, bare = serveRepo(t)
	(&fixture{t: t, url: url}).seedRemote(files, "the repository people have")
	return url, bare
}

func TestADocumentThatExistsElsewhereKeepsItsFile(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/apps/web.yaml": "# Settings of the web tier.\n" + configMap("web", "blue") + "---\n" + configMap("other", "green"),
	})
	c := startClocked(t, url, shop)
	c.bare = bare
	c.sendTo(shop, "web", configMap("web", "red"), false)
	c.sendTo(shop, "fresh", configMap("fresh", "white"), false)
	c.step(shop.Window.Silence)
	assert.Equal(t, "# Settings of the web tier.\n"+configMap("web", "red")+"---\n"+configMap("other", "green"),
		c.remoteShow("site/apps/web.yaml")+"\n", "edited in place, its neighbour and comment kept")
	assert.ElementsMatch(t, []string{"site/apps/web.yaml", "site/shop/configmaps/fresh.yaml"}, c.remoteFiles(),
		"no copy at the layout path; a new object goes there")
	assert.Equal(t, "Reverser: 2 changes in site\n\n- create ConfigMap shop/fresh\n- update ConfigMap shop/web",
		c.git(bare, "log", "-1", "--format=%B", "main"))

	c.sendTo(shop, "web", "", false)
	c.step(shop.Window.Silence)
	assert.Equal(t, configMap("other", "green"), c.remoteShow("site/apps/web.yaml")+"\n", "a deletion takes its document only")
}

func TestAKustomizedFolderIsEditedAsSource(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/kustomization.yaml": "namespace: shop\nresources:\n- settings.yaml # the settings\n",
		"site/settings.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue # the brand's\n",
	})
	c := startClocked(t, url, shop)
	c.bare = bare
	commits := c.commitCount()
	// The initial state, with a label an applier put there: nothing to write.
	c.sendTo(shop, "settings", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: shop\n  labels:\n"+
		"    kustomize.toolkit.fluxcd.io/name: site\ndata:\n  color: blue\n", true)
	c.step(shop.Window.Silence)
	assert.Equal(t, commits, c.commitCount(), "a snapshot equal to the render commits nothing")

	c.sendTo(shop, "settings", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: shop\n  labels:\n"+
		"    kustomize.toolkit.fluxcd.io/name: site\ndata:\n  color: red\n", false)
	c.sendTo(shop, "extra", configMap("extra", "white"), false)
	c.step(shop.Window.Silence)
	assert.Equal(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: red # the brand's",
		c.remoteShow("site/settings.yaml"), "the live change, not the namespace or the applier's label")
	assert.Equal(t, "namespace: shop\nresources:\n- settings.yaml # the settings\n- extra-configmap.yaml",
		c.remoteShow("site/kustomization.yaml"), "a new object is a file beside the kustomization, listed in resources:")
	assert.ElementsMatch(t, []string{"site/kustomization.yaml", "site/settings.yaml", "site/extra-configmap.yaml"}, c.remoteFiles())
	assert.Empty(t, c.rec.refusals)
}

func TestWhatCannotBeWrittenIsRefusedByNameAndTheRestIsCommitted(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		// The colour is the patch's to say, and the patch is a base's,
		// outside the folder: other folders build it too.
		"base/kustomization.yaml": "resources:\n- settings.yaml\npatches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n" +
			"    metadata: {name: settings, namespace: shop}\n    data: {color: blue}\n",
		"base/settings.yaml":      configMap("settings", "green"),
		"site/kustomization.yaml": "resources:\n- ../base\n",
	})
	c := startClocked(t, url, shop)
	c.bare = bare
	c.sendTo(shop, "settings", configMap("settings", "blue"), true)
	c.sendTo(shop, "settings", configMap("settings", "red"), false)
	c.sendTo(shop, "extra", configMap("extra", "white"), false)
	c.step(shop.Window.Silence)
	c.rec.mu.Lock()
	refusals := append([]string{}, c.rec.refusals...)
	c.rec.mu.Unlock()
	require.Len(t, refusals, 1)
	assert.Contains(t, refusals[0], "ConfigMap/shop/settings cannot be written")
	assert.Contains(t, refusals[0], "a patch in base/kustomization.yaml")
	assert.Contains(t, c.remoteShow("base/settings.yaml"), "color: green", "nothing is written for the refused object")
	assert.Contains(t, c.remoteFiles(), "site/extra-configmap.yaml", "the rest of that commit is not lost")

	// The object changes back to what the repository says: the refusal goes.
	c.sendTo(shop, "settings", configMap("settings", "blue"), false)
	c.step(shop.Window.Silence)
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	assert.Empty(t, c.rec.refusals)
}

// Fault: the local repository cannot be written when a change into a
// kustomized folder is committed: into the document, or into the folder's
// patch that sets the field (R4). Nothing is lost: once it can, the same
// change is written, once, where it goes.
func TestAKustomizedWriteThatFailsIsWrittenOnceItCan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		// file holds the colour once written.
		file string
	}{{
		name: "document",
		files: map[string]string{
			"site/kustomization.yaml": "namespace: shop\nresources:\n- settings.yaml\n",
			"site/settings.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n",
		},
		file: "site/settings.yaml",
	}, {
		name: "patch",
		files: map[string]string{
			"site/kustomization.yaml": "namespace: shop\nresources:\n- settings.yaml\npatches:\n- path: color.yaml\n",
			"site/settings.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: green\n",
			"site/color.yaml":         "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: blue\n",
		},
		file: "site/color.yaml",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			url, bare := seeded(t, tc.files)
			c := startClocked(t, url, shop)
			c.bare = bare
			c.sendTo(shop, "settings", configMap("settings", "blue"), true)
			c.step(shop.Window.Silence)
			commits := c.commitCount()

			objects := filepath.Join(c.local, "objects")
			require.NoError(t, os.Rename(objects, objects+".away"))
			require.NoError(t, os.WriteFile(objects, []byte("not a folder"), 0o644))
			c.sendTo(shop, "settings", configMap("settings", "red"), false)
			c.step(shop.Window.Silence)
			require.Positive(t, c.rec.failureCount(), "the commit failed")

			require.NoError(t, os.Remove(objects))
			require.NoError(t, os.Rename(objects+".away", objects))
			c.step(time.Minute) // past any backoff
			assert.Contains(t, c.remoteShow(tc.file), "color: red")
			assert.Equal(t, commits+1, c.commitCount(), "written once")
			assert.Equal(t, "Reverser: update ConfigMap shop/settings", c.git(bare, "log", "-1", "--format=%s", "main"))
			c.rec.mu.Lock()
			defer c.rec.mu.Unlock()
			assert.Empty(t, c.rec.refusals)
		})
	}
}

// A copy at the layout path (written before this rule existed) stays the
// one written; the other file is left as it is.
func TestALayoutCopyStaysTheOneWritten(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/apps/web.yaml":            configMap("web", "blue"),
		"site/shop/configmaps/web.yaml": configMap("web", "blue"),
	})
	c := startClocked(t, url, shop)
	c.bare = bare
	c.sendTo(shop, "web", configMap("web", "red"), false)
	c.step(shop.Window.Silence)
	assert.Contains(t, c.remoteShow("site/shop/configmaps/web.yaml"), "color: red")
	assert.Contains(t, c.remoteShow("site/apps/web.yaml"), "color: blue")
}

// sendObject sends a change of any object at its layout path.
func (c *clocked) sendObject(tg Target, gvr schema.GroupVersionResource, kind, ns, name, content string, snapshot bool) {
	c.t.Helper()
	var body []byte
	if content != "" {
		body = []byte(content)
	}
	c.w.Change(c.ctx, tg.Key, document.Change{Path: document.DocumentPath(tg.Path, gvr, ns, name), Content: body,
		Desc: kind + " " + ns + "/" + name, Seen: c.clock.Now(), GVR: gvr, Kind: kind, Namespace: ns, Name: name, Snapshot: snapshot})
	c.settle()
}

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	services    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// The most common layout there is: one file per object, no namespace in
// them, the namespace left to the applier (Argo CD's destination.namespace,
// Flux's targetNamespace, kubectl apply -n).
var unnamespaced = map[string]string{
	"site/web-deployment.yaml": `# The web tier.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1 # scaled by hand in incidents
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
`,
	"site/web-svc.yaml": `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
  - port: 80
  selector:
    app: web
`,
}

// web is the live Deployment: the repository's with the namespace and what
// the API server defaults.
func web(replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  progressDeadlineSeconds: 600
  replicas: %d
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app: web
  strategy:
    type: RollingUpdate
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - image: nginx:1.27
        imagePullPolicy: IfNotPresent
        name: web
      restartPolicy: Always
`, replicas)
}

const webService = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  clusterIP: 10.0.0.12
  ports:
  - port: 80
    protocol: TCP
    targetPort: 80
  selector:
    app: web
  type: ClusterIP
`

// Feature R1, R2: a folder applied into shop whose documents name no
// namespace. Its objects are matched there: the snapshot of a repository
// that equals the cluster commits nothing, an edit lands in the user's
// line without a namespace or defaults, a delete takes the user's file,
// and no copy appears at a layout path.
func TestAFolderWithoutNamespacesIsMatchedInItsTargetNamespace(t *testing.T) {
	url, bare := seeded(t, unnamespaced)
	tg := shop
	tg.Namespace = "shop"
	c := startClocked(t, url, tg)
	c.bare = bare
	commits := c.commitCount()
	c.sendObject(tg, deployments, "Deployment", "shop", "web", web(1), true)
	c.sendObject(tg, services, "Service", "shop", "web", webService, true)
	c.w.Synced(c.ctx, tg.Key, document.Scope{GVR: deployments, Namespace: "shop"})
	c.w.Synced(c.ctx, tg.Key, document.Scope{GVR: services, Namespace: "shop"})
	c.step(tg.Window.Silence)
	assert.Equal(t, commits, c.commitCount(), "a repository equal to the cluster gets no commit")

	c.sendObject(tg, deployments, "Deployment", "shop", "web", web(3), false)
	c.step(tg.Window.Silence)
	assert.Equal(t, strings.Replace(unnamespaced["site/web-deployment.yaml"], "replicas: 1", "replicas: 3", 1),
		c.remoteShow("site/web-deployment.yaml")+"\n", "the scale lands in the user's line, comments kept, no namespace added")

	c.sendObject(tg, services, "Service", "shop", "web", "", false)
	c.sendTo(tg, "fresh", configMap("fresh", "white"), false)
	c.step(tg.Window.Silence)
	assert.ElementsMatch(t, []string{"site/web-deployment.yaml", "site/fresh-configmap.yaml"}, c.remoteFiles(),
		"the delete takes the user's file; a new object gets a file of its own beside the others, not at a layout path")
	assert.Equal(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\ndata:\n  color: white", c.remoteShow("site/fresh-configmap.yaml"),
		"without the namespace the folder leaves to its applier")

	c.sendTo(tg, "fresh", configMap("fresh", "black"), false)
	c.step(tg.Window.Silence)
	assert.Contains(t, c.remoteShow("site/fresh-configmap.yaml"), "color: black", "its next edit finds it there")
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	assert.Empty(t, c.rec.refusals)
}

// Feature R2: the folder's namespace is not known (no applier, no
// spec.targetNamespace, rules over several namespaces). A document without
// a namespace may be the object's: no copy is written beside it, and the
// refusal names the fix.
func TestWithoutItsNamespaceAnUnnamespacedDocumentIsNeverCopied(t *testing.T) {
	url, bare := seeded(t, unnamespaced)
	c := startClocked(t, url, shop)
	c.bare = bare
	commits := c.commitCount()
	c.sendObject(shop, deployments, "Deployment", "shop", "web", web(2), false)
	c.step(shop.Window.Silence)
	assert.Equal(t, commits, c.commitCount(), "nothing written")
	assert.ElementsMatch(t, []string{"site/web-deployment.yaml", "site/web-svc.yaml"}, c.remoteFiles())
	c.rec.mu.Lock()
	require.Len(t, c.rec.refusals, 1)
	assert.Contains(t, c.rec.refusals[0], "Deployment shop/web may already be in site/web-deployment.yaml, which names no namespace: "+
		"set the GitTarget's spec.targetNamespace")
	c.rec.mu.Unlock()

	// The fix the refusal names: the object's next change lands in the
	// user's file, and the refusal goes.
	tg := shop
	tg.Namespace = "shop"
	c.w.SetTarget(c.ctx, tg)
	c.sendObject(tg, deployments, "Deployment", "shop", "web", web(3), false)
	c.step(tg.Window.Silence)
	assert.Contains(t, c.remoteShow("site/web-deployment.yaml"), "replicas: 3 # scaled by hand in incidents")
	assert.ElementsMatch(t, []string{"site/web-deployment.yaml", "site/web-svc.yaml"}, c.remoteFiles())
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	assert.Empty(t, c.rec.refusals)
}

// A Helm chart's folder takes no write: its objects come from templates
// (feature R2); a document beside them would be one Helm never reads.
func TestAHelmChartsFolderIsRefusedWithItsReason(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/Chart.yaml":              "apiVersion: v2\nname: site\nversion: 0.1.0\n",
		"site/values.yaml":             "color: blue\n",
		"site/templates/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  color: {{ .Values.color }}\n",
		"site/templates/_helpers.tpl":  "{{- define \"site.name\" -}}site{{- end }}\n",
	})
	c := startClocked(t, url, shop)
	c.bare = bare
	before := c.remoteFiles()
	c.sendTo(shop, "settings", configMap("settings", "blue"), true)
	c.sendTo(shop, "settings", configMap("settings", "red"), false)
	c.step(shop.Window.Silence)
	c.rec.mu.Lock()
	refusals := append([]string{}, c.rec.refusals...)
	c.rec.mu.Unlock()
	require.Len(t, refusals, 1)
	assert.Contains(t, refusals[0], "site/Chart.yaml makes the folder a Helm chart")
	assert.Equal(t, before, c.remoteFiles(), "nothing is written into the chart")
}
