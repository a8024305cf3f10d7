package worker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// fakeApplier applies the remote branch as it is when a converge is sent,
// as Flux's source fetch does. Converges finish at the first Follow unless
// held.
type fakeApplier struct {
	f *fixture
	// mu guards what follows: the worker's goroutine and the test read it.
	mu   sync.Mutex
	ops  []*fakeOp
	hold bool
	// applies overrides, once each, the revision a converge reports.
	applies []string
	// failure, when set, fails every converge with it.
	failure string
}

type fakeOp struct {
	a                *fakeApplier
	rev              string
	resumed, applied bool
}

func (a *fakeApplier) Send(context.Context, string) (Operation, error) {
	out, err := exec.Command("git", "-C", a.f.bare, "rev-parse", "main").Output()
	if err != nil {
		return nil, fmt.Errorf("no branch to apply: %w", err)
	}
	op := &fakeOp{a: a, rev: strings.TrimSpace(string(out))}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.applies) > 0 {
		op.rev, a.applies = a.applies[0], a.applies[1:]
	}
	a.ops = append(a.ops, op)
	return op, nil
}

func (o *fakeOp) Follow(_ context.Context, resume func() bool) (ApplyProgress, error) {
	o.a.mu.Lock()
	defer o.a.mu.Unlock()
	if o.a.hold {
		return ApplyProgress{}, nil
	}
	if !o.resumed {
		o.resumed = true
		if !resume() {
			return ApplyProgress{Done: true, Abandoned: true}, nil
		}
	}
	if o.a.failure != "" {
		return ApplyProgress{Done: true, Failure: o.a.failure}, nil
	}
	o.applied = true
	return ApplyProgress{Done: true, Revision: o.rev}, nil
}

func (a *fakeApplier) setFailure(failure string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failure = failure
}

func (a *fakeApplier) setHold(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hold = hold
}

// sent is how many converges were sent; applied how many applied.
func (a *fakeApplier) sent() (sent, applied int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, op := range a.ops {
		if op.applied {
			applied++
		}
	}
	return len(a.ops), applied
}

func (a *fakeApplier) lastRev() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ops[len(a.ops)-1].rev
}

type reports struct {
	mu   sync.Mutex
	list []ApplyReport
}

func (r *reports) add(rep ApplyReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rep)
}

func (r *reports) reasons() (started, finished []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.list {
		if rep.Finished.IsZero() {
			started = append(started, rep.Reason)
		} else {
			finished = append(finished, rep.Reason)
		}
	}
	return started, finished
}

var (
	flux      = identity.Signature{Name: "flux", Email: "flux@example.com"}
	demoScope = document.Scope{GVR: cmGVR, Namespace: "demo"}
)

// claimed starts a worker whose one target is claimed by a fake applier,
// authors by the changes' ResourceVersion field, and delivers its initial
// state when the test says, on a branch with one commit.
func claimed(t *testing.T, catchUpAfter time.Duration) (*clocked, Target, *fakeApplier, *reports) {
	return claimedOn(t, catchUpAfter, map[string]string{"README.md": "apps\n"})
}

// claimedOn is claimed on a branch whose one commit holds files.
func claimedOn(t *testing.T, catchUpAfter time.Duration, files map[string]string) (*clocked, Target, *fakeApplier, *reports) {
	return applied(t, catchUpAfter, files, true)
}

// applied is claimedOn for a target whose GitTarget names the claim,
// which is held or not yet: tg.Claim is the claim either way, and the
// worker is handed it when held.
func applied(t *testing.T, catchUpAfter time.Duration, files map[string]string, held bool) (*clocked, Target, *fakeApplier, *reports) {
	url, bare := serveRepo(t)
	(&fixture{t: t, url: url, bare: bare}).seedRemote(files, "seed")
	a := &fakeApplier{}
	reps := &reports{}
	tg := site
	tg.Window = Window{Silence: 5 * time.Second, MaxAge: time.Minute}
	tg.Authors = &authors{waiting: map[string]bool{}}
	tg.Scopes = []document.Scope{demoScope}
	tg.Claim = &Claim{Key: "demo/apps", Applier: a, CatchUpAfter: catchUpAfter, Writers: []identity.Signature{flux}, Manager: "flux-manager",
		Grace: 10 * time.Second, Poll: 30 * time.Second, Report: reps.add}
	tg.Applied, tg.AppliedBy, tg.Kinds = true, "flux-manager", map[schema.GroupVersionResource]string{cmGVR: "ConfigMap"}
	started := tg
	if !held {
		started.Claim = nil
	}
	c := startClocked(t, url, started)
	c.bare = bare
	a.f = c.fixture
	return c, tg, a, reps
}

