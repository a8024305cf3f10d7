package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/gitserver"
)

var committer = identity.Signature{Name: "Reverser", Email: "reverser@reverser.dev"}

type recorder struct {
	mu       sync.Mutex
	commits  []string
	pushes   int
	failures []error
	refusals []string
	// rejected are the targets of the pushes rejected, one a push.
	rejected []string
	// unapplied are the Unapplied reports, in order.
	unapplied []string
}

func (r *recorder) Committed(_, sha string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits = append(r.commits, sha)
}

func (r *recorder) Pushed([]string, string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushes++
}

func (r *recorder) Refused(_ string, refusals []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusals = refusals
}

func (r *recorder) Unapplied(_, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unapplied = append(r.unapplied, message)
}

// lastUnapplied is the last Unapplied report ("" none).
func (r *recorder) lastUnapplied() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.unapplied) == 0 {
		return ""
	}
	return r.unapplied[len(r.unapplied)-1]
}

func (r *recorder) Rejected(targets []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, targets...)
}

func (r *recorder) Failed(_ []string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, err)
}

type fixture struct {
	t    *testing.T
	bare string
	url  string
	w    *Worker
	rec  *recorder
	ctx  context.Context
}

func newFixture(t *testing.T) *fixture {
	url, bare := gitserver.Serve(t, "repo")
	return &fixture{t: t, bare: bare, url: url}
}

