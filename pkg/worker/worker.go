// Package worker runs branch workers: one goroutine per (GitProvider,
// branch) that owns the local repository and every write to that branch.
// Each change waits for its author (from audit, for at most the attribution
// grace, in order per object), then collects in a commit window per
// (GitTarget, author); each window becomes one commit authored by its author,
// and commits are pushed in batches. A rejected push fetches the
// remote, starts again from its head and replays the cluster's state.
//
// Ownership and blocking: every field of Worker but the queue (in) and the
// mailbox (ctl) is owned by the goroutine in Run. Others talk to it two
// ways. Changes and stream syncs go through the bounded queue: a full queue
// blocks the stream that sends, which slows the watch rather than growing
// memory. Everything else (SetTarget, SetAuth, RemoveTarget, Save, FindSave,
// Close) is posted to the mailbox, which never blocks, so a reconcile never
// waits on a busy worker; the worker applies the mailbox, in order, before
// anything it takes from the queue. Each turn takes only what was queued
// when it began, so a busy stream cannot hold off commits, pushes and saves.
// Reporter calls and Done callbacks come from the worker goroutine and must
// not block. BarrierMet goes through the queue, behind the changes the
// streams sent before it.
//
// A target with a Claim also drives its applier from the worker goroutine
// (apply.go): the applier's Send and Follow are API calls made there, each
// bounded by applierCallTimeout; the claim's Report and Barrier callbacks
// must not block.
//
// Every thousand commits, the push that carries them also repacks the local
// repository (on the worker goroutine: that push takes longer), so loose
// objects do not pile up on the controller's disk.
//
// After an error, nothing is forgotten: a window is dropped, and its save
// ended, only once its commit exists; a failed commit or push is retried
// after a backoff with the same windows, saves and unpushed commits.
package worker

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/kustomize"
	"reverser.dev/reverser/pkg/metrics"
)

// Target is a GitTarget as the worker needs it.
type Target struct {
	// Key is namespace/name of the GitTarget.
	Key    string
	Path   string
	Window Window
	// PruneAlways sweeps documents the cluster does not hold after each
	// stream's initial state; otherwise only observed deletes remove files.
	PruneAlways bool
	// Authors decides who made each change; nil authors everything as the
	// committer.
	Authors Attributor
	// Namespace is the one the folder's applier puts namespaced documents
	// without a namespace into, "" when it is not known: an object there
	// keeps the document that leaves its namespace out (feature R1).
	Namespace string
	// Scopes are the streams that feed the target: a converge waits until
	// each has delivered its initial state.
	Scopes []document.Scope
	// Claim, when set, is the applier the target's held claim hands over.
	Claim *Claim
	// Applied says the GitTarget names an applier claim, held or not yet:
	// an applier applies its folder, so it is never swept, and the objects
	// Git holds there that the cluster lacks are reported (feature R3).
	Applied bool
	// AppliedBy is the field manager of the applier an Applied target's
	// claim names, whether held or not: until that applier first applied
	// the branch, the initial state of objects it wrote last waits
	// (unapplied.go).
	AppliedBy string
	// Kinds is the kind of each scope's resource, which tells the
	// documents of the folder that the target mirrors.
	Kinds map[schema.GroupVersionResource]string
	// Seal encrypts the target's credentials (Secrets, and the fields its
	// rules name); without it changes that hold them are dropped, and the
	// Secrets Git holds are never swept.
	Seal Sealer
}

// Sealer encrypts the fields named keys of a document in clear (package
// seal). It returns the first of priors that already holds plain so, which
// keeps an unchanged object from writing anything although encryption is
// randomised.
type Sealer interface {
	Seal(plain []byte, keys []string, priors ...[]byte) ([]byte, error)
}

// Attributor decides the author of a change. ready=false means its fact may
// still arrive: ask again at retryAt, or when the worker's wake channel fires.
type Attributor interface {
	Author(ch document.Change, now time.Time) (author identity.Signature, ready bool, retryAt time.Time)
}

// Window says when a target's open changes become a commit.
type Window struct {
	Silence, MaxAge time.Duration
}