func TestTheStartupConvergeWaitsForTheInitialStateAndFlushesFirst(t *testing.T) {
	c, tg, a, reps := claimed(t, 0)
	c.changeBy(tg, "a", "alice", "a: 1")
	c.step(time.Second)
	sent, _ := a.sent()
	require.Zero(t, sent, "no converge before every stream delivered its initial state")

	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	sent, applied := a.sent()
	require.Equal(t, 1, sent, "the Startup converge goes once the state is complete")
	assert.Equal(t, 1, applied)
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"),
		"alice's open window was committed and pushed before the converge, 4s before its silence")
	assert.Equal(t, c.git(c.bare, "rev-parse", "main"), a.lastRev(), "the applier applied the tip that holds the edit")
	started, finished := reps.reasons()
	assert.Equal(t, []string{ReasonStartup}, started)
	assert.Equal(t, []string{ReasonStartup}, finished)

	c.step(time.Hour)
	sent, _ = a.sent()
	assert.Equal(t, 1, sent, "an applier at the tip costs nothing")
}

func TestCatchUpAfterCostsOneApplyForABurstOfCommits(t *testing.T) {
	c, tg, a, reps := claimed(t, time.Minute)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	for i := range 10 {
		c.changeBy(tg, "a", "alice", "a: "+string(rune('0'+i)))
		c.step(5 * time.Second) // each closes its window: ten commits
	}
	require.Equal(t, 11, c.commitCount(), "ten commits on the seed commit")
	sent, _ := a.sent()
	require.Equal(t, 1, sent, "only the Startup converge within the first minute behind")
	c.step(15*time.Second - time.Millisecond)
	sent, _ = a.sent()
	require.Equal(t, 1, sent, "behind since the first push, 59.999s ago")
	c.step(time.Millisecond)
	sent, applied := a.sent()
	require.Equal(t, 2, sent, "one CatchUp for the whole burst")
	assert.Equal(t, 2, applied)
	assert.Equal(t, c.git(c.bare, "rev-parse", "main"), a.lastRev())
	_, finished := reps.reasons()
	assert.Equal(t, []string{ReasonStartup, ReasonCatchUp}, finished)
	c.step(10 * time.Minute)
	sent, _ = a.sent()
	assert.Equal(t, 2, sent, "at the tip, the interval asks nothing")
}

func TestAnIntervalConvergeYieldsToALiveEditMirroredAfterItsSend(t *testing.T) {
	c, tg, a, reps := claimed(t, time.Minute)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.changeBy(tg, "a", "alice", "a: 1")
	c.step(5 * time.Second)
	a.setHold(true)
	c.step(time.Minute) // the CatchUp is sent and held
	sent, _ := a.sent()
	require.Equal(t, 2, sent)
	c.changeBy(tg, "b", "bob", "b: 1") // a live edit after the send
	a.setHold(false)
	c.step(time.Second)
	sent, applied := a.sent()
	assert.Equal(t, 2, sent)
	assert.Equal(t, 1, applied, "the CatchUp gave way before it applied")
	c.step(5 * time.Second) // bob's window commits
	c.step(time.Minute - 6*time.Second)
	sent, _ = a.sent()
	assert.Equal(t, 2, sent, "a fresh interval from the yield")
	c.step(time.Second)
	sent, applied = a.sent()
	assert.Equal(t, 3, sent)
	assert.Equal(t, 2, applied)
	assert.Equal(t, c.git(c.bare, "rev-parse", "main"), a.lastRev(), "the tip with bob's edit")
	reps.mu.Lock()
	defer reps.mu.Unlock()
	assert.Contains(t, reps.list[3].Note, "yielded to a live edit")
	assert.Empty(t, reps.list[3].Failure, "a yield is no failure of the applier")
}

