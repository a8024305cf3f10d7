package worker

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"reverser.dev/reverser/pkg/document"
)

// fakeSealer "encrypts" as the real one does for the worker's purposes: a
// new document each time (a counter stands for SOPS's randomness), and a
// prior that holds the same plaintext comes back as it is.
type fakeSealer struct{ n atomic.Int64 }

func (s *fakeSealer) Seal(plain []byte, keys []string, priors ...[]byte) ([]byte, error) {
	digest := fmt.Sprintf("sealed %q %x", keys, sha256.Sum256(plain))
	for _, p := range priors {
		if strings.HasPrefix(string(p), digest+" ") {
			return p, nil
		}
	}
	return fmt.Appendf(nil, "%s %d\n", digest, s.n.Add(1)), nil
}

var secretGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// secret sends a change of Secret demo/name holding value ("": deleted).
func (c *clocked) secret(tg Target, name, value string) {
	var content []byte
	if value != "" {
		content = []byte(value + "\n")
	}
	c.sendSecret(tg, "demo", name, content)
}

// sendSecret sends a change of Secret ns/name, its document in clear, at
// its layout path.
func (c *clocked) sendSecret(tg Target, ns, name string, content []byte) {
	c.w.Change(c.ctx, tg.Key, document.Change{Path: document.DocumentPath(tg.Path, secretGVR, ns, name), Content: content,
		Encrypt: []string{"data", "stringData"}, Desc: "Secret " + ns + "/" + name, Seen: c.clock.Now(), GVR: secretGVR, Kind: "Secret",
		Namespace: ns, Name: name})
	c.settle()
}

// shopToken is Secret shop/token in clear.
const shopToken = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: shop\ndata:\n  token: aHVudGVyMg==\n"

func TestSecretsAreWrittenSealed(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Seal = &fakeSealer{}
	c := startClocked(t, url, tg)
	c.bare = bare
	const doc = "clusters/dev/demo/secrets/token.yaml"

	c.secret(tg, "token", "password: hunter2")
	c.step(tg.Window.Silence)
	sealed := c.remoteShow(doc)
	assert.True(t, strings.HasPrefix(sealed, "sealed "), "written sealed: %q", sealed)
	assert.NotContains(t, sealed, "hunter2")
	assert.Equal(t, 1, c.commitCount())

	// The same values again (a relist, a restart) keep Git's document.
	c.secret(tg, "token", "password: hunter2")
	c.step(tg.Window.Silence)
	assert.Equal(t, 1, c.commitCount(), "an unchanged Secret makes no commit")
	assert.Equal(t, sealed, c.remoteShow(doc))

	// Edited and edited back within one window: nothing to commit.
	c.secret(tg, "token", "password: hunter3")
	c.secret(tg, "token", "password: hunter2")
	c.step(tg.Window.Silence)
	assert.Equal(t, 1, c.commitCount())

	c.secret(tg, "token", "password: hunter3")
	c.step(tg.Window.Silence)
	assert.Equal(t, 2, c.commitCount())
	assert.NotEqual(t, sealed, c.remoteShow(doc))
	assert.Equal(t, "Reverser: update Secret demo/token", c.git(bare, "log", "-1", "--format=%s", "main"))

	c.secret(tg, "token", "")
	c.step(tg.Window.Silence)
	assert.NotContains(t, c.remoteFiles(), doc)
}

// Without sealing, a Secret that reaches the worker anyway (the GitTarget's
// encryption was just removed) is dropped, and the Secrets Git holds are
// left alone by the sweep.
func TestSecretsAreNeverWrittenUnsealed(t *testing.T) {
	url, bare := serveRepo(t)
	(&fixture{t: t, url: url}).seedRemote(map[string]string{"clusters/dev/demo/secrets/kept.yaml": "sealed elsewhere\n"}, "seed")
	c := startClocked(t, url, site)
	c.bare = bare
	c.secret(site, "token", "password: hunter2")
	c.change(site, "a", "a: 1")
	c.w.Synced(c.ctx, site.Key, document.Scope{GVR: secretGVR, Namespace: "demo"})
	c.w.Synced(c.ctx, site.Key, document.Scope{GVR: cmGVR, Namespace: "demo"})
	c.step(site.Window.Silence)
	assert.ElementsMatch(t, []string{"clusters/dev/demo/secrets/kept.yaml", "clusters/dev/demo/configmaps/a.yaml"}, c.remoteFiles())
}

// In a folder kustomize builds, a sealed document keeps a file of its own:
// the planner, which would write its fields into a generator or a source
// file in clear, never sees it.
func TestASealedDocumentIsNeverWrittenIntoSources(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/kustomization.yaml": "namespace: shop\nsecretGenerator:\n- name: token\n  literals:\n  - token=old\nresources:\n- settings.yaml\n",
		"site/settings.yaml":      configMap("settings", "blue"),
	})
	tg := shop
	tg.Seal = &fakeSealer{}
	c := startClocked(t, url, tg)
	c.bare = bare
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	c.w.Change(c.ctx, tg.Key, document.Change{Path: document.DocumentPath(tg.Path, gvr, "shop", "settings"),
		Content: []byte(configMap("settings", "hunter2")), Encrypt: []string{"color"}, Desc: "ConfigMap shop/settings", Seen: c.clock.Now(),
		GVR: gvr, Kind: "ConfigMap", Namespace: "shop", Name: "settings"})
	c.sendSecret(tg, "shop", "token", []byte(shopToken))
	c.step(tg.Window.Silence)
	assert.Equal(t, configMap("settings", "blue"), c.remoteShow("site/settings.yaml")+"\n", "the source file is left alone")
	assert.Contains(t, c.remoteShow("site/kustomization.yaml"), "token=old", "the generator is left alone")
	assert.True(t, strings.HasPrefix(c.remoteShow("site/shop/secrets/token.yaml"), "sealed "), "a document of its own")
	assert.NotContains(t, c.remoteFiles(), "site/shop/configmaps/settings.yaml", "no second copy of what a source holds")
	c.rec.mu.Lock()
	assert.Equal(t, []string{"ConfigMap shop/settings is already in site/settings.yaml, which Reverser does not rewrite encrypted: " +
		"move it to site/shop/configmaps/settings.yaml (git mv) to have it mirrored"}, c.rec.refusals)
	c.rec.mu.Unlock()
	assert.NotContains(t, c.git(bare, "log", "-p", "main"), "hunter2")
}

// A Secret Git holds in a file made by hand is not copied to its layout
// path, which would give appliers the object twice: the change is refused,
// naming the file and the fix.
func TestASealedDocumentHeldElsewhereIsRefused(t *testing.T) {
	url, bare := seeded(t, map[string]string{
		"site/secrets.enc.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: shop\ndata:\n  token: ENC[...]\n",
	})
	tg := shop
	tg.Seal = &fakeSealer{}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.sendSecret(tg, "shop", "token", []byte(shopToken))
	c.step(tg.Window.Silence)
	assert.Equal(t, []string{"site/secrets.enc.yaml"}, c.remoteFiles())
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	assert.Equal(t, []string{"Secret shop/token is already in site/secrets.enc.yaml, which Reverser does not rewrite encrypted: " +
		"move it to site/shop/secrets/token.yaml (git mv) to have it mirrored"}, c.rec.refusals)
}
