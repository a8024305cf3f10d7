package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/testkeys"
)

// The tests of this file drive windows, saves and backoff on a fake clock:
// time moves only when a test steps it, so every outcome is decided by the
// worker's logic, not by how busy the machine is.

// clocked is a worker on a fake clock, with its local repository's folder.
type clocked struct {
	*fixture
	clock *clocktesting.FakeClock
	local string
}

func startClocked(t *testing.T, url string, targets ...Target) *clocked {
	f := &fixture{t: t, url: url}
	c := &clocked{fixture: f, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), local: t.TempDir()}
	repo, err := gitrepo.Open(c.local, url, "main", nil)
	require.NoError(t, err)
	f.rec = &recorder{}
	f.w = New(repo, committer, f.rec, nil).WithClock(c.clock)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.ctx = ctx
	for _, tg := range targets {
		f.w.SetTarget(ctx, tg)
	}
	go f.w.Run(ctx)
	c.settle()
	return c
}

// settle returns once the worker has handled everything sent to it so far
// and taken a step after that, at the fake clock's current time.
func (c *clocked) settle() {
	c.t.Helper()
	done := make(chan struct{})
	c.w.do(c.ctx, func() {
		c.w.onStep = func() {
			c.w.onStep = nil
			close(done)
		}
	})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.t.Fatal("the worker did not take a step")
	}
}

// step moves the fake clock and lets the worker act on it.
func (c *clocked) step(d time.Duration) {
	c.clock.Step(d)
	c.settle()
}

func (c *clocked) change(tg Target, name, value string) { c.changeBy(tg, name, "", value) }

// changeBy sends a change whose author, for the authors attributor, is user.
func (c *clocked) changeBy(tg Target, name, user, value string) {
	var content []byte
	if value != "" {
		content = []byte(value + "\n")
	}
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: content,
		Desc: "ConfigMap demo/" + name, Seen: c.clock.Now(), ResourceVersion: user})
	c.settle() // handled at the current time, before the clock moves
}

// byHand pushes to url, as somebody with the git CLI, a commit of what
// change does in a clone.
func (c *clocked) byHand(url, message string, change func(work string)) {
	c.t.Helper()
	work := filepath.Join(c.t.TempDir(), "w")
	c.git(filepath.Dir(work), "clone", "--quiet", url, work)
	change(work)
	c.git(work, "add", "-A")
	c.git(work, "commit", "--quiet", "-m", message)
	c.git(work, "push", "--quiet", "origin", "HEAD:main")
}

func (r *recorder) failureCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures)
}

func TestSilenceClosesAWindow(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: 5 * time.Second, MaxAge: time.Minute}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.change(tg, "a", "a: 1")
	c.step(4 * time.Second)
	c.change(tg, "b", "b: 1") // the silence starts again
	c.step(4 * time.Second)
	assert.Equal(t, 0, c.commitCount(), "8s after the first change, but only 4s of silence")
	c.step(time.Second)
	assert.Equal(t, 1, c.commitCount(), "5s of silence close the window: one commit for both changes")
	assert.ElementsMatch(t, []string{"clusters/dev/demo/configmaps/a.yaml", "clusters/dev/demo/configmaps/b.yaml"}, c.remoteFiles())
}