func TestAForeignCommitIsAppliedNotReasserted(t *testing.T) {
	c, tg, a, reps := claimed(t, 0)
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	foreign := c.seedRemote(map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 2\n",
		"clusters/dev/demo/configmaps/new.yaml": "new: 1\n"}, "by hand")
	c.step(30 * time.Second) // the poll finds it
	sent, _ := a.sent()
	require.Equal(t, 2, sent)
	assert.Equal(t, foreign, a.lastRev(), "the foreign commit is applied")
	_, finished := reps.reasons()
	assert.Equal(t, []string{ReasonStartup, ReasonForeignCommit}, finished)
	c.step(time.Minute)
	assert.Equal(t, foreign, c.git(c.bare, "rev-parse", "main"), "neither re-asserted nor swept: the applier puts it on the cluster")

	// Its echoes, equal to Git, write nothing.
	c.changeBy(tg, "a", "flux", "a: 2")
	c.changeBy(tg, "new", "flux", "new: 1")
	c.step(time.Minute)
	assert.Equal(t, foreign, c.git(c.bare, "rev-parse", "main"))
}

func TestARevertByTheApplierIsKeptOutOfGitAndRepaired(t *testing.T) {
	c, tg, a, reps := claimed(t, 0)
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	first := c.git(c.bare, "rev-parse", "main")

	foreign := c.seedRemote(map[string]string{"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"}, "by hand")
	a.setHold(true)
	c.step(30 * time.Second)             // ForeignCommit sent, held
	c.changeBy(tg, "a", "alice", "a: 2") // alice edits during the apply
	c.changeBy(tg, "a", "flux", "a: 1")  // and the apply reverts her
	c.changeBy(tg, "b", "flux", "b: 1")  // an echo of Git
	a.setHold(false)
	c.step(time.Second)
	sent, applied := a.sent()
	require.Equal(t, 3, sent, "Startup, ForeignCommit, and the Repair")
	assert.Equal(t, 3, applied)
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "Git keeps alice's edit, flushed before the Repair")
	assert.Equal(t, c.git(c.bare, "rev-parse", "main"), a.lastRev(), "the Repair applies it")
	_, finished := reps.reasons()
	assert.Equal(t, []string{ReasonStartup, ReasonForeignCommit, ReasonRepair}, finished)
	assert.Equal(t, []string{"alice|Reverser: create ConfigMap demo/a", "Foreign|by hand", "alice|Reverser: update ConfigMap demo/a"},
		c.log()[1:], "flux's writes became no commit")
	c.git(c.bare, "merge-base", "--is-ancestor", first, "main")
	c.git(c.bare, "merge-base", "--is-ancestor", foreign, "main")

	// The Repair's echo, equal to Git, is no collision; a write after the
	// window is mirrored as anybody's.
	c.changeBy(tg, "a", "flux", "a: 2")
	c.step(time.Minute)
	sent, _ = a.sent()
	assert.Equal(t, 3, sent)
}

func TestAnApplyOfAnOlderCommitIsAskedAgain(t *testing.T) {
	c, tg, a, reps := claimed(t, 0)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	seed := c.git(c.bare, "rev-parse", "main")
	c.changeBy(tg, "a", "alice", "a: 1")
	c.step(5 * time.Second)
	a.mu.Lock()
	a.applies = []string{seed} // the applier's source had not fetched yet
	a.mu.Unlock()
	var mu sync.Mutex
	var results []ApplyResult
	c.w.Save(c.ctx, SaveRequest{ID: "r1", Target: tg.Key, Author: identity.Signature{Name: "alice", Email: "alice@example.com"},
		Message: "Save", Empty: true, Deadline: c.clock.Now().Add(time.Minute), Done: func(SaveResult) {}, CatchUp: true,
		Applied: func(r ApplyResult) { mu.Lock(); results = append(results, r); mu.Unlock() }})
	c.settle()
	c.step(time.Second) // the fell-short converge's backoff
	c.step(time.Second)
	sent, _ := a.sent()
	require.Equal(t, 3, sent, "Startup, the save's CatchUp that fell short, and the one asked again")
	head := c.git(c.bare, "rev-parse", "main")
	assert.Equal(t, head, a.lastRev())
	mu.Lock()
	defer mu.Unlock()
	var seen []string
	for _, r := range results {
		seen = append(seen, r.Reason)
	}
	assert.Equal(t, []string{"Applying", "Retrying", "Applied"}, seen, "the save never hears Applied for the older commit")
	assert.Equal(t, "main@sha1:"+head, results[len(results)-1].Revision)
	assert.True(t, results[len(results)-1].Settled)
	_, finished := reps.reasons()
	assert.Equal(t, []string{ReasonStartup, ReasonCatchUp, ReasonCatchUp}, finished)
}