func (f *fixture) start(targets ...Target) {
	repo, err := gitrepo.Open(f.t.TempDir(), f.url, "main", nil)
	require.NoError(f.t, err)
	f.rec = &recorder{}
	f.w = New(repo, committer, f.rec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	f.ctx = ctx
	for _, t := range targets {
		f.w.SetTarget(ctx, t)
	}
	go f.w.Run(ctx)
}

func (f *fixture) git(dir string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=Foreign", "GIT_AUTHOR_EMAIL=f@example.com",
		"GIT_COMMITTER_NAME=Foreign", "GIT_COMMITTER_EMAIL=f@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(f.t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// remoteFiles lists the files on the remote's main branch.
func (f *fixture) remoteFiles() []string {
	out, err := exec.Command("git", "-C", f.bare, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

func (f *fixture) remoteShow(p string) string {
	return f.git(f.bare, "show", "main:"+p)
}

func (f *fixture) commitCount() int {
	out, err := exec.Command("git", "-C", f.bare, "rev-list", "--count", "main").Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range strings.TrimSpace(string(out)) {
		n = n*10 + int(c-'0')
	}
	return n
}

func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(f.t, err, what)
}

var (
	cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	short = Window{Silence: 50 * time.Millisecond, MaxAge: time.Minute}
	site  = Target{Key: "demo/site", Path: "clusters/dev", Window: short, PruneAlways: true}
)

func TestWindowBecomesOneCommit(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	c.change(site, "a", "a: 1")
	c.change(site, "b", "b: 1")
	c.step(site.Window.Silence)
	assert.Len(t, c.remoteFiles(), 2)
	assert.Equal(t, 1, c.commitCount(), "one window, one commit")
	assert.Equal(t, "Reverser: 2 changes in clusters/dev\n\n- create ConfigMap demo/a\n- create ConfigMap demo/b",
		c.git(bare, "log", "-1", "--format=%B", "main"))
	assert.Equal(t, "Reverser <reverser@reverser.dev>", c.git(bare, "log", "-1", "--format=%an <%ae>", "main"))

	// The same content again writes nothing; a change writes one commit.
	c.change(site, "a", "a: 1")
	c.change(site, "b", "b: 2")
	c.step(site.Window.Silence)
	assert.Equal(t, "b: 2", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"))
	assert.Equal(t, 2, c.commitCount())
	assert.Equal(t, "Reverser: update ConfigMap demo/b", c.git(bare, "log", "-1", "--format=%s", "main"))

	c.change(site, "a", "")
	c.step(site.Window.Silence)
	assert.Len(t, c.remoteFiles(), 1)
	assert.Equal(t, "Reverser: delete ConfigMap demo/a", c.git(bare, "log", "-1", "--format=%s", "main"))

	// A change that is undone within the window writes nothing.
	c.change(site, "b", "b: 3")
	c.change(site, "b", "b: 2")
	c.change(site, "c", "c: 1")
	c.step(site.Window.Silence)
	assert.Len(t, c.remoteFiles(), 2)
	assert.Equal(t, 4, c.commitCount())
	assert.Equal(t, "Reverser: create ConfigMap demo/c", c.git(bare, "log", "-1", "--format=%s", "main"))
}

// seedRemote pushes files from the git CLI, as somebody else would.
func (f *fixture) seedRemote(files map[string]string, message string) string {
	work := filepath.Join(f.t.TempDir(), "w")
	f.git(filepath.Dir(work), "clone", "--quiet", f.url, work)
	for p, c := range files {
		require.NoError(f.t, os.MkdirAll(filepath.Join(work, filepath.Dir(p)), 0o755))
		require.NoError(f.t, os.WriteFile(filepath.Join(work, p), []byte(c), 0o644))
	}
	f.git(work, "add", ".")
	f.git(work, "commit", "--quiet", "-m", message)
	f.git(work, "push", "--quiet", "origin", "HEAD:main")
	return f.git(work, "rev-parse", "HEAD")
}

func TestSweepAfterInitialState(t *testing.T) {
	for _, prune := range []bool{true, false} {
		t.Run(map[bool]string{true: "Always", false: "OnEvent"}[prune], func(t *testing.T) {
			f := newFixture(t)
			f.seedRemote(map[string]string{
				"clusters/dev/demo/configmaps/gone.yaml":    "gone\n",
				"clusters/dev/demo/configmaps/kept.yaml":    "old\n",
				"clusters/dev/README.md":                    "foreign\n",
				"clusters/dev/demo/apps/deployments/x.yaml": "not watched\n",
			}, "seed")
			tg := site
			tg.PruneAlways = prune
			f.start(tg)
			f.w.Change(f.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/kept.yaml", Content: []byte("new\n"), Desc: "ConfigMap demo/kept", Seen: time.Now()})
			f.w.Synced(f.ctx, tg.Key, document.Scope{GVR: cmGVR, Namespace: "demo"})
			f.eventually("kept updated", func() bool { return f.remoteShow("clusters/dev/demo/configmaps/kept.yaml") == "new" })
			files := f.remoteFiles()
			assert.Contains(t, files, "clusters/dev/README.md", "files outside the stream's scope stay")
			assert.Contains(t, files, "clusters/dev/demo/apps/deployments/x.yaml")
			if prune {
				assert.NotContains(t, files, "clusters/dev/demo/configmaps/gone.yaml", "Always sweeps what the cluster does not hold")
			} else {
				assert.Contains(t, files, "clusters/dev/demo/configmaps/gone.yaml", "OnEvent removes only observed deletes")
			}
		})
	}
}

func TestRejectedPushReplaysOnTheForeignCommit(t *testing.T) {
	f := newFixture(t)
	f.start(site)
	f.w.Change(f.ctx, site.Key, document.Change{Path: "clusters/dev/demo/configmaps/a.yaml", Content: []byte("a: 1\n"), Desc: "ConfigMap demo/a", Seen: time.Now()})
	f.eventually("a pushed", func() bool { return len(f.remoteFiles()) == 1 })

	foreign := f.seedRemote(map[string]string{"notes.txt": "by hand\n"}, "foreign")
	f.w.Change(f.ctx, site.Key, document.Change{Path: "clusters/dev/demo/configmaps/a.yaml", Content: []byte("a: 2\n"), Desc: "ConfigMap demo/a", Seen: time.Now()})
	f.w.Change(f.ctx, site.Key, document.Change{Path: "clusters/dev/demo/configmaps/b.yaml", Desc: "ConfigMap demo/b", Seen: time.Now()})
	f.eventually("a: 2 pushed on top of the foreign commit", func() bool {
		return f.remoteShow("clusters/dev/demo/configmaps/a.yaml") == "a: 2"
	})
	assert.Contains(t, f.remoteFiles(), "notes.txt", "the foreign commit is kept")
	f.git(f.bare, "merge-base", "--is-ancestor", foreign, "main")
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	assert.Equal(t, []string{site.Key}, f.rec.rejected, "the rejection reported once, for the Replayed Event")
}

// authors attributes changes by their ResourceVersion field, which the tests
// use as the user's name; "" is not ready yet.
type authors struct {
	mu      sync.Mutex
	waiting map[string]bool
}

func (a *authors) Author(ch document.Change, now time.Time) (identity.Signature, bool, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting[ch.ResourceVersion] {
		return identity.Signature{}, false, now.Add(time.Hour)
	}
	return identity.Signature{Name: ch.ResourceVersion, Email: ch.ResourceVersion + "@example.com"}, true, time.Time{}
}

func (f *fixture) log() []string {
	out, err := exec.Command("git", "-C", f.bare, "log", "--reverse", "--format=%an|%s", "main").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestWindowsPerAuthor(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: 300 * time.Millisecond, MaxAge: time.Minute}
	tg.Authors = &authors{waiting: map[string]bool{}}
	c := startClocked(t, url, tg)
	c.bare = bare
	// Two people at once: two commits, each authored by its person.
	c.changeBy(tg, "a", "alice", "a1")
	c.changeBy(tg, "b", "bob", "b1")
	c.step(tg.Window.Silence)
	assert.ElementsMatch(t, []string{"alice|Reverser: create ConfigMap demo/a", "bob|Reverser: create ConfigMap demo/b"}, c.log())

	// alice then bob on one object: alice's commit, with her version, comes first.
	c.changeBy(tg, "a", "alice", "a2")
	c.changeBy(tg, "a", "bob", "a3")
	c.step(tg.Window.Silence)
	log := c.log()
	require.Len(t, log, 4)
	assert.Equal(t, []string{"alice|Reverser: update ConfigMap demo/a", "bob|Reverser: update ConfigMap demo/a"}, log[2:])
	assert.Equal(t, "a2", c.git(bare, "show", "main~1:clusters/dev/demo/configmaps/a.yaml"))
	assert.Equal(t, "a3", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
}

func TestWaitingForAnAuthorHoldsOnlyThatObject(t *testing.T) {
	url, bare := serveRepo(t)
	a := &authors{waiting: map[string]bool{"carol": true}}
	tg := site
	tg.Authors = a
	c := startClocked(t, url, tg)
	c.bare = bare
	c.changeBy(tg, "x", "carol", "x1")
	// A later change of the same object waits behind carol's; another object does not.
	c.changeBy(tg, "x", "dave", "x2")
	c.changeBy(tg, "y", "dave", "y")
	c.step(tg.Window.Silence)
	assert.Equal(t, []string{"clusters/dev/demo/configmaps/y.yaml"}, c.remoteFiles(), "y committed while x waits")

	a.mu.Lock()
	a.waiting["carol"] = false
	a.mu.Unlock()
	c.w.SetTarget(c.ctx, tg) // any event wakes the worker; in production the fact index does
	c.settle()
	c.step(tg.Window.Silence) // carol's window
	c.step(tg.Window.Silence) // dave's, which waited for hers
	assert.Equal(t, []string{"dave|Reverser: create ConfigMap demo/y", "carol|Reverser: create ConfigMap demo/x", "dave|Reverser: update ConfigMap demo/x"}, c.log())
}