// TestTheSnapshotCommitsOnceEveryScopeHasSynced: a target's initial state
// is one commit, made as soon as every scope has delivered it, without
// waiting for a silence nobody's edit started; edits after it, and a
// stream's replay after a restart, wait for the silence as before.
func TestTheSnapshotCommitsOnceEveryScopeHasSynced(t *testing.T) {
	url, bare := serveRepo(t)
	other := document.Scope{GVR: cmGVR, Namespace: "other"}
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: 2 * time.Hour}
	tg.Scopes = []document.Scope{demoScope, other}
	c := startClocked(t, url, tg)
	c.bare = bare
	snapshot := func(name string) {
		c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(name + ": 1\n"),
			Desc: "ConfigMap demo/" + name, Seen: c.clock.Now(), Snapshot: true})
	}
	synced := func(scope document.Scope) {
		c.w.Synced(c.ctx, tg.Key, scope)
		c.settle()
	}
	snapshot("a")
	snapshot("b")
	synced(demoScope)
	assert.Equal(t, 0, c.commitCount(), "one scope of two delivered its initial state")
	synced(other)
	assert.Equal(t, 1, c.commitCount(), "the snapshot is committed once complete, the clock unmoved")
	assert.ElementsMatch(t, []string{"clusters/dev/demo/configmaps/a.yaml", "clusters/dev/demo/configmaps/b.yaml"}, c.remoteFiles())

	c.change(tg, "c", "c: 1")
	snapshot("d") // a restarted stream's replay
	synced(demoScope)
	assert.Equal(t, 1, c.commitCount(), "an edit, and a replay, wait for the silence")
	c.step(time.Hour)
	assert.Equal(t, 2, c.commitCount())
}

func TestMaxAgeClosesABusyWindowOnTheClock(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: 10 * time.Second}
	c := startClocked(t, url, tg)
	c.bare = bare
	for i := range 9 {
		c.change(tg, "a", string(rune('a'+i)))
		c.step(time.Second)
	}
	assert.Equal(t, 0, c.commitCount(), "9s into a busy window")
	c.change(tg, "a", "z")
	c.step(time.Second)
	assert.Equal(t, 1, c.commitCount(), "maxAge closes the window although edits keep coming")
	assert.Equal(t, "z", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
}

func TestBackoffDoublesAfterEachFailure(t *testing.T) {
	// A remote nobody answers: every fetch fails.
	c := startClocked(t, "http://127.0.0.1:1/nobody.git", site)
	require.Equal(t, 1, c.rec.failureCount(), "the first fetch failed")
	for _, backoff := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		c.step(backoff - time.Millisecond)
		failures := c.rec.failureCount()
		c.step(time.Millisecond)
		assert.Equal(t, failures+1, c.rec.failureCount(), "retried once %s after the last failure, not before", backoff)
	}
	// The backoff stops growing at 30s.
	for range 6 {
		c.step(30 * time.Second)
	}
	failures := c.rec.failureCount()
	c.step(30 * time.Second)
	assert.Equal(t, failures+1, c.rec.failureCount())
}

// TestAFailedCommitKeepsItsWindowAndSave (finding 3): a local commit that
// fails, here because the local repository cannot store objects, keeps the
// window and its save; once the repository works again, the same window is
// committed with the save's message and the save ends Committed.
func TestAFailedCommitKeepsItsWindowAndSave(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: time.Hour}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.change(tg, "a", "a: 1")
	results := make(chan SaveResult, 1)
	c.w.Save(c.ctx, SaveRequest{ID: "uid-1", Target: tg.Key, Author: committer, Message: "Keep me", Collect: time.Second,
		Deadline: c.clock.Now().Add(time.Minute), Done: func(r SaveResult) { results <- r }})
	c.settle()

	objects := filepath.Join(c.local, "objects")
	require.NoError(t, os.Rename(objects, objects+".away"))
	require.NoError(t, os.WriteFile(objects, []byte("not a folder"), 0o644))
	c.step(time.Second)
	require.Equal(t, 1, c.rec.failureCount(), "the commit failed: %v", c.rec.failures)
	select {
	case r := <-results:
		t.Fatalf("the save ended although its commit failed: %+v", r)
	default:
	}

	require.NoError(t, os.Remove(objects))
	require.NoError(t, os.Rename(objects+".away", objects))
	c.step(500 * time.Millisecond) // the backoff
	select {
	case r := <-results:
		require.Equal(t, SaveCommitted, r.Outcome, r.Message)
	default:
		t.Fatal("the save did not end once the commit succeeded")
	}
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
	assert.Equal(t, "Keep me", c.git(bare, "log", "-1", "--format=%s", "main"))
}