// Reporter hears what a worker did, for status and logs. Calls come from
// the worker's goroutine and must not block.
type Reporter interface {
	Committed(target, sha string, at time.Time)
	Pushed(targets []string, sha string, at time.Time)
	Failed(targets []string, err error)
	// Rejected says the remote refused a push because its branch had
	// moved: the worker fetches it and replays its commits on top.
	Rejected(targets []string)
	// Refused lists the changes of a target that cannot be written into
	// its repository as it is (kustomize refusals), each naming the object
	// and why; an empty list clears them.
	Refused(target string, refusals []string)
	// Unapplied says, for a target an applier applies, which objects Git
	// holds that the cluster lacks and why (feature R3); "" clears it.
	Unapplied(target, message string)
}

// Worker owns one branch of one repository.
type Worker struct {
	repo      *gitrepo.Repo
	committer identity.Signature
	// signer signs every commit when set (GitProvider spec.signing).
	signer   gitrepo.Signer
	reporter Reporter
	in       chan func()
	ctl      mailbox
	wake     <-chan struct{}
	clock    clock.Clock

	ready   bool
	head    plumbing.Hash
	pushed  plumbing.Hash
	index   map[string]plumbing.Hash // files of head
	targets map[string]*target
	// out is what the remote has not taken yet, and how pushing fares.
	out outbox
	// commitRetryAt holds local commits back after one failed.
	commitRetryAt time.Time
	// closing makes Run return once the mailbox is applied.
	closing bool
	// onStep, when set (by tests, from the worker's goroutine), runs after
	// every step; commitErr, when set, fails a commit with what it returns.
	onStep    func()
	commitErr func() error
	// docs knows which objects the head's YAML files hold; blobs caches
	// what a kustomized folder reads (sources.go).
	docs  *docIndex
	blobs map[plumbing.Hash][]byte
}

type target struct {
	cfg     Target
	desired map[string]doc
	windows map[identity.Signature]*window
	// pending changes wait for their author, in arrival order.
	pending []pendingChange
	retryAt time.Time
	// saves wait for, or collect, their author's window.
	saves []*SaveRequest
	// seq numbers the changes sent to the target, in order.
	seq uint64
	// synced are the scopes whose initial state is complete; sweep says
	// they must be swept against the current head.
	synced []document.Scope
	sweep  bool
	// snapshotDone: the target's initial state is complete, up to change
	// snapshotSeq, which may not be in its window yet.
	snapshotDone bool
	snapshotSeq  uint64
	// reasserting: a replay re-asserted the cluster's state into the
	// committer's window, which the next step closes at once.
	reasserting bool
	// apply drives the claimed applier; nil without a claim.
	apply *applyState
	// For changes written into the sources (sources.go), by layout path:
	// the object each is about, the content last written (the state
	// before the next change), and why a change could not be written.
	ids       map[string]kustomize.ID
	inSources map[string][]byte
	refused   map[string]string
	// reported is the refusals last reported, to report only changes.
	reported string
	// planner remembers the last render of the target's folder.
	planner kustomize.Planner
	// unapplied is the state the last Unapplied report was decided on,
	// and what it said, once sent: a new target reports even "", which
	// clears what a former worker of the GitTarget said.
	unappliedAt, unapplied string
	unappliedSent          bool
	// deferred are initial-state changes of objects the applier wrote
	// last, by path, held until its first converge ended (unapplied.go);
	// adopted says it did, and nothing is deferred any more.
	deferred map[string]pendingChange
	adopted  bool
	// suspended, while set, is the GitTarget's suspension under way: its
	// windows close now and the target leaves once all is pushed (Suspend).
	suspended func(Suspension)
}

// pendingChange is a change waiting to join its author's window. Once its
// author is known it is kept here, since a fact is handed out only once.
type pendingChange struct {
	document.Change
	author *identity.Signature
	seq    uint64
	// sealed: Content is encrypted already.
	sealed bool
}