func TestASaveOnATargetWithoutAClaimHasNothingToApply(t *testing.T) {
	url, bare := serveRepo(t)
	c := startClocked(t, url, site)
	c.bare = bare
	var got ApplyResult
	done := make(chan struct{})
	c.w.Save(c.ctx, SaveRequest{ID: "r1", Target: site.Key, Author: committer, Message: "Empty", Empty: true,
		Deadline: c.clock.Now().Add(time.Minute), Done: func(SaveResult) {}, CatchUp: true,
		Applied: func(r ApplyResult) { got = r; close(done) }})
	c.settle()
	c.settle()
	<-done
	assert.Equal(t, "NoApplierClaim", got.Reason)
	assert.True(t, got.Settled)
}

func TestADroppedClaimSettlesItsWaitingSaves(t *testing.T) {
	c, tg, a, _ := claimed(t, time.Hour)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	var mu sync.Mutex
	var last ApplyResult
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Save(c.ctx, SaveRequest{ID: "r1", Target: tg.Key, Author: identity.Signature{Name: "alice", Email: "alice@example.com"},
		Message: "Save", Deadline: c.clock.Now().Add(time.Minute), Done: func(SaveResult) {},
		Applied: func(r ApplyResult) { mu.Lock(); last = r; mu.Unlock() }})
	c.settle()
	c.settle()
	mu.Lock()
	assert.Equal(t, "Applying", last.Reason, "waiting for the claim's catch-up")
	mu.Unlock()
	sent, _ := a.sent()
	assert.Equal(t, 1, sent, "AsDefinedOnClaim asks no converge of its own")
	tg.Claim = nil
	c.w.SetTarget(c.ctx, tg)
	c.settle()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "ApplierGone", last.Reason)
	assert.True(t, last.Settled)
}

// TestWithoutAnAuditFactTheFieldManagerTellsTheApplier (E4): a write no
// audit fact names is the applier's when the object's newest managedFields
// entry is its manager's; one by another manager is a person's edit.
func TestWithoutAnAuditFactTheFieldManagerTellsTheApplier(t *testing.T) {
	c, tg, a, _ := claimed(t, 0)
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.seedRemote(map[string]string{"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"}, "by hand")
	a.setHold(true)
	c.step(30 * time.Second) // ForeignCommit sent, held
	unknown := "unknown (attribution unresolved)"
	send := func(name, value, manager string) {
		c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(value + "\n"),
			Desc: "ConfigMap demo/" + name, Seen: c.clock.Now(), ResourceVersion: unknown, Manager: manager})
		c.settle()
	}
	send("b", "b: 1", "flux-manager") // an echo of Git
	send("c", "c: 1", "kubectl-edit") // somebody's edit, during the apply
	a.setHold(false)
	c.step(time.Second)
	c.step(5 * time.Second)
	assert.Equal(t, "c: 1", c.remoteShow("clusters/dev/demo/configmaps/c.yaml"), "the edit is mirrored")
	sent, _ := a.sent()
	assert.Equal(t, 2, sent, "no collision, no Repair")
	assert.NotContains(t, c.log(), unknown+"|Reverser: update ConfigMap demo/b", "the echo became no commit")
}

// TestTheApplyWindowWaitsForItsBarrier (E4): after its grace, the window
// stays open until the streams answer the barrier and every change they
// sent before it has its author; an applier write judged then is still an
// echo; once the barrier is met, the applier's writes are mirrored as
// anybody's.
func TestTheApplyWindowWaitsForItsBarrier(t *testing.T) {
	c, tg, a, _ := claimed(t, 0)
	var mu sync.Mutex
	var tokens []string
	c.w.SetTarget(c.ctx, withBarrier(tg, func(token string) { mu.Lock(); tokens = append(tokens, token); mu.Unlock() }))
	c.settle()
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle() // Startup sent and done: its barrier is taken
	mu.Lock()
	require.Len(t, tokens, 1)
	token := tokens[0]
	mu.Unlock()
	c.step(time.Minute) // the grace is over, the barrier is not answered
	tg.Authors.(*authors).wait("flux")
	c.changeBy(tg, "a", "flux", "a: 0") // sent before the answer, its fact late
	c.w.BarrierMet(c.ctx, tg.Key, token, nil)
	c.settle()
	tg.Authors.(*authors).arrive("flux")
	c.step(time.Second)
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "judged an echo: the window was still open")
	sent, _ := a.sent()
	assert.Equal(t, 2, sent, "its revert asked a Repair")

	c.step(time.Minute) // the Repair's window: grace over, barrier answered at once
	mu.Lock()
	token = tokens[len(tokens)-1]
	mu.Unlock()
	c.w.BarrierMet(c.ctx, tg.Key, token, nil)
	c.settle()
	c.changeBy(tg, "a", "flux", "a: 2")
	c.step(5 * time.Second)
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "after the window, a write is anybody's")
}