func serveRepo(t *testing.T) (url, bare string) {
	return gitserver.Serve(t, "repo")
}

// TestControlNeverWaitsForABusyWorker (finding 5): with the worker busy and
// its change queue full, a reconcile's SetTarget, SetAuth, RemoveTarget,
// Save and FindSave return at once, and take effect, in order, once the
// worker is free.
func TestControlNeverWaitsForABusyWorker(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	gate := make(chan struct{})
	c.w.do(c.ctx, func() { <-gate }) // busy, e.g. in a long push
	for range cap(c.w.in) {
		c.w.Change(c.ctx, site.Key, document.Change{Path: "clusters/dev/demo/configmaps/q.yaml", Content: []byte("q\n"), Seen: c.clock.Now()})
	}
	require.Len(t, c.w.in, cap(c.w.in), "the queue is full")

	other := Target{Key: "demo/other", Path: "clusters/other", Window: site.Window, PruneAlways: true}
	returned := make(chan struct{})
	results := make(chan SaveResult, 1)
	go func() {
		c.w.SetTarget(c.ctx, other)
		c.w.SetAuth(c.ctx, nil)
		c.w.RemoveTarget(c.ctx, site.Key)
		c.w.Save(c.ctx, SaveRequest{ID: "uid", Target: site.Key, Author: committer, Message: "m", Deadline: c.clock.Now(),
			Done: func(r SaveResult) { results <- r }})
		c.w.FindSave(c.ctx, "uid", func(string, error) {})
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("a control call waited for the busy worker")
	}
	close(gate)
	c.settle()
	r := <-results
	assert.Equal(t, SaveTargetGone, r.Outcome, "RemoveTarget was applied before the Save that followed it")
	c.change(other, "x", "x: 1")
	c.step(site.Window.Silence)
	assert.Equal(t, []string{"clusters/dev/demo/configmaps/x.yaml"}, c.remoteFiles(),
		"the new target works; the removed target's queued changes were dropped")
}

// TestAForeignDeleteIsRepaired (finding 1): three documents mirrored,
// somebody pushes a commit that deletes the target's folder, and a live
// edit of one object follows. The push of that edit is rejected; the first
// push after the replay already holds all three again, as the cluster does
// (the mirror invariant), not only the one whose edit found the commit.
func TestAForeignDeleteIsRepaired(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	for _, n := range []string{"a", "b", "c"} {
		c.change(site, n, n+": 1")
	}
	c.w.Synced(c.ctx, site.Key, document.Scope{GVR: cmGVR, Namespace: "demo"})
	c.step(site.Window.Silence)
	require.Len(t, c.remoteFiles(), 3)

	c.byHand(url, "remove the folder", func(work string) { c.git(work, "rm", "-r", "--quiet", "clusters/dev") })
	require.Empty(t, c.remoteFiles())

	c.change(site, "a", "a: 2")
	c.step(site.Window.Silence) // commit, push rejected, fetch, replay
	c.step(time.Millisecond)    // the next push: no window's time has come
	assert.ElementsMatch(t, []string{"clusters/dev/demo/configmaps/a.yaml", "clusters/dev/demo/configmaps/b.yaml",
		"clusters/dev/demo/configmaps/c.yaml"}, c.remoteFiles(), "Git equals the cluster again")
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
}

// startWithAlicesTwo starts tg, with authors, on a new repository whose
// documents a and b alice wrote and Git holds; it returns the worker, the
// target and the repository's URL.
func startWithAlicesTwo(t *testing.T, tg Target) (*clocked, Target, string) {
	url, bare := serveRepo(t)
	tg.Authors = &authors{waiting: map[string]bool{}}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.changeBy(tg, "a", "alice", "a: 1")
	c.changeBy(tg, "b", "alice", "b: 1")
	c.step(tg.Window.Silence)
	require.Len(t, c.remoteFiles(), 2)
	return c, tg, url
}

