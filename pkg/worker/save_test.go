package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/watch"
)

type results chan SaveResult

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

func saveFixture(t *testing.T) (*fixture, Target) {
	f := newFixture(t)
	tg := site
	tg.Window = Window{Silence: time.Hour, MaxAge: time.Hour} // only saves close windows here
	tg.Authors = &authors{waiting: map[string]bool{}}
	f.start(tg)
	return f, tg
}

func edit(name, user, value string) watch.Change {
	return watch.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(value + "\n"),
		Desc: "ConfigMap demo/" + name, Seen: time.Now(), ResourceVersion: user}
}

var alice = gitrepo.Signature{Name: "alice", Email: "alice@example.com"}

func (f *fixture) save(tg Target, id string, mut func(*SaveRequest)) results {
	r := make(results, 1)
	req := SaveRequest{ID: id, Target: tg.Key, Author: alice, Message: "Tune the app", Collect: 100 * time.Millisecond,
		Deadline: time.Now().Add(2 * time.Second), Done: func(res SaveResult) { r <- res }}
	if mut != nil {
		mut(&req)
	}
	f.w.Save(f.ctx, req)
	return r
}

func TestSaveCommitsTheAuthorsWindow(t *testing.T) {
	f, tg := saveFixture(t)
	f.w.Change(f.ctx, tg.Key, edit("a", "alice", "a1"))
	f.w.Change(f.ctx, tg.Key, edit("b", "alice", "b1"))
	f.w.Change(f.ctx, tg.Key, edit("c", "bob", "c1")) // bob's stays out
	res := f.save(tg, "uid-1", nil).wait(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Equal(t, "main", res.Branch)
	assert.Equal(t, res.Commit, f.git(f.bare, "rev-parse", "main"), "the commit reported is on the remote")
	assert.Equal(t, "Tune the app\n\n- create ConfigMap demo/a\n- create ConfigMap demo/b\n\nReverser-Commit-Request: uid-1",
		f.git(f.bare, "log", "-1", "--format=%B", "main"))
	assert.Equal(t, "alice", f.git(f.bare, "log", "-1", "--format=%an", "main"))
	assert.NotContains(t, f.remoteFiles(), "clusters/dev/demo/configmaps/c.yaml")

	sha, err := f.findSave("uid-1")
	require.NoError(t, err)
	assert.Equal(t, res.Commit, sha, "a restarted controller finds the save")
	sha, err = f.findSave("uid-unknown")
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
	f, tg := saveFixture(t)
	res := f.save(tg, "uid-none", nil).wait(t)
	assert.Equal(t, SaveNoWindow, res.Outcome, "nothing open, nothing pending")

	res = f.save(tg, "uid-next", func(r *SaveRequest) { r.Next = true; r.Deadline = time.Now().Add(300 * time.Millisecond) }).wait(t)
	assert.Equal(t, SaveNoWindow, res.Outcome, "no next window within the deadline")

	// The same document again: a window, but nothing to commit.
	f.w.Change(f.ctx, tg.Key, edit("a", "alice", "a1"))
	first := f.save(tg, "uid-a", nil).wait(t)
	require.Equal(t, SaveCommitted, first.Outcome)
	f.w.Change(f.ctx, tg.Key, edit("a", "alice", "a1"))
	res = f.save(tg, "uid-same", nil).wait(t)
	assert.Equal(t, SaveNothingToCommit, res.Outcome)

	f.w.Change(f.ctx, tg.Key, edit("a", "alice", "a1"))
	res = f.save(tg, "uid-empty", func(r *SaveRequest) { r.Empty = true }).wait(t)
	require.Equal(t, SaveCommitted, res.Outcome)
	assert.Equal(t, "", f.git(f.bare, "diff", "--stat", "main~1", "main"), "an empty commit")
	assert.True(t, strings.HasPrefix(f.git(f.bare, "log", "-1", "--format=%B", "main"), "Tune the app"))
}

func TestSaveEmptyWithoutAWindow(t *testing.T) {
	f, tg := saveFixture(t)
	res := f.save(tg, "uid-empty", func(r *SaveRequest) { r.Empty = true }).wait(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Equal(t, res.Commit, f.git(f.bare, "rev-parse", "main"))
	assert.Empty(t, f.remoteFiles(), "an empty commit")
	assert.Equal(t, "alice|Tune the app", f.git(f.bare, "log", "-1", "--format=%an|%s", "main"))
}

func TestSaveNextAndInProgress(t *testing.T) {
	f, tg := saveFixture(t)
	next := f.save(tg, "uid-next", func(r *SaveRequest) { r.Next = true; r.Collect = 300 * time.Millisecond })
	second := f.save(tg, "uid-second", nil).wait(t)
	assert.Equal(t, SaveInProgress, second.Outcome, "one save per author and target at a time")
	f.w.Change(f.ctx, tg.Key, edit("n", "alice", "n1"))
	res := next.wait(t)
	require.Equal(t, SaveCommitted, res.Outcome, res.Message)
	assert.Contains(t, f.remoteFiles(), "clusters/dev/demo/configmaps/n.yaml")
}

// TestFindSaveThenSaveUnderAFullQueue (finding 2): the CommitRequest
// controller calls Save from FindSave's callback, on the worker's own
// goroutine, while streams keep the change queue full. Save must not wait on
// that queue, and the stream must not starve the step that answers the save
// (it did, under -race, before drain took only what was queued).
func TestFindSaveThenSaveUnderAFullQueue(t *testing.T) {
	f, tg := saveFixture(t)
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