func withBarrier(tg Target, barrier func(string)) Target {
	cl := *tg.Claim
	cl.Barrier = barrier
	tg.Claim = &cl
	return tg
}

// wait holds user's facts back until arrive.
func (a *authors) wait(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting[user] = true
}

func (a *authors) arrive(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waiting, user)
}

// TestAfterARestartTheApplierWritesInTheSnapshotDoNotOverwriteGit (E4,
// restart): an object the applier wrote last while nobody watched (it
// applied an older revision over a saved edit) keeps Git's document, and
// the Startup converge puts it back; an object a person wrote last is
// mirrored as always.
func TestAfterARestartTheApplierWritesInTheSnapshotDoNotOverwriteGit(t *testing.T) {
	c, tg, a, _ := claimedOn(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: edited\n",
		"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"})
	snapshot := func(name, value, manager string) {
		c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(value + "\n"),
			Desc: "ConfigMap demo/" + name, Seen: c.clock.Now(), ResourceVersion: "snapshot", Manager: manager, Snapshot: true})
	}
	snapshot("a", "a: old", "flux-manager") // Flux reverted the edit while the controller was down
	snapshot("b", "b: 2", "kubectl-edit")   // somebody edited while it was down
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.step(5 * time.Second)
	assert.Equal(t, "a: edited", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "Git keeps the edit, swept neither")
	assert.Equal(t, "b: 2", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"))
	sent, applied := a.sent()
	assert.Equal(t, 1, sent, "one converge puts Git back")
	assert.Equal(t, 1, applied)
	assert.Equal(t, c.git(c.bare, "rev-parse", "main"), a.lastRev(), "the head with both")
}

// TestAConvergeHeldBackSetsNoBusyTimer: a converge waiting for something
// that arrives as an event (here a stream's initial state) or a push
// failing for a while leave the worker asleep, not waking at once for ever.
func TestAConvergeHeldBackSetsNoBusyTimer(t *testing.T) {
	c, tg, _, _ := claimed(t, time.Minute)
	wake := func() time.Duration {
		got := make(chan time.Duration, 1)
		c.w.do(c.ctx, func() { got <- c.w.nextWake() })
		return <-got
	}
	c.step(time.Hour)
	assert.Greater(t, wake(), time.Duration(0), "the Startup waits for the initial state without a timer")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.changeBy(tg, "a", "alice", "a: 1")
	c.git(c.bare, "config", "http.receivepack", "false") // pushes fail from now on
	c.step(5 * time.Second)
	c.step(time.Hour)
	assert.Greater(t, wake(), time.Duration(0), "nothing pushed, the poll waits its interval")
}

// TestASaveWhoseCommitTheBranchLostIsCommitDropped (E3): a save waiting for
// its apply whose commit a force-push took off the branch ends Applied=False
// CommitDropped, the only False.
func TestASaveWhoseCommitTheBranchLostIsCommitDropped(t *testing.T) {
	c, tg, _, _ := claimed(t, time.Hour)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	seed := c.git(c.bare, "rev-parse", "main")
	var mu sync.Mutex
	var last ApplyResult
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Save(c.ctx, SaveRequest{ID: "r1", Target: tg.Key, Author: identity.Signature{Name: "alice", Email: "alice@example.com"},
		Message: "Save", Deadline: c.clock.Now().Add(time.Minute), Done: func(SaveResult) {},
		Applied: func(r ApplyResult) { mu.Lock(); last = r; mu.Unlock() }})
	c.settle()
	c.settle()
	require.NotEqual(t, seed, c.git(c.bare, "rev-parse", "main"), "the save is pushed")
	c.git(c.bare, "update-ref", "refs/heads/main", seed) // somebody rewrote the branch
	c.step(30 * time.Second)                             // the poll finds it
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "CommitDropped", last.Reason, last.Message)
	assert.True(t, last.Settled)
}