// TestAReassertLeavesAPersonsChangeToTheirWindow: the re-assertion after
// a foreign commit closes at once, but an object in a person's open window
// is left to that window, so the person stays its author.
func TestAReassertLeavesAPersonsChangeToTheirWindow(t *testing.T) {
	tg := site
	tg.Window = Window{Silence: 10 * time.Second, MaxAge: time.Hour}
	c, tg, url := startWithAlicesTwo(t, tg)

	c.byHand(url, "remove the folder", func(work string) { c.git(work, "rm", "-r", "--quiet", "clusters/dev") })

	c.changeBy(tg, "a", "alice", "a: 2")
	c.step(tg.Window.Silence / 2)
	c.changeBy(tg, "b", "bob", "b: 2") // bob's window is open when alice's push is refused
	c.step(tg.Window.Silence / 2)      // alice's commit, refused, replayed
	c.step(time.Millisecond)           // the re-assertion, pushed
	require.Equal(t, "b: 1", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"),
		"the first push holds the folder again, b as Git last had it from the cluster")
	c.step(tg.Window.Silence / 2) // bob's window
	assert.Equal(t, "b: 2", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"))
	assert.Equal(t, "bob", c.git(c.bare, "log", "-1", "--format=%an", "main", "--", "clusters/dev/demo/configmaps/b.yaml"))
}

// TestASaveGivesUpWhileItsCommitFails: a save whose window cannot be
// committed ends SaveFailed at its GiveUpAt, naming the error; the window
// stays and is committed, without the request's message, once the error
// clears.
func TestASaveGivesUpWhileItsCommitFails(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: 30 * time.Second, MaxAge: time.Hour}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.change(tg, "a", "a: 1")
	results := make(chan SaveResult, 1)
	c.w.Save(c.ctx, SaveRequest{ID: "uid-1", Target: tg.Key, Author: committer, Message: "Keep me", Collect: time.Second,
		Deadline: c.clock.Now().Add(5 * time.Second), GiveUpAt: c.clock.Now().Add(10 * time.Second),
		Done: func(r SaveResult) { results <- r }})
	c.settle()
	broken := errors.New("no space left on device")
	fail := true
	c.w.do(c.ctx, func() {
		c.w.commitErr = func() error {
			if fail {
				return broken
			}
			return nil
		}
	})
	for range 9 {
		c.step(time.Second)
	}
	select {
	case r := <-results:
		t.Fatalf("the save ended before its GiveUpAt: %+v", r)
	default:
	}
	c.step(time.Second)
	select {
	case r := <-results:
		assert.Equal(t, SaveFailed, r.Outcome)
		assert.Contains(t, r.Message, "no space left on device", "the message names what holds the save back")
	default:
		t.Fatal("the save did not give up at its GiveUpAt")
	}

	c.w.do(c.ctx, func() { fail = false })
	c.step(30 * time.Second)
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "the change is not lost")
	assert.NotContains(t, c.git(bare, "log", "-1", "--format=%B", "main"), RequestTrailer, "the request gave up: its message is not used")
}