// doc is an object's document as the cluster holds it. Its bytes are kept
// only while Git does not hold that blob at its path (keepBytes): once
// committed, the repository has them, and a target of 100k objects holds
// hashes, not a second copy of every document.
type doc struct {
	hash    plumbing.Hash
	content []byte // nil while the head holds hash at the doc's path
	desc    string // "ConfigMap demo/app"
	// id names the object, for writing into sources (sources.go); the
	// zero ID where the change did not say.
	id kustomize.ID
	// sealed documents are written as they are, never into sources.
	sealed bool
}

type window struct {
	author                  identity.Signature
	opened, last, firstSeen time.Time
	paths                   map[string]string // path → description
	// save, when attached, gives the window its message and closes it at
	// closeAt instead of on silence or max age.
	save    *SaveRequest
	closeAt time.Time
	// snapshot: the target's initial state is complete and this window
	// holds it; it closes now, not after a silence no edit made.
	snapshot bool
	// reassert: the committer's window re-asserts the cluster's state over
	// foreign commits; it closes now, so the push that follows a fetch
	// already leaves the folder equal to the cluster.
	reassert bool
}

// New returns a worker for repo, committing as committer. Run starts it.
// wake, when not nil, fires when audit facts arrive for pending changes.
func New(repo *gitrepo.Repo, committer identity.Signature, reporter Reporter, wake <-chan struct{}) *Worker {
	return &Worker{
		repo: repo, committer: committer, reporter: reporter, wake: wake,
		in:      make(chan func(), 4096),
		out:     outbox{repackAfter: 1000},
		ctl:     mailbox{signal: make(chan struct{}, 1)},
		clock:   clock.RealClock{},
		index:   map[string]plumbing.Hash{},
		targets: map[string]*target{},
		docs:    newDocIndex(),
		blobs:   map[plumbing.Hash][]byte{},
	}
}

// WithClock makes the worker read time from c, which tests step by hand.
// Call it before Run.
func (w *Worker) WithClock(c clock.Clock) *Worker {
	w.clock = c
	return w
}

// mailbox holds what others ask of the worker, run in order on the
// worker's goroutine. Posting never blocks.
type mailbox struct {
	mu     sync.Mutex
	ops    []func()
	signal chan struct{} // capacity 1: "the mailbox is not empty"
}

// post hands f to the worker's goroutine without waiting.
func (w *Worker) post(f func()) {
	w.ctl.mu.Lock()
	w.ctl.ops = append(w.ctl.ops, f)
	w.ctl.mu.Unlock()
	select {
	case w.ctl.signal <- struct{}{}:
	default:
	}
}

// runPosted runs what was posted, in order.
func (w *Worker) runPosted() {
	w.ctl.mu.Lock()
	ops := w.ctl.ops
	w.ctl.ops = nil
	w.ctl.mu.Unlock()
	for _, f := range ops {
		f()
	}
}

// do hands f to the worker's goroutine; it blocks when the queue is full,
// which slows the streams rather than growing memory without bound.
func (w *Worker) do(ctx context.Context, f func()) {
	metrics.QueueDepth.Inc()
	select {
	case w.in <- f:
	case <-ctx.Done():
		metrics.QueueDepth.Dec()
	}
}

// SetTarget adds or updates a target. It never blocks.
func (w *Worker) SetTarget(_ context.Context, t Target) {
	w.post(func() {
		cur, ok := w.targets[t.Key]
		if !ok {
			cur = &target{desired: map[string]doc{}, windows: map[identity.Signature]*window{},
				ids: map[string]kustomize.ID{}, inSources: map[string][]byte{}, refused: map[string]string{},
				deferred: map[string]pendingChange{}}
			w.targets[t.Key] = cur
		}
		cur.cfg = t
		if cur.suspended != nil {
			cur.suspended(SuspensionCancelled) // resumed before it was done: mirror on
			cur.suspended = nil
		}
		cur.planner.Namespace = t.Namespace
		cur.unappliedAt = "" // judged again under the new namespace, scopes and kinds
		w.setClaim(cur, t.Claim)
	})
}

// SetAuth replaces the credentials of the remote, after a Secret rotation.
// It never blocks.
func (w *Worker) SetAuth(_ context.Context, auth transport.AuthMethod) {
	w.post(func() {
		w.repo.SetAuth(auth)
		w.out.retryAt = time.Time{} // try the new credentials at once
	})
}