// TestABarrierThatIsNeverAnsweredLapses (E4): the window waits for its
// barrier two minutes at most; then it is counted timed out and the next
// converge may go. A barrier the streams could not take fails at once.
func TestABarrierThatIsNeverAnsweredLapses(t *testing.T) {
	c, tg, a, _ := claimed(t, 0)
	var mu sync.Mutex
	var tokens []string
	c.w.SetTarget(c.ctx, withBarrier(tg, func(token string) { mu.Lock(); tokens = append(tokens, token); mu.Unlock() }))
	c.changeBy(tg, "a", "alice", "a: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle() // Startup sent and done; its barrier never answered
	c.seedRemote(map[string]string{"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"}, "by hand")
	timedOut := testutil.ToFloat64(metrics.ApplyWindowBarriers.WithLabelValues("timed_out"))
	c.step(BarrierTimeout - time.Second)
	sent, _ := a.sent()
	assert.Equal(t, 1, sent, "the ForeignCommit waits for the barrier")
	c.step(time.Second)
	c.step(30 * time.Second) // the poll
	sent, _ = a.sent()
	assert.Equal(t, 2, sent, "the lapsed barrier lets it go")
	assert.Equal(t, timedOut+1, testutil.ToFloat64(metrics.ApplyWindowBarriers.WithLabelValues("timed_out")))

	failed := testutil.ToFloat64(metrics.ApplyWindowBarriers.WithLabelValues("failed"))
	mu.Lock()
	token := tokens[len(tokens)-1]
	mu.Unlock()
	c.w.BarrierMet(c.ctx, tg.Key, token, errors.New("listing configmaps: forbidden"))
	c.settle()
	assert.Equal(t, failed+1, testutil.ToFloat64(metrics.ApplyWindowBarriers.WithLabelValues("failed")))
}

// TestAFolderTheApplierHasNotAppliedIsAdoptedNotDeleted (R3): Git holds
// documents the applier never applied, and the cluster lacks them when
// the target starts. Nothing is deleted from Git: the Startup converge
// applies them, and the object only the cluster has is mirrored.
func TestAFolderTheApplierHasNotAppliedIsAdoptedNotDeleted(t *testing.T) {
	c, tg, a, _ := claimedOn(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 1\n",
		"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"})
	seed := c.git(c.bare, "rev-parse", "main")
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/c.yaml", Content: []byte("c: 1\n"),
		Desc: "ConfigMap demo/c", Seen: c.clock.Now(), ResourceVersion: "snapshot", Snapshot: true})
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	sent, applied := a.sent()
	require.Equal(t, 1, sent, "the Startup converge")
	assert.Equal(t, 1, applied)
	c.changeBy(tg, "a", "flux", "a: 1") // the apply's echoes
	c.changeBy(tg, "b", "flux", "b: 1")
	c.step(time.Minute)
	assert.Equal(t, "a: 1", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "never deleted")
	assert.Equal(t, "b: 1", c.remoteShow("clusters/dev/demo/configmaps/b.yaml"), "never deleted")
	assert.Equal(t, "c: 1", c.remoteShow("clusters/dev/demo/configmaps/c.yaml"))
	assert.Equal(t, []string{"Foreign|seed", "snapshot|Reverser: create ConfigMap demo/c"}, c.log(), "no commit deletes anything")
	c.git(c.bare, "merge-base", "--is-ancestor", seed, "main")

	// A delete somebody makes is written as always.
	c.changeBy(tg, "b", "alice", "")
	c.step(time.Minute)
	assert.NotContains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/b.yaml")
}

// TestAFolderWhoseClaimIsNotHeldYetIsNeitherSweptNorReady (R3): a
// GitTarget applied with its claim starts before the claim is held. Git's
// documents the cluster lacks stay, the target says which and why until
// the claim's Startup converge applied them, then nothing.
func TestAFolderWhoseClaimIsNotHeldYetIsNeitherSweptNorReady(t *testing.T) {
	c, tg, a, _ := applied(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 1\n",
		"clusters/dev/demo/configmaps/b.yaml": "b: 1\n"}, false)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.step(time.Minute)
	assert.Equal(t, []string{"Foreign|seed"}, c.log(), "nothing deleted while the claim is not held")
	assert.Equal(t, "Git holds 2 object(s) the cluster lacks: demo/configmaps/a.yaml, demo/configmaps/b.yaml; "+
		"nothing applies the branch yet: the applier claim the GitTarget names is not held (see the claim's status)", c.rec.lastUnapplied())

	c.w.SetTarget(c.ctx, tg) // the claim is held
	c.settle()
	sent, applied := a.sent()
	require.Equal(t, 1, sent, "the Startup converge")
	require.Equal(t, 1, applied)
	c.changeBy(tg, "a", "flux", "a: 1") // the apply's echoes
	c.step(time.Minute)
	assert.Equal(t, "Git holds 1 object(s) the cluster lacks: demo/configmaps/b.yaml; the applier applied "+
		a.lastRev()[:7]+" without them: see the applier's own status (a path it does not read, a failing apply, an object it prunes)",
		c.rec.lastUnapplied(), "judged once the apply window closed")
	c.changeBy(tg, "b", "flux", "b: 1")
	c.step(time.Minute)
	assert.Empty(t, c.rec.lastUnapplied(), "Git equals the cluster")
	assert.Equal(t, []string{"Foreign|seed"}, c.log(), "the echoes of Git write nothing")
}