// TestASaveGivesUpWhilePushesFail: a save committed but not pushed by its
// GiveUpAt ends SaveFailed, naming the commit and the error; the commit is
// pushed, once, when the server is back.
func TestASaveGivesUpWhilePushesFail(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: 30 * time.Second, MaxAge: time.Hour}
	c := startClocked(t, url, tg)
	c.bare = bare
	fault := filepath.Join(filepath.Dir(bare), gitserver.FaultFile)
	require.NoError(t, os.WriteFile(fault, []byte("500"), 0o644))
	c.change(tg, "a", "a: 1")
	results := make(chan SaveResult, 1)
	c.w.Save(c.ctx, SaveRequest{ID: "uid-2", Target: tg.Key, Author: committer, Message: "Push me", Collect: time.Second,
		Deadline: c.clock.Now().Add(5 * time.Second), GiveUpAt: c.clock.Now().Add(10 * time.Second),
		Done: func(r SaveResult) { results <- r }})
	c.settle()
	c.step(time.Second) // committed; the push fails
	require.GreaterOrEqual(t, c.rec.failureCount(), 1, "the push failed")
	c.step(9 * time.Second)
	select {
	case r := <-results:
		assert.Equal(t, SaveFailed, r.Outcome)
		assert.Contains(t, r.Message, "not pushed")
		assert.Contains(t, r.Message, "500", "the message names the push's error")
	default:
		t.Fatal("the save did not give up at its GiveUpAt")
	}

	require.NoError(t, os.Remove(fault))
	c.step(30 * time.Second) // past any backoff
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
	assert.Equal(t, "1", c.git(bare, "rev-list", "--count", "--grep", RequestTrailer+": uid-2", "main"),
		"the saved commit is pushed once, with its trailer")
	select {
	case r := <-results:
		t.Fatalf("a save that gave up ended a second time: %+v", r)
	default:
	}
}