// SetCommitter replaces the identity that commits, and authors what nobody
// is known to have made, after the GitProvider's spec.committer changed. It
// never blocks.
func (w *Worker) SetCommitter(committer identity.Signature) {
	w.post(func() { w.committer = committer })
}

// SetSigner replaces what signs the commits that follow (nil: unsigned),
// after the GitProvider's spec.signing or its key changed. Posted before a
// worker's first target, it signs every commit the worker makes. It never
// blocks.
func (w *Worker) SetSigner(signer gitrepo.Signer) {
	w.post(func() { w.signer = signer })
}

// Close stops the worker once it has applied what was posted before: the
// saves of its remaining targets end GitTargetGone and Run returns. It never
// blocks.
func (w *Worker) Close() {
	w.post(func() {
		for _, key := range w.sortedTargets() {
			w.forget(w.targets[key])
		}
		w.targets = map[string]*target{}
		w.closing = true
	})
}

// RemoveTarget forgets a target: its open windows are dropped, its saves end
// GitTargetGone, and changes still queued for it are ignored. Its files stay
// in Git. It never blocks.
func (w *Worker) RemoveTarget(_ context.Context, key string) {
	w.post(func() {
		if t, ok := w.targets[key]; ok {
			w.forget(t)
		}
		delete(w.targets, key)
	})
}

// Suspension is how a Suspend ended.
type Suspension string

const (
	// SuspensionDone: every change received was committed and pushed, and
	// the target left the worker.
	SuspensionDone Suspension = "Done"
	// SuspensionCancelled: SetTarget resumed the target first; it mirrors
	// on, its windows intact.
	SuspensionCancelled Suspension = "Cancelled"
	// SuspensionDropped: the target was removed, or the worker closed,
	// first; what was not pushed is lost with it.
	SuspensionDropped Suspension = "Dropped"
)

// Suspend ends a target once what it received is in Git: its open windows
// close now (with their saves), changes still waiting for their authors
// join theirs as those are known, and once every commit is pushed the
// target leaves as RemoveTarget would. The caller stops its streams first.
// done hears, once, from the worker's goroutine, how it ended; it must not
// block. It never blocks.
func (w *Worker) Suspend(_ context.Context, key string, done func(Suspension)) {
	w.post(func() {
		t, ok := w.targets[key]
		if !ok {
			done(SuspensionDone)
			return
		}
		if t.suspended != nil {
			t.suspended(SuspensionCancelled) // a second Suspend replaces the first
		}
		t.suspended = done
	})
}

// endSuspended removes the suspended targets that are done: nothing waits
// to join a window, no window is open and every commit is pushed.
func (w *Worker) endSuspended() {
	if w.head != w.pushed {
		return
	}
	for _, key := range w.sortedTargets() {
		t := w.targets[key]
		if t.suspended == nil || len(t.pending) > 0 || len(t.windows) > 0 {
			continue
		}
		done := t.suspended
		t.suspended = nil
		w.forget(t)
		delete(w.targets, key)
		done(SuspensionDone)
	}
}

// forget ends what waits on a target that stops being mirrored here.
func (w *Worker) forget(t *target) {
	if t.suspended != nil {
		t.suspended(SuspensionDropped)
		t.suspended = nil
	}
	for _, s := range t.saves {
		w.endSave(s, SaveResult{Outcome: SaveTargetGone, Message: "the GitTarget stopped being mirrored here"})
	}
	if t.apply != nil {
		w.dropClaim(t, "the GitTarget stopped being mirrored here")
	}
}

// Change records an object's new document (nil content: deleted). It waits
// for its author before it joins a window.
func (w *Worker) Change(ctx context.Context, key string, ch document.Change) {
	w.do(ctx, func() {
		if t, ok := w.targets[key]; ok {
			t.seq++
			t.pending = append(t.pending, pendingChange{Change: ch, seq: t.seq})
		}
	})
}