// TestAFailedConvergeIsNamedWhileTheClusterLacksObjects (R3): the
// applier cannot apply the branch (Flux's "kustomization path not
// found"): the objects stay in Git, and the target names the failure.
func TestAFailedConvergeIsNamedWhileTheClusterLacksObjects(t *testing.T) {
	c, tg, a, _ := claimedOn(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 1\n"})
	a.setFailure("kustomization path not found")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.step(time.Minute)
	assert.Equal(t, "Git holds 1 object(s) the cluster lacks: demo/configmaps/a.yaml; "+
		"the applier's last converge failed: kustomization path not found", c.rec.lastUnapplied())
	assert.Equal(t, []string{"Foreign|seed"}, c.log())

	a.setFailure("")
	c.step(5 * time.Minute) // the backoff's retry applies
	c.changeBy(tg, "a", "flux", "a: 1")
	c.step(time.Minute)
	assert.Empty(t, c.rec.lastUnapplied())
}

// TestObjectsOfAFolderWithoutNamespacesAreMatchedInTheTargetNamespace
// (R1, R3): documents of a file people wrote, without namespace:, are the
// objects of the folder's namespace; only those the target mirrors and
// the cluster lacks are named.
func TestObjectsOfAFolderWithoutNamespacesAreMatchedInTheTargetNamespace(t *testing.T) {
	c, tg, _, _ := applied(t, 0, map[string]string{"clusters/dev/app.yaml": `# the app
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
`}, false)
	tg.Namespace, tg.Claim = "demo", nil
	c.w.SetTarget(c.ctx, tg)
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/a.yaml", Content: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\n"),
		Desc: "ConfigMap demo/a", GVR: cmGVR, Kind: "ConfigMap", Namespace: "demo", Name: "a", Seen: c.clock.Now(), ResourceVersion: "snapshot", Snapshot: true})
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.step(time.Minute)
	assert.Contains(t, c.rec.lastUnapplied(), "Git holds 1 object(s) the cluster lacks: ConfigMap/b;",
		"a is on the cluster; the Deployment is not mirrored")
	assert.NotContains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/a.yaml", "a keeps its document in app.yaml")
}

// TestAKustomizedFolderIsJudgedByItsRender (R3): the objects of a
// kustomized folder are those its render names (namePrefix applied).
func TestAKustomizedFolderIsJudgedByItsRender(t *testing.T) {
	c, tg, _, _ := applied(t, 0, map[string]string{
		"clusters/dev/kustomization.yaml": "namePrefix: dev-\nresources: [app.yaml]\n",
		"clusters/dev/app.yaml":           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
	}, false)
	tg.Namespace, tg.Claim = "demo", nil
	c.w.SetTarget(c.ctx, tg)
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/dev-a.yaml", Content: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dev-a, namespace: demo}\n"),
		Desc: "ConfigMap demo/dev-a", GVR: cmGVR, Kind: "ConfigMap", Namespace: "demo", Name: "dev-a", Seen: c.clock.Now(), ResourceVersion: "snapshot", Snapshot: true})
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.step(time.Minute)
	assert.Contains(t, c.rec.lastUnapplied(), "Git holds 1 object(s) the cluster lacks: ConfigMap/dev-b;")
}

// initial sends an object of the stream's initial state that manager wrote
// last.
func (c *clocked) initial(tg Target, name, manager, value string) {
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/" + name + ".yaml", Content: []byte(value + "\n"),
		Desc: "ConfigMap demo/" + name, Seen: c.clock.Now(), ResourceVersion: "snapshot", Snapshot: true, Manager: manager})
}