// TestAReplayThatFailsGoesOn: a push refused by a foreign commit is replayed;
// when a replayed commit fails, the refused commits after it are not
// dropped: the next step goes on, and Git ends equal to the cluster with each
// change by its author.
func TestAReplayThatFailsGoesOn(t *testing.T) {
	c, tg, url := startWithAlicesTwo(t, site)

	c.byHand(url, "by hand", func(work string) {
		require.NoError(t, os.WriteFile(filepath.Join(work, "clusters/dev/demo/configmaps/b.yaml"), []byte("b: by hand\n"), 0o644))
	})

	calls := 0
	c.w.do(c.ctx, func() {
		c.w.commitErr = func() error {
			calls++
			if calls == 3 { // the first replayed commit
				return errors.New("disk full")
			}
			return nil
		}
	})
	c.changeBy(tg, "a", "alice", "a: 2")
	c.changeBy(tg, "c", "bob", "c: 1")
	c.step(tg.Window.Silence) // two commits, the push refused, the replay fails
	require.Equal(t, 3, calls, "two commits and the failed replay")
	c.step(30 * time.Second)  // the backoff: the replay goes on and is pushed
	c.step(tg.Window.Silence) // the re-asserted b
	assert.ElementsMatch(t, []string{"clusters/dev/demo/configmaps/a.yaml", "clusters/dev/demo/configmaps/b.yaml",
		"clusters/dev/demo/configmaps/c.yaml"}, c.remoteFiles())
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
	assert.Equal(t, "b: 1", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"), "the cluster's b is re-asserted")
	assert.Equal(t, "c: 1", c.remoteShow("clusters/dev/demo/configmaps/c.yaml"))
	authorsOf := func(p string) string {
		return c.git(c.bare, "log", "-1", "--format=%an", "main", "--", "clusters/dev/demo/configmaps/"+p)
	}
	assert.Equal(t, "alice", authorsOf("a.yaml"))
	assert.Equal(t, "bob", authorsOf("c.yaml"))
}

// TestPushesRepackTheLocalRepository (finding 4): after enough commits, a
// push repacks the local repository, so loose objects do not pile up.
func TestPushesRepackTheLocalRepository(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	c.w.do(c.ctx, func() { c.w.out.repackAfter = 3 })
	loose := func() int {
		n := 0
		_ = filepath.WalkDir(filepath.Join(c.local, "objects"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && len(filepath.Base(filepath.Dir(p))) == 2 {
				n++
			}
			return nil
		})
		return n
	}
	for i, v := range []string{"1", "2"} {
		c.change(site, "a", "a: "+v)
		c.step(site.Window.Silence)
		require.Equal(t, i+1, c.commitCount())
	}
	require.Positive(t, loose(), "two commits, not yet repacked")
	c.change(site, "a", "a: 3")
	c.step(site.Window.Silence)
	assert.Equal(t, 0, loose(), "the third push repacked")
	assert.Equal(t, "a: 3", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
	c.change(site, "b", "b: 1")
	c.step(site.Window.Silence)
	assert.Equal(t, "b: 1", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"), "the repacked repository works on")
}

// TestSetCommitterTakesEffect: a GitProvider's new spec.committer commits
// what follows, without restarting the worker.
func TestSetCommitterTakesEffect(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	c.w.SetCommitter(identity.Signature{Name: "Robot", Email: "robot@example.com"})
	c.change(site, "a", "a: 1")
	c.step(site.Window.Silence)
	assert.Equal(t, "Robot <robot@example.com>|Robot", c.git(bare, "log", "-1", "--format=%cn <%ce>|%an", "main"))
}

// TestSetSignerSignsWhatFollows: with a signer set, the worker's commits
// carry an SSH signature `git verify-commit` accepts for the committer.
func TestSetSignerSignsWhatFollows(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	key, _ := testkeys.SSH(t)
	signer, err := gitrepo.NewSSHSigner(key, nil)
	require.NoError(t, err)
	c.w.SetSigner(signer)
	c.change(site, "a", "a: 1")
	c.step(site.Window.Silence)
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	require.NoError(t, os.WriteFile(signers, []byte(committer.Email+" "+signer.PublicKey()+"\n"), 0o600))
	out := c.git(bare, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", "main")
	assert.Contains(t, out, `Good "git" signature for reverser@reverser.dev`)
	assert.Contains(t, c.git(bare, "cat-file", "-p", "main"), "-----BEGIN SSH SIGNATURE-----")
}

// heldBytes is how many of tg's documents the worker keeps the bytes of.
func (c *clocked) heldBytes(tg Target) int {
	n := make(chan int, 1)
	c.w.do(c.ctx, func() {
		held := 0
		for _, d := range c.w.targets[tg.Key].desired {
			if d.content != nil {
				held++
			}
		}
		n <- held
	})
	c.settle()
	return <-n
}

// TestCommittedDocumentsAreHeldAsHashes: once Git holds a document, the
// worker keeps its hash, not its bytes. A history rewritten by force
// still leaves the bytes it needs to write the cluster's documents back,
// and once they are pushed it holds none.
func TestCommittedDocumentsAreHeldAsHashes(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	c.w.do(c.ctx, func() { c.w.out.repackAfter = 1 })
	for _, n := range []string{"a", "b", "c"} {
		c.change(site, n, n+": 1")
	}
	c.w.Synced(c.ctx, site.Key, document.Scope{GVR: cmGVR, Namespace: "demo"})
	assert.Equal(t, 3, c.heldBytes(site), "not committed yet")
	c.step(site.Window.Silence)
	require.Len(t, c.remoteFiles(), 3)
	assert.Equal(t, 0, c.heldBytes(site), "committed: Git holds them")

	// Somebody replaces the branch's history: a is changed, b is gone.
	work := filepath.Join(t.TempDir(), "w")
	c.git(filepath.Dir(work), "clone", "--quiet", url, work)
	c.git(work, "checkout", "--quiet", "--orphan", "rewritten")
	c.git(work, "rm", "-r", "--quiet", "--cached", ".")
	require.NoError(t, os.WriteFile(filepath.Join(work, "clusters/dev/demo/configmaps/a.yaml"), []byte("a: tampered\n"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(work, "clusters/dev/demo/configmaps/b.yaml")))
	c.git(work, "add", "clusters")
	c.git(work, "commit", "--quiet", "-m", "start again")
	c.git(work, "push", "--quiet", "--force", "origin", "rewritten:main")

	c.change(site, "c", "c: 2")
	c.step(site.Window.Silence) // commit, push rejected, fetch, replay
	c.step(time.Millisecond)    // the re-asserted documents, pushed, then a repack
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "written back from the bytes kept")
	assert.Equal(t, "b: 1", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"))
	assert.Equal(t, "c: 2", c.remoteShow("clusters/dev/demo/configmaps/c.yaml"))
	assert.Equal(t, 0, c.heldBytes(site))
}

// TestASuspendCommitsWhatItHoldsThenLetsGo (#29): suspending a GitTarget
// commits its open window at once, however young, pushes it, and only then
// does the target leave; a resume before that cancels it.
func TestASuspendCommitsWhatItHoldsThenLetsGo(t *testing.T) {
	url, bare := serveRepo(t)
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: 2 * time.Hour}
	c := startClocked(t, url, tg)
	c.bare = bare
	c.change(tg, "a", "a: 1")
	assert.Equal(t, 0, c.commitCount(), "the window is an hour from closing")

	var ended []Suspension
	c.w.Suspend(c.ctx, tg.Key, func(s Suspension) { ended = append(ended, s) })
	c.settle()
	assert.Equal(t, 1, c.commitCount(), "the suspend closed the window")
	assert.Equal(t, []string{"clusters/dev/demo/configmaps/a.yaml"}, c.remoteFiles(), "and pushed it")
	assert.Equal(t, []Suspension{SuspensionDone}, ended)
	c.change(tg, "b", "b: 1")
	c.step(3 * time.Hour)
	assert.Equal(t, 1, c.commitCount(), "a suspended target takes nothing more")

	// Resumed while the push of what it committed is failing: the
	// suspension is cancelled, and that commit is pushed as any other.
	c.w.SetTarget(c.ctx, tg)
	c.change(tg, "b", "b: 1")
	require.NoError(t, os.Rename(bare, bare+".away"))
	ended = nil
	c.w.Suspend(c.ctx, tg.Key, func(s Suspension) { ended = append(ended, s) })
	c.settle()
	assert.Empty(t, ended, "not done while the commit is not pushed")
	c.w.SetTarget(c.ctx, tg)
	c.settle()
	assert.Equal(t, []Suspension{SuspensionCancelled}, ended)
	require.NoError(t, os.Rename(bare+".away", bare))
	c.step(time.Minute) // past the push backoff
	assert.Equal(t, 2, c.commitCount())
	assert.ElementsMatch(t, []string{"clusters/dev/demo/configmaps/a.yaml", "clusters/dev/demo/configmaps/b.yaml"}, c.remoteFiles())

	// Removed while its commit cannot be pushed: the suspension is dropped
	// with what it held.
	c.change(tg, "c", "c: 1")
	require.NoError(t, os.Rename(bare, bare+".away"))
	ended = nil
	c.w.Suspend(c.ctx, tg.Key, func(s Suspension) { ended = append(ended, s) })
	c.settle()
	assert.Empty(t, ended, "not done while the commit is not pushed")
	c.w.RemoveTarget(c.ctx, tg.Key)
	c.settle()
	assert.Equal(t, []Suspension{SuspensionDropped}, ended, "a target removed first drops it")
}

// TestAFencedPushIsHeldAndNotReported: while the push fence refuses (a
// replica that lost its Lease), nothing reaches the remote and no failure
// is reported (status is the leader's to write); the commit goes once the
// fence allows.
func TestAFencedPushIsHeldAndNotReported(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	var leading atomic.Bool
	c.w.do(c.ctx, func() {
		c.w.repo.SetFence(func(context.Context) error {
			if leading.Load() {
				return nil
			}
			return errors.New(`the leader election Lease is held by "b_2"`)
		})
	})
	fenced := func() float64 { return testutil.ToFloat64(metrics.Pushes.WithLabelValues("fenced")) }
	before := fenced()
	c.change(site, "a", "a: 1")
	c.step(site.Window.Silence)
	assert.Equal(t, 0, c.commitCount(), "a fenced push reached the remote")
	assert.Equal(t, 0, c.rec.failureCount(), "a replica that may not lead reported a failure")
	assert.Equal(t, before+1, fenced())

	leading.Store(true)
	c.step(time.Second) // past the first backoff
	assert.Equal(t, 1, c.commitCount())
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
}