// Synced marks the end of a stream's initial state: with PruneAlways, the
// documents in the stream's scope that the cluster does not hold are removed.
func (w *Worker) Synced(ctx context.Context, key string, scope document.Scope) {
	w.do(ctx, func() {
		t, ok := w.targets[key]
		if !ok || slices.Contains(t.synced, scope) {
			return
		}
		t.synced = append(t.synced, scope)
		t.sweep = true
		// The stream's changes came before this call: once every scope has
		// delivered its initial state, the changes up to here are the whole
		// snapshot. A stream that restarts later is synced already, so its
		// replay waits for the silence as an edit does.
		if allSynced(t) {
			t.snapshotDone, t.snapshotSeq = true, t.seq
		}
	})
}

// closeSnapshot closes the committer's window (a snapshot is authored by
// the committer) once every change of the complete initial state is in it.
func (w *Worker) closeSnapshot(t *target) {
	if !t.snapshotDone || slices.ContainsFunc(t.pending, func(p pendingChange) bool { return p.seq <= t.snapshotSeq }) {
		return
	}
	t.snapshotDone = false
	if win := t.windows[w.committer]; win != nil {
		win.snapshot = true
	}
}

// closeReassert has the committer's window, holding a re-assertion after
// foreign commits, close at this step.
func (w *Worker) closeReassert(t *target) {
	if !t.reasserting {
		return
	}
	t.reasserting = false
	if win := t.windows[w.committer]; win != nil {
		win.reassert = true
	}
}

// allSynced says whether every scope of t has delivered its initial state.
func allSynced(t *target) bool {
	return !slices.ContainsFunc(t.cfg.Scopes, func(s document.Scope) bool { return !slices.Contains(t.synced, s) })
}

// sweepTarget removes, with PruneAlways, the documents in synced scopes that
// the cluster does not hold. It needs the head's files, so it runs once the
// worker has fetched, and again after every reset.
//
// A target an applier applies is never swept (feature R3), whether its
// claim is held yet or not (a claim applied with its GitTarget is held a
// moment after the target starts): the applier makes the cluster hold what
// Git holds, so a document the cluster lacks is one it has not applied yet
// (a folder adopted before its first apply, a failed apply), not one
// somebody deleted. Only an observed delete removes it.
func (w *Worker) sweepTarget(t *target) {
	t.sweep = false
	if !t.cfg.PruneAlways || t.apply != nil || t.cfg.Applied {
		return
	}
	for p := range w.index {
		if _, held := t.desired[p]; held {
			continue
		}
		for _, scope := range t.synced {
			if t.cfg.Seal == nil && scope.GVR.GroupResource() == document.SecretsResource {
				continue // Secrets not mirrored: those in Git are not ours
			}
			if document.InScope(p, t.cfg.Path, scope.GVR, scope.Namespace) && !w.heldByPerson(t, p) {
				w.touch(t, w.committer, p, "document "+path.Base(p)+" the cluster does not hold", w.clock.Now())
				break
			}
		}
	}
}

// Run processes changes until ctx is done or the worker is closed.
func (w *Worker) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("repository", w.repo.URL(), "branch", w.repo.Branch())
	ctx = klog.NewContext(ctx, log)
	timer := w.clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.ctl.signal:
			w.drain() // the mailbox, then the changes sent before this step
		case f := <-w.in:
			metrics.QueueDepth.Dec()
			w.runPosted() // what was asked before this change was sent
			f()
			w.drain()
		case <-w.wake:
		case <-timer.C():
		}
		if w.closing {
			return
		}
		w.step(ctx)
		if w.onStep != nil {
			w.onStep()
		}
		// Stopped and drained before it is armed again: a fired value left in
		// the channel would wake the next turn for nothing, and a fake
		// clock (the tests') blocks firing a timer whose channel is full.
		if !timer.Stop() {
			select {
			case <-timer.C():
			default:
			}
		}
		timer.Reset(w.nextWake())
	}
}

// drain handles what was queued when it started, so a burst shares its
// commits; no more, so a stream that keeps the queue full cannot hold off
// the step that commits, pushes and answers saves.
func (w *Worker) drain() {
	for n := len(w.in); n > 0; n-- {
		f := <-w.in
		metrics.QueueDepth.Dec()
		w.runPosted()
		f()
	}
	w.runPosted()
}

