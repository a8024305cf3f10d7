package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
)

// The save tests run on the fake clock: collect delays and deadlines pass
// when a test steps the clock, and each outcome is read once the worker has
// taken its step.

type results chan SaveResult

// wait waits, with a deadline, for a save to end: for a test on the real
// clock.
func (r results) wait(t *testing.T) SaveResult {
	t.Helper()
	select {
	case res := <-r:
		return res
	case <-time.After(20 * time.Second):
		t.Fatal("the save did not end")
		return SaveResult{}
	}
}

// ended returns the outcome of a save that must have ended by now.
func (r results) ended(t *testing.T) SaveResult {
	t.Helper()
	select {
	case res := <-r:
		return res
	default:
		t.Fatal("the save has not ended")
		return SaveResult{}
	}
}

// open fails when the save has ended.
func (r results) open(t *testing.T) {
	t.Helper()
	select {
	case res := <-r:
		t.Fatalf("the save ended early: %+v", res)
	default:
	}
}

func saveTarget() Target {
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: time.Hour} // only saves close windows here
	tg.Authors = &authors{waiting: map[string]bool{}}
	return tg
}

func saveFixture(t *testing.T) (*clocked, Target) {
	url, bare := serveRepo(t)
	tg := saveTarget()
	c := startClocked(t, url, tg)
	c.bare = bare
	return c, tg
}

func edit(name, user, value string) document.Change {
	return document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(value + "\n"),
		Desc: "ConfigMap demo/" + name, Seen: time.Now(), ResourceVersion: user}
}

var alice = identity.Signature{Name: "alice", Email: "alice@example.com"}

const collect = 100 * time.Millisecond

// save asks for alice's save, collecting for 100ms, with a 2s deadline on
// the fake clock, and returns once the worker has taken it in.
func (c *clocked) save(tg Target, id string, mut func(*SaveRequest)) results {
	r := make(results, 1)
	req := SaveRequest{ID: id, Target: tg.Key, Author: alice, Message: "Tune the app", Collect: collect,
		Deadline: c.clock.Now().Add(2 * time.Second), Done: func(res SaveResult) { r <- res }}
	if mut != nil {
		mut(&req)
	}
	c.w.Save(c.ctx, req)
	c.settle()
	return r
}