// TestWhatTheApplierLeftIsNotMirroredBeforeItApplies (R3): the cluster
// holds what the applier applied of an older revision (a: 1, and "gone",
// which Git no longer holds) when a GitTarget and its claim start
// together. Nothing of it is written over Git: it waits for the Startup
// converge, whose echoes say what the cluster holds then; an object the
// applier left in place ("kept": it does not prune it) is mirrored after.
// A person's edit in the initial state is mirrored at once.
func TestWhatTheApplierLeftIsNotMirroredBeforeItApplies(t *testing.T) {
	c, tg, a, _ := applied(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 2\n"}, false)
	c.initial(tg, "a", "flux-manager", "a: 1")
	c.initial(tg, "gone", "flux-manager", "gone: 1")
	c.initial(tg, "kept", "flux-manager", "kept: 1")
	c.initial(tg, "mine", "kubectl-edit", "mine: 1")
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	c.step(time.Minute)
	assert.Equal(t, []string{"Foreign|seed", "snapshot|Reverser: create ConfigMap demo/mine"}, c.log(),
		"only the person's edit, while the claim is not held")
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"))
	assert.Empty(t, c.rec.lastUnapplied(), "a held back is on the cluster, in another form")

	c.w.SetTarget(c.ctx, tg) // the claim is held: the Startup converge
	c.settle()
	sent, _ := a.sent()
	require.Equal(t, 1, sent)
	c.changeBy(tg, "a", "flux", "a: 2") // the apply's echoes
	c.changeBy(tg, "gone", "flux", "")  // pruned
	c.step(time.Minute)                 // the window closes: "kept" is released
	c.step(5 * time.Second)             // and its window's silence ends
	assert.Equal(t, "a: 2", c.remoteShow("clusters/dev/demo/configmaps/a.yaml"), "Git's a, never the older one")
	assert.NotContains(t, c.remoteFiles(), "clusters/dev/demo/configmaps/gone.yaml")
	assert.Equal(t, "kept: 1", c.remoteShow("clusters/dev/demo/configmaps/kept.yaml"), "still on the cluster after the apply")
	assert.Equal(t, []string{"Foreign|seed", "snapshot|Reverser: create ConfigMap demo/mine",
		"snapshot|Reverser: create ConfigMap demo/kept"}, c.log())
	assert.Empty(t, c.rec.lastUnapplied())
}

// TestTheApplierCreatingWhatAFileHoldsIsAnEcho (R3): the applier creates
// an object whose document is in a file of another name (a folder people
// wrote). Its write is Git's: nothing is committed, no Repair is asked,
// and Git equals the cluster.
func TestTheApplierCreatingWhatAFileHoldsIsAnEcho(t *testing.T) {
	c, tg, a, _ := applied(t, 0, map[string]string{"clusters/dev/app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n"}, true)
	tg.Namespace = "demo"
	c.w.SetTarget(c.ctx, tg)
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.settle()
	sent, applied := a.sent()
	require.Equal(t, 1, sent, "the Startup converge")
	require.Equal(t, 1, applied)
	c.w.Change(c.ctx, tg.Key, document.Change{Path: "clusters/dev/demo/configmaps/a.yaml",
		Content: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: demo}\ndata: {k: v}\n"),
		Desc:    "ConfigMap demo/a", GVR: cmGVR, Kind: "ConfigMap", Namespace: "demo", Name: "a", Seen: c.clock.Now(), ResourceVersion: "flux"})
	c.settle() // within the apply window
	c.step(time.Minute)
	c.step(time.Minute)
	sent, _ = a.sent()
	assert.Equal(t, 1, sent, "no Repair: the applier applied what Git holds")
	assert.Equal(t, []string{"Foreign|seed"}, c.log())
	assert.Empty(t, c.rec.lastUnapplied(), "Git equals the cluster")
}

// TestATargetWithoutStreamsIsNotJudged (R3): before its rules resolve, a
// target has no stream and knows nothing of the cluster: it says nothing,
// rather than that Git equals the cluster.
func TestATargetWithoutStreamsIsNotJudged(t *testing.T) {
	c, tg, _, _ := applied(t, 0, map[string]string{"clusters/dev/demo/configmaps/a.yaml": "a: 1\n"}, false)
	bare := tg
	bare.Claim, bare.Scopes, bare.Kinds, bare.Namespace = nil, nil, nil, ""
	c.w.SetTarget(c.ctx, bare)
	c.step(time.Minute)
	c.rec.mu.Lock()
	assert.Empty(t, c.rec.unapplied, "no report without a stream")
	c.rec.mu.Unlock()

	tg.Claim = nil
	c.w.SetTarget(c.ctx, tg) // the rules resolved
	c.w.Synced(c.ctx, tg.Key, demoScope)
	c.step(time.Minute)
	assert.Contains(t, c.rec.lastUnapplied(), "Git holds 1 object(s) the cluster lacks: demo/configmaps/a.yaml")
}