func (w *Worker) step(ctx context.Context) {
	now := w.clock.Now()
	w.expireSaves(now) // before anything that may fail and return
	if !w.ready {
		if now.Before(w.out.retryAt) {
			return
		}
		if err := w.reset(ctx); err != nil {
			w.fail(stageFetch, err)
			return
		}
	}
	if now.Before(w.commitRetryAt) {
		return // a local commit failed: try again after the backoff, not on every wake
	}
	if len(w.out.refused) > 0 || w.out.reassert {
		// A replay that failed: the fetched head may have moved on since,
		// which the next push finds out.
		if err := w.replay(); err != nil {
			w.failCommit(err)
			return
		}
	}
	for _, key := range w.sortedTargets() {
		t := w.targets[key]
		w.releaseDeferred(t)
		// Changes first, so a sweep sees every object the streams delivered.
		if err := w.resolvePending(t); err != nil {
			w.failCommit(fmt.Errorf("committing for %s: %w", key, err))
			return
		}
		if t.sweep {
			w.sweepTarget(t)
		}
		w.closeReassert(t) // after the sweep, so what it removes goes in the same commit
		w.closeSnapshot(t)
		w.attachSaves(t)
		now = w.clock.Now()
		for _, win := range sortedWindows(t) {
			reason := ""
			switch {
			case win.save != nil:
				if now.Before(win.closeAt) && !t.settled(win.save, now) && t.suspended == nil {
					continue
				}
				reason = "save"
			case t.suspended != nil:
				reason = "suspend"
			case win.snapshot:
				reason = "snapshot"
			case win.reassert:
				reason = "reassert"
			case now.Sub(win.last) >= t.cfg.Window.Silence:
				reason = "silence"
			case now.Sub(win.opened) >= t.cfg.Window.MaxAge:
				reason = "max_age"
			default:
				continue
			}
			if err := w.commitWindow(t, win, reason); err != nil {
				w.failCommit(fmt.Errorf("committing for %s: %w", key, err))
				return
			}
		}
		if t.apply != nil {
			if err := w.stepApply(ctx, t); err != nil {
				w.failCommit(fmt.Errorf("committing for %s before a converge: %w", key, err))
				return
			}
		}
		w.reportUnapplied(t)
	}
	if w.head != w.pushed && !now.Before(w.out.retryAt) {
		w.push(ctx)
	}
	w.endSuspended()
}

func (w *Worker) nextWake() time.Duration {
	next := time.Hour
	now := w.clock.Now()
	consider := func(at time.Time) {
		if d := at.Sub(now); d < next {
			next = max(d, 0)
		}
	}
	for _, t := range w.targets {
		for _, win := range t.windows {
			if win.save != nil {
				consider(win.closeAt)
				if win.save.Settle > 0 && len(t.pending) == 0 {
					consider(win.save.queued.Add(win.save.Settle))
				}
				continue
			}
			consider(win.last.Add(t.cfg.Window.Silence))
			consider(win.opened.Add(t.cfg.Window.MaxAge))
		}
		for _, s := range t.saves {
			consider(s.Deadline)
			if at := s.queued.Add(s.Settle); at.After(now) {
				consider(at) // attachSaves: a window may still be on its way
			}
			if !s.GiveUpAt.IsZero() {
				consider(s.GiveUpAt)
			}
		}
		if !t.retryAt.IsZero() {
			consider(t.retryAt)
		}
		if t.apply != nil {
			t.apply.wake(now, consider)
		}
	}
	if !w.ready || w.head != w.pushed {
		consider(w.out.retryAt)
	}
	for _, c := range slices.Concat(w.out.unpushed, w.out.refused) {
		if c.save != nil && !c.save.GiveUpAt.IsZero() {
			consider(c.save.GiveUpAt)
		}
	}
	if now.Before(w.commitRetryAt) {
		consider(w.commitRetryAt)
	}
	return next
}

func (w *Worker) sortedTargets() []string {
	keys := make([]string, 0, len(w.targets))
	for k := range w.targets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