func TestSaveCommitsTheAuthorsWindow(t *testing.T) {
	c, tg := saveFixture(t)
	c.changeBy(tg, "a", "alice", "a1")
	c.changeBy(tg, "b", "alice", "b1")
	c.changeBy(tg, "c", "bob", "c1") // bob's stays out
	r := c.save(tg, "uid-1", nil)
	c.step(collect - time.Millisecond)
	r.open(t)
	c.step(time.Millisecond)
	res := r.ended(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Equal(t, "main", res.Branch)
	assert.Equal(t, res.Commit, c.git(c.bare, "rev-parse", "main"), "the commit reported is on the remote")
	assert.Equal(t, "Tune the app\n\n- create ConfigMap demo/a\n- create ConfigMap demo/b\n\nReverser-Commit-Request: uid-1",
		c.git(c.bare, "log", "-1", "--format=%B", "main"))
	assert.Equal(t, "alice", c.git(c.bare, "log", "-1", "--format=%an", "main"))
	assert.NotContains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/c.yaml")

	sha, err := c.findSave("uid-1")
	require.NoError(t, err)
	assert.Equal(t, res.Commit, sha, "a restarted controller finds the save")
	sha, err = c.findSave("uid-unknown")
	require.NoError(t, err)
	assert.Equal(t, "", sha)
}

// findSave asks the worker for a save's commit and waits, with a deadline,
// for the answer, which comes on the worker's goroutine.
func (f *fixture) findSave(id string) (string, error) {
	f.t.Helper()
	type answer struct {
		sha string
		err error
	}
	found := make(chan answer, 1)
	f.w.FindSave(f.ctx, id, func(sha string, err error) { found <- answer{sha, err} })
	select {
	case a := <-found:
		return a.sha, a.err
	case <-time.After(20 * time.Second):
		f.t.Fatal("FindSave did not answer")
		return "", nil
	}
}

func TestSaveOutcomesWithoutChanges(t *testing.T) {
	c, tg := saveFixture(t)
	res := c.save(tg, "uid-none", nil).ended(t)
	assert.Equal(t, SaveNoWindow, res.Outcome, "nothing open, nothing pending")

	// With a settle time, an edit made just before the save may still be
	// on its way from the watch: the save waits that long for its window
	// (a save run right after kubectl patch ended NoWindow in e2e).
	settling := c.save(tg, "uid-settle", func(r *SaveRequest) { r.Settle = 50 * time.Millisecond })
	c.step(49 * time.Millisecond)
	settling.open(t)
	c.changeBy(tg, "late", "alice", "late1")
	c.step(collect)
	res = settling.ended(t)
	assert.Equal(t, SaveCommitted, res.Outcome, "the edit that came late joined the save: %s", res.Message)
	settled := c.save(tg, "uid-settled", func(r *SaveRequest) { r.Settle = 50 * time.Millisecond })
	c.step(50 * time.Millisecond)
	assert.Equal(t, SaveNoWindow, settled.ended(t).Outcome, "nothing came within the settle time")

	r := c.save(tg, "uid-next", func(r *SaveRequest) { r.Next = true; r.Deadline = c.clock.Now().Add(300 * time.Millisecond) })
	c.step(299 * time.Millisecond)
	r.open(t)
	c.step(time.Millisecond)
	assert.Equal(t, SaveNoWindow, r.ended(t).Outcome, "no next window within the deadline")

	// The same document again: a window, but nothing to commit.
	c.changeBy(tg, "a", "alice", "a1")
	r = c.save(tg, "uid-a", nil)
	c.step(collect)
	require.Equal(t, SaveCommitted, r.ended(t).Outcome)
	c.changeBy(tg, "a", "alice", "a1")
	r = c.save(tg, "uid-same", nil)
	c.step(collect)
	assert.Equal(t, SaveNothingToCommit, r.ended(t).Outcome)

	c.changeBy(tg, "a", "alice", "a1")
	r = c.save(tg, "uid-empty", func(r *SaveRequest) { r.Empty = true })
	c.step(collect)
	res = r.ended(t)
	require.Equal(t, SaveCommitted, res.Outcome)
	assert.Equal(t, "", c.git(c.bare, "diff", "--stat", "main~1", "main"), "an empty commit")
	assert.True(t, strings.HasPrefix(c.git(c.bare, "log", "-1", "--format=%B", "main"), "Tune the app"))
}

func TestSaveEmptyWithoutAWindow(t *testing.T) {
	c, tg := saveFixture(t)
	res := c.save(tg, "uid-empty", func(r *SaveRequest) { r.Empty = true }).ended(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Equal(t, res.Commit, c.git(c.bare, "rev-parse", "main"))
	assert.Empty(t, c.remoteFiles(), "an empty commit")
	assert.Equal(t, "alice|Tune the app", c.git(c.bare, "log", "-1", "--format=%an|%s", "main"))
}

func TestSaveNextAndInProgress(t *testing.T) {
	c, tg := saveFixture(t)
	next := c.save(tg, "uid-next", func(r *SaveRequest) { r.Next = true; r.Collect = 300 * time.Millisecond })
	second := c.save(tg, "uid-second", nil).ended(t)
	assert.Equal(t, SaveInProgress, second.Outcome, "one save per author and target at a time")
	c.step(time.Millisecond) // alice edits after asking
	c.changeBy(tg, "n", "alice", "n1")
	c.step(299 * time.Millisecond)
	next.open(t)
	c.step(time.Millisecond)
	res := next.ended(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Contains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/n.yaml")
}

// TestASaveHandedAgainIsAdopted: a request handed again while its first
// save waits (its front end restarted: a source cluster's watch) takes the
// first one over: one commit, reported to the new caller only, and never
// SaveInProgress against itself.
func TestASaveHandedAgainIsAdopted(t *testing.T) {
	c, tg := saveFixture(t)
	first := c.save(tg, "uid-again", func(r *SaveRequest) { r.Next = true })
	again := c.save(tg, "uid-again", func(r *SaveRequest) { r.Next = true })
	again.open(t)
	c.step(time.Millisecond)
	c.changeBy(tg, "x", "alice", "x1")
	c.step(collect)
	res := again.ended(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	first.open(t)
	assert.Equal(t, "1", c.git(c.bare, "rev-list", "--count", "main"), "one commit")
}

// TestFindSaveThenSaveUnderAFullQueue (finding 2): the CommitRequest
// controller calls Save from FindSave's callback, on the worker's own
// goroutine, while streams keep the change queue full. Save must not wait on
// that queue, and the stream must not starve the step that answers the save
// (it did, under -race, before drain took only what was queued).
func TestFindSaveThenSaveUnderAFullQueue(t *testing.T) {
	// On the real clock: this is about the queue, not about time.
	f := newFixture(t)
	tg := saveTarget()
	f.start(tg)
	stop := make(chan struct{})
	producing := make(chan struct{})
	go func() {
		defer close(producing)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f.w.Change(f.ctx, tg.Key, edit("busy", "bob", string(rune('a'+i%26))))
		}
	}()
	defer func() { close(stop); <-producing }()
	// The queue is full whenever the producer is ahead of the worker.
	r := make(results, 1)
	f.w.FindSave(f.ctx, "uid-resumed", func(sha string, err error) {
		f.w.Save(f.ctx, SaveRequest{ID: "uid-resumed", Target: tg.Key, Author: alice, Message: "resumed",
			Deadline: time.Now(), Done: func(res SaveResult) { r <- res }})
	})
	res := r.wait(t)
	assert.Equal(t, SaveNoWindow, res.Outcome, "alice has no window; what matters is that the save ended")
}

// TestASettledSaveClosesBeforeItsCollectDelay (P4): with Settle, a save
// whose window holds only attributed changes commits once Settle has passed,
// not after the whole collect delay; while a change waits for its author
// (which may be the saver's), it waits, at most the collect delay.
func TestASettledSaveClosesBeforeItsCollectDelay(t *testing.T) {
	const settle = 20 * time.Millisecond
	c, tg := saveFixture(t)
	c.changeBy(tg, "a", "alice", "a1")
	r := c.save(tg, "uid-settled", func(r *SaveRequest) { r.Settle = settle })
	c.step(settle - time.Millisecond)
	r.open(t)
	c.step(time.Millisecond)
	res := r.ended(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Contains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/a.yaml")

	// A change waiting for its author holds the save until it is
	// attributed (here to someone else).
	a := tg.Authors.(*authors)
	a.mu.Lock()
	a.waiting["alice-late"] = true
	a.mu.Unlock()
	c.changeBy(tg, "b", "alice", "b1")
	r = c.save(tg, "uid-waits", func(r *SaveRequest) { r.Settle = settle })
	c.changeBy(tg, "c", "alice-late", "c1")
	c.step(settle)
	r.open(t)
	a.mu.Lock()
	a.waiting["alice-late"] = false
	a.mu.Unlock()
	c.w.SetTarget(c.ctx, tg) // wakes the worker, as an arriving fact does
	c.settle()
	c.step(0)
	require.Equal(t, SaveCommitted, r.ended(t).Outcome)

	// One that stays unattributed holds it for the collect delay only.
	a.mu.Lock()
	a.waiting["nobody-yet"] = true
	a.mu.Unlock()
	c.changeBy(tg, "d", "alice", "d1")
	c.changeBy(tg, "e", "nobody-yet", "e1")
	r = c.save(tg, "uid-collect", func(r *SaveRequest) { r.Settle = settle })
	c.step(collect - time.Millisecond)
	r.open(t)
	c.step(time.Millisecond)
	require.Equal(t, SaveCommitted, r.ended(t).Outcome)
}

// TestASaveMessageKeepsNoFormatCharacters (#27, finding 8): a message
// whose right-to-left override would make it read otherwise in a review
// is committed without it; an emoji's zero-width joiner stays.
func TestASaveMessageKeepsNoFormatCharacters(t *testing.T) {
	msg := saveMessage(&SaveRequest{ID: "team/save", Message: "Fix \u202egnp.exe\u202c and \u200bthat 👩\u200d💻"}, nil)
	assert.Equal(t, "Fix gnp.exe and that 👩\u200d💻\n\n"+RequestTrailer+": team/save\n", msg)
}
