package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/kustomize"
	"reverser.dev/reverser/pkg/metrics"
)

// The applier side of a worker. A target whose GitTarget names a held claim
// carries a Claim: the worker then decides when the applier applies the
// branch, because only the worker knows what the branch holds and what the
// cluster has that Git does not have yet. A converge is sent only once the
// target's open windows are committed and pushed, so the applier never
// applies a tip that lacks a live edit the worker has seen. While a converge
// runs, and for a grace and a barrier after it, the applier's writes are
// echoes of Git: they are not mirrored, and one that differs from what Git
// holds (an edit the apply reverted) makes a Repair converge put Git back.

// Reasons for a converge (the API's ConvergeReason values).
const (
	ReasonStartup       = "Startup"
	ReasonForeignCommit = "ForeignCommit"
	ReasonRepair        = "Repair"
	ReasonCatchUp       = "CatchUp"
)

// BarrierTimeout bounds how long an apply window waits for its barrier.
const BarrierTimeout = 2 * time.Minute

// applierCallTimeout bounds each call to the applier, which runs on the
// worker's goroutine: an API server that stops answering holds the branch
// back this long at most, then the step goes on and asks again later.
const applierCallTimeout = 30 * time.Second

// Applier asks a claimed applier to apply the branch.
type Applier interface {
	// Send asks the applier to apply the remote branch as it is now; token
	// identifies the request.
	Send(ctx context.Context, token string) (Operation, error)
}

// Operation is one converge in flight.
type Operation interface {
	// Follow takes the converge a step. resume is asked once, before the
	// applier starts to change the cluster; false abandons the converge.
	Follow(ctx context.Context, resume func() bool) (ApplyProgress, error)
}

// ApplyProgress is where a converge stands.
type ApplyProgress struct {
	// Done: the applier handled the request, or (Abandoned) it was given up
	// before anything was applied. Revision is the commit it reports
	// applied; Failure its message when the apply failed.
	Done, Abandoned bool
	Revision        string
	Failure         string
}

// Claim is the applier a held claim hands a target.
type Claim struct {
	// Key names the claim ("namespace/name"); a target handed another claim
	// starts over with a Startup converge.
	Key     string
	Applier Applier
	// CatchUpAfter asks a CatchUp converge once the applier has been behind
	// the branch this long; zero never does.
	CatchUpAfter time.Duration
	// Writers are the applier's identities as the attributor names them;
	// Manager is its field manager, which tells its writes where no audit
	// fact does.
	Writers []identity.Signature
	Manager string
	// Grace keeps the apply window open this long after a converge is done.
	Grace time.Duration
	// Poll is how often the remote is looked at for foreign commits, which
	// the held applier would otherwise never apply.
	Poll time.Duration
	// Barrier, when set, starts the barrier of an apply window; it must not
	// block, and it answers through Worker.BarrierMet with token.
	Barrier func(token string)
	// Report hears each converge as it starts and ends, from the worker's
	// goroutine; it must not block.
	Report func(ApplyReport)
}

// ApplyReport is a converge as the claim's status shows it.
type ApplyReport struct {
	Reason string
	// Head is the commit the converge asked for; Applied what the applier
	// reported (empty until done).
	Head, Applied     string
	Started, Finished time.Time
	// Failure is the applier's own failure message; Note says why a
	// converge that did not fail did not settle anything (it yielded, or
	// applied an older revision and is asked again).
	Failure, Note       string
	LastAppliedRevision string
}

// ApplyResult is how the apply of a save's commit went.
type ApplyResult struct {
	// Reason is one of the API's Applied reasons: Applying, Retrying,
	// Applied, NoApplierClaim, ApplierGone, CommitDropped.
	Reason   string
	Revision string
	Message  string
	// Settled: nothing will change it any more.
	Settled bool
}

type applyState struct {
	cfg Claim
	// pending is the reason of the converge to send next ("" none); yields
	// says it is an interval converge, which gives way to a live edit.
	pending string
	yields  bool
	// behindSince starts the catch-up clock.
	behindSince time.Time
	retryAt     time.Time
	backoff     time.Duration
	inflight    *inflight
	// applied is what the applier last reported; known once it reported.
	applied plumbing.Hash
	known   bool
	// failure is the last converge's failure, "" once one applied: the
	// GitTarget's status names it while Git and the cluster differ.
	failure string
	// ended: a converge applied or failed since the claim was handed over.
	ended bool
	// liveEdits counts the people's changes mirrored, which an interval
	// converge sent before one of them yields to.
	liveEdits uint64
	// repairedFor is the head a Repair was sent for: a collision at the same
	// head again is mirrored instead of repaired for ever.
	repairedFor plumbing.Hash
	// The apply window after the last converge: open until graceUntil and
	// until its barrier is answered or lapses.
	graceUntil      time.Time
	barrierToken    string
	barrierDeadline time.Time
	// barrierSeq, once the streams answered the barrier, is the last change
	// they had sent by then: the barrier is met when none up to it still
	// waits for its author.
	barrierSeq      uint64
	barrierAnswered bool
	// waiting are the saves whose commits wait to be applied.
	waiting []*applyWait
	polled  time.Time
}

type inflight struct {
	op      Operation
	reason  string
	yields  bool
	head    plumbing.Hash
	started time.Time
	edits   uint64 // liveEdits at the send
	saves   []*applyWait
}

type applyWait struct {
	commit plumbing.Hash
	done   func(ApplyResult)
}

// setClaim hands t the claim c (nil: none). A new claim starts over; saves
// waiting on a claim that went hear ApplierGone.
func (w *Worker) setClaim(t *target, c *Claim) {
	switch {
	case c == nil && t.apply == nil:
	case c == nil:
		w.dropClaim(t, "the GitTarget stopped naming the applier claim, or the claim is no longer held")
	case t.apply != nil && t.apply.cfg.Key == c.Key:
		t.apply.cfg = *c
	default:
		if t.apply != nil {
			w.dropClaim(t, "the GitTarget names another applier claim now")
		}
		t.apply = &applyState{cfg: *c, pending: ReasonStartup}
	}
}

// dropClaim forgets t's claim: its waiting saves were applied by nobody,
// and need not be, since the cluster already holds what they saved.
func (w *Worker) dropClaim(t *target, why string) {
	for _, s := range t.apply.waiting {
		s.done(ApplyResult{Reason: "ApplierGone", Settled: true, Message: why})
	}
	t.apply = nil
}

// followApply makes a pushed save's commit wait for its apply; afterPush
// asks a converge for it at once.
func (w *Worker) followApply(t *target, commit string, afterPush bool, done func(ApplyResult)) {
	if t == nil || t.apply == nil {
		done(ApplyResult{Reason: "NoApplierClaim", Settled: true, Message: "the GitTarget names no held applier claim: nothing applies the branch"})
		return
	}
	a := t.apply
	a.waiting = append(a.waiting, &applyWait{commit: plumbing.NewHash(commit), done: done})
	msg := "waiting for the applier's next converge (the claim's catchUpAfter)"
	if afterPush {
		msg = "a converge is asked for the pushed commit"
		if a.pending == "" || a.yields {
			a.pending, a.yields = ReasonCatchUp, false
		}
	}
	done(ApplyResult{Reason: "Applying", Message: msg})
}

// BarrierMet answers the barrier token of target key's apply window; it is
// queued behind the changes the streams sent before it.
func (w *Worker) BarrierMet(ctx context.Context, key, token string, err error) {
	w.do(ctx, func() {
		t, ok := w.targets[key]
		if !ok || t.apply == nil || t.apply.barrierToken != token {
			return // a barrier a later one replaced
		}
		if err != nil {
			t.apply.barrierToken = ""
			metrics.ApplyWindowBarriers.WithLabelValues("failed").Inc()
			klog.Background().Info("Apply window barrier failed; the grace alone closes the window", "gitTarget", key, "err", err.Error())
			return
		}
		t.apply.barrierSeq, t.apply.barrierAnswered = t.seq, true
	})
}

// settleBarrier closes the barrier once every change the streams sent
// before answering it has its author and was judged.
func (a *applyState) settleBarrier(t *target) {
	if a.barrierToken == "" || !a.barrierAnswered ||
		slices.ContainsFunc(t.pending, func(p pendingChange) bool { return p.seq <= a.barrierSeq }) {
		return
	}
	a.barrierToken, a.barrierAnswered = "", false
	metrics.ApplyWindowBarriers.WithLabelValues("met").Inc()
}

// windowOpen says whether the applier's writes are echoes now.
func (a *applyState) windowOpen(now time.Time) bool {
	return a.inflight != nil || now.Before(a.graceUntil) || (a.barrierToken != "" && now.Before(a.barrierDeadline))
}

// writtenByApplier says whether the change is the applier's write: its
// audit author is one of the applier's identities, or no author is known
// and the object's newest managedFields entry is the applier's.
func (a *applyState) writtenByApplier(ch document.Change, author identity.Signature, anonymous bool) bool {
	if slices.Contains(a.cfg.Writers, author) {
		return true
	}
	return anonymous && a.cfg.Manager != "" && ch.Manager == a.cfg.Manager
}

// echo handles a change the applier made during an apply window; false
// means it is mirrored as any change. An echo of what Git holds updates
// the cluster's state; one that differs keeps Git's document and asks a
// Repair.
func (w *Worker) echo(t *target, ch document.Change, author identity.Signature) bool {
	a := t.apply
	switch {
	case a == nil:
		return false
	case ch.Snapshot:
		// A stream's initial state after a restart: the applier may have
		// applied while nobody watched (a converge the old process sent).
		// No audit fact says who wrote; managedFields do.
		if a.cfg.Manager == "" || ch.Manager != a.cfg.Manager {
			return false
		}
	case !a.windowOpen(w.clock.Now()) || !a.writtenByApplier(ch, author, w.anonymous(author)):
		return false
	}
	want, wantHeld := w.gitDocument(t, ch.Path)
	got := gitrepo.BlobHash(ch.Content)
	// An object whose document is in the folder's sources (a file of
	// another name, a kustomized folder) that the worker never wrote: the
	// applier applied it from there, so its write is Git's (R3).
	adopted := ch.Content != nil && !wantHeld && w.inSources(t, ch)
	if (ch.Content == nil && !wantHeld) || (ch.Content != nil && wantHeld && got == want) || adopted {
		metrics.ApplyWindowEchoes.Inc()
		if ch.Content == nil {
			delete(t.desired, ch.Path)
		} else {
			_ = w.hold(t, ch.Path, doc{content: ch.Content, desc: ch.Desc, id: idOfChange(ch), sealed: len(ch.Encrypt) > 0}) // bytes given: cannot fail
		}
		return true
	}
	if a.repairedFor == w.head {
		return false // repaired at this head already: the cluster's form wins
	}
	if ch.Snapshot {
		// Keep Git's document as the state to hold, or a sweep would take
		// it for one the cluster lacks; the pending Startup puts it back.
		if !wantHeld {
			return false // Git has no document to keep: mirror the object
		}
		kept := doc{hash: want, desc: ch.Desc, id: idOfChange(ch), sealed: len(ch.Encrypt) > 0}
		if _, inGit := w.index[ch.Path]; !inGit {
			kept.content = t.inSources[ch.Path] // written into the sources: no blob of its own
		}
		if err := w.hold(t, ch.Path, kept); err != nil {
			return false
		}
		metrics.ApplyWindowCollisions.Inc()
		if a.pending == "" {
			a.pending, a.yields = ReasonRepair, false
		}
		return true
	}
	metrics.ApplyWindowCollisions.Inc()
	klog.Background().Info("The applier reverted what Git holds; Git keeps it and a Repair converge puts it back", "gitTarget", t.cfg.Key,
		"object", ch.Desc)
	// Whatever else was pending, the next converge repairs: it says so.
	a.pending, a.yields = ReasonRepair, false
	return true
}

// anonymous says whether author names nobody known: the unresolved author
// or, where attribution is off, the committer.
func (w *Worker) anonymous(author identity.Signature) bool {
	return author == w.committer || author.Name == "unknown (attribution unresolved)"
}

// gitDocument is the blob Git holds, or is about to hold, at p: a live
// edit still in an open window counts as Git's.
func (w *Worker) gitDocument(t *target, p string) (plumbing.Hash, bool) {
	for _, win := range t.windows {
		if _, ok := win.paths[p]; ok {
			d, held := t.desired[p]
			return d.hash, held
		}
	}
	if h, ok := w.index[p]; ok {
		return h, true
	}
	// Written into the folder's sources: the state it was written at.
	if b, ok := t.inSources[p]; ok {
		return gitrepo.BlobHash(b), true
	}
	return plumbing.ZeroHash, false
}

// inSources tells whether ch's object has its document in t's sources
// rather than at its layout path: in a folder kustomize builds, or in
// another file of the folder.
func (w *Worker) inSources(t *target, ch document.Change) bool {
	id := idOfChange(ch)
	if id == (kustomize.ID{}) {
		return false
	}
	return w.kustomized(t) || w.docs.elsewhere(id, t.cfg.Path, ch.Path, t.cfg.Namespace) != ""
}

// noteLiveEdit records that a person's edit joined a window, which an
// interval converge yields to.
func (t *target) noteLiveEdit() {
	if t.apply != nil {
		t.apply.liveEdits++
	}
}

// pushed starts the catch-up clocks of claimed targets: their appliers are
// behind the branch from this push on.
func (w *Worker) pushedForAppliers(now time.Time) {
	for _, t := range w.targets {
		if a := t.apply; a != nil && a.behindSince.IsZero() {
			a.behindSince = now
		}
	}
}

// stepApply takes t's applier one step: follows the converge in flight,
// decides what to converge next, and sends it once the branch holds every
// change the worker has seen. It returns an error only for a failed commit
// or push of the flush, which the caller backs off from.
func (w *Worker) stepApply(ctx context.Context, t *target) error {
	a := t.apply
	now := w.clock.Now()
	if a.inflight != nil {
		w.followConverge(ctx, t)
		if a.inflight != nil {
			return nil
		}
	}
	a.settleBarrier(t)
	if a.barrierToken != "" && !now.Before(a.barrierDeadline) {
		metrics.ApplyWindowBarriers.WithLabelValues("timed_out").Inc()
		a.barrierToken, a.barrierAnswered = "", false
	}
	w.pollRemote(ctx, t)
	behind := !a.known || a.applied != w.pushed
	if !behind {
		a.behindSince = time.Time{}
		w.settleWaiting(t, a.applied)
	}
	if a.pending == ReasonCatchUp && a.yields && a.cfg.CatchUpAfter == 0 {
		a.pending = "" // only the interval wanted it, and the interval is off
	}
	if a.pending == "" && behind && a.cfg.CatchUpAfter > 0 {
		switch {
		case a.behindSince.IsZero():
			a.behindSince = now
		case now.Sub(a.behindSince) >= a.cfg.CatchUpAfter:
			a.pending, a.yields = ReasonCatchUp, true
		}
	}
	if a.pending == "" || now.Before(a.retryAt) || !w.canConverge(t) {
		return nil
	}
	// The flush: the tip must hold every change seen, or the apply reverts it.
	for _, win := range sortedWindows(t) {
		if err := w.commitWindow(t, win, "apply"); err != nil {
			return err
		}
	}
	if w.head != w.pushed {
		w.push(ctx)
		if w.head != w.pushed || !w.ready {
			return nil // the push's own backoff holds the converge back too
		}
	}
	if w.pushed.IsZero() {
		return nil // an empty branch: nothing to apply yet
	}
	if w.sendConverge(ctx, t) {
		w.followConverge(ctx, t) // an applier may be quick
	}
	return nil
}

// canConverge says whether t's state is complete enough to apply: every
// stream delivered its initial state, no change waits for its author, the
// last apply's barrier is answered (its late writes are judged first), and
// no save collects its window.
func (w *Worker) canConverge(t *target) bool {
	if !w.ready || t.apply.barrierToken != "" || len(t.pending) > 0 || !allSynced(t) {
		return false
	}
	for _, win := range t.windows {
		if win.save != nil {
			return false
		}
	}
	return true
}

// sendConverge sends the pending converge; false when it could not.
func (w *Worker) sendConverge(ctx context.Context, t *target) bool {
	a := t.apply
	now := w.clock.Now()
	token := now.UTC().Format(time.RFC3339Nano)
	call, cancel := context.WithTimeout(ctx, applierCallTimeout)
	defer cancel()
	op, err := a.cfg.Applier.Send(call, token)
	if err != nil {
		metrics.Converges.WithLabelValues(a.pending, "error").Inc()
		w.applyBackoff(t, fmt.Errorf("asking the applier to converge: %w", err))
		return false
	}
	klog.FromContext(ctx).V(2).Info("Converge sent", "gitTarget", t.cfg.Key, "reason", a.pending, "head", w.pushed.String())
	a.inflight = &inflight{op: op, reason: a.pending, yields: a.yields, head: w.pushed, started: now, edits: a.liveEdits, saves: a.waiting}
	a.waiting = nil
	if a.pending == ReasonRepair {
		a.repairedFor = w.pushed
	}
	a.pending, a.yields = "", false
	a.behindSince = now // the catch-up clock starts again on every send
	w.report(t, ApplyReport{Reason: a.inflight.reason, Head: w.revision(a.inflight.head), Started: now})
	return true
}

// followConverge asks the applier how the converge in flight goes and, once
// it is done, settles the saves it carried.
func (w *Worker) followConverge(ctx context.Context, t *target) {
	a := t.apply
	in := a.inflight
	resume := func() bool { return !in.yields || a.liveEdits == in.edits }
	call, cancel := context.WithTimeout(ctx, applierCallTimeout)
	p, err := in.op.Follow(call, resume)
	cancel()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Following a converge", "gitTarget", t.cfg.Key, "err", err)
		return // asked again at the next step
	}
	if !p.Done {
		return
	}
	now := w.clock.Now()
	a.inflight = nil
	klog.FromContext(ctx).V(2).Info("Converge done", "gitTarget", t.cfg.Key, "reason", in.reason, "progress", p)
	w.openGrace(t, now)
	rep := ApplyReport{Reason: in.reason, Head: w.revision(in.head), Started: in.started, Finished: now}
	switch {
	case p.Abandoned:
		// An interval converge that yielded to a live edit waits a fresh interval.
		metrics.Converges.WithLabelValues(in.reason, "abandoned").Inc()
		a.waiting = append(in.saves, a.waiting...)
		a.behindSince = now
		rep.Note = "yielded to a live edit mirrored after it was sent; the next one waits a fresh catchUpAfter"
	case p.Failure != "":
		metrics.Converges.WithLabelValues(in.reason, "failed").Inc()
		rep.Applied, rep.Failure = w.revision(plumbing.NewHash(p.Revision)), p.Failure
		a.failure, a.ended = p.Failure, true
		w.retrySaves(t, in, "the applier failed to apply: "+p.Failure)
		w.applyBackoff(t, errors.New(p.Failure))
		if a.pending == "" {
			a.pending = in.reason
		}
	default:
		applied := plumbing.NewHash(p.Revision)
		rep.Applied = w.revision(applied)
		short, err := w.olderThan(applied, in.head)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reading the applied revision", "gitTarget", t.cfg.Key)
		}
		a.applied, a.known = applied, true
		if short {
			// The applier applied what it had, not what was asked (its
			// source had not fetched the new commit yet): ask again.
			metrics.Converges.WithLabelValues(in.reason, "fell_short").Inc()
			rep.Note = fmt.Sprintf("the applier applied %.7s, older than the %.7s asked for; asked again", applied, in.head)
			w.retrySaves(t, in, rep.Note)
			w.applyBackoff(t, errors.New(rep.Note))
			if a.pending == "" {
				a.pending = in.reason
			}
			break
		}
		metrics.Converges.WithLabelValues(in.reason, "applied").Inc()
		a.backoff, a.failure, a.ended = 0, "", true
		a.waiting = append(in.saves, a.waiting...)
		w.settleWaiting(t, applied)
	}
	if a.known {
		rep.LastAppliedRevision = w.revision(a.applied)
	}
	w.report(t, rep)
}

// revision names a commit of the branch as Flux does: "main@sha1:<sha>".
func (w *Worker) revision(h plumbing.Hash) string {
	return w.repo.Branch() + "@sha1:" + h.String()
}

// openGrace opens the apply window's grace after a converge and takes its
// barrier, which replaces any earlier one still waiting.
func (w *Worker) openGrace(t *target, now time.Time) {
	a := t.apply
	a.graceUntil = now.Add(a.cfg.Grace)
	if a.cfg.Barrier == nil {
		return
	}
	a.barrierToken, a.barrierAnswered = now.UTC().Format(time.RFC3339Nano), false
	a.barrierDeadline = now.Add(BarrierTimeout)
	a.cfg.Barrier(a.barrierToken)
}

// olderThan says whether applied is a strict ancestor of head. A revision
// the local repository does not hold is newer: someone pushed it since.
func (w *Worker) olderThan(applied, head plumbing.Hash) (bool, error) {
	if applied == head || applied.IsZero() {
		return false, nil
	}
	holds, err := w.repo.Holds(head, applied, 10000)
	if errors.Is(err, gitrepo.ErrUnknownCommit) {
		return false, nil
	}
	return holds, err
}

// settleWaiting settles the waiting saves whose commits applied holds.
func (w *Worker) settleWaiting(t *target, applied plumbing.Hash) {
	a := t.apply
	kept := a.waiting[:0]
	for _, s := range a.waiting {
		holds, err := w.repo.Holds(applied, s.commit, 10000)
		if err != nil && !errors.Is(err, gitrepo.ErrUnknownCommit) {
			kept = append(kept, s)
			continue
		}
		if holds || errors.Is(err, gitrepo.ErrUnknownCommit) {
			s.done(ApplyResult{Reason: "Applied", Revision: w.revision(applied), Settled: true,
				Message: fmt.Sprintf("the applier applied %.7s, which holds the commit", applied)})
			continue
		}
		kept = append(kept, s)
	}
	clear(a.waiting[len(kept):])
	a.waiting = kept
}

// retrySaves gives a converge's saves back to wait for the next one.
func (w *Worker) retrySaves(t *target, in *inflight, why string) {
	for _, s := range in.saves {
		s.done(ApplyResult{Reason: "Retrying", Message: why})
	}
	t.apply.waiting = append(in.saves, t.apply.waiting...)
}

func (w *Worker) applyBackoff(t *target, err error) {
	a := t.apply
	if a.backoff == 0 {
		a.backoff = time.Second
	} else {
		a.backoff = min(2*a.backoff, 5*time.Minute)
	}
	a.retryAt = w.clock.Now().Add(a.backoff)
	klog.Background().Info("Converge held back", "gitTarget", t.cfg.Key, "retryIn", a.backoff, "err", err.Error())
}

func (w *Worker) report(t *target, r ApplyReport) {
	if t.apply.cfg.Report != nil {
		t.apply.cfg.Report(r)
	}
}

// pollRemote looks at the remote every Poll while nothing is unpushed: a
// commit someone else pushed is otherwise never applied, the applier's own
// schedule being held.
func (w *Worker) pollRemote(ctx context.Context, t *target) {
	a := t.apply
	now := w.clock.Now()
	if a.cfg.Poll <= 0 || now.Sub(a.polled) < a.cfg.Poll {
		return
	}
	a.polled = now // also when skipped below: the next look is a Poll away
	if w.head != w.pushed || len(w.out.refused) > 0 || w.out.reassert {
		return
	}
	head, err := w.repo.Fetch(ctx)
	if err != nil {
		w.fail(stageFetch, err)
		return
	}
	if head == w.pushed {
		return
	}
	klog.FromContext(ctx).Info("The remote branch moved; its new commits are applied", "head", head.String())
	if err := w.moveTo(head); err != nil {
		w.fail(stageFetch, err)
	}
}

// foreignArrived is called after the worker moved to a head someone else
// pushed: a claimed target applies it (ForeignCommit) instead of sweeping
// or re-asserting the cluster over it, and its saves whose commits the head
// lost are dropped.
func (w *Worker) foreignArrived(t *target) {
	a := t.apply
	t.sweep = false
	if a.pending == "" || a.yields {
		a.pending, a.yields = ReasonForeignCommit, false
	}
	kept := a.waiting[:0]
	for _, s := range a.waiting {
		if holds, err := w.repo.Holds(w.head, s.commit, 10000); err == nil && !holds {
			s.done(ApplyResult{Reason: "CommitDropped", Settled: true, Message: fmt.Sprintf(
				"the branch no longer holds commit %.7s: someone rewrote it", s.commit)})
			continue
		}
		kept = append(kept, s)
	}
	clear(a.waiting[len(kept):])
	a.waiting = kept
}

// applyWake is when t's applier needs the next step.
func (a *applyState) wake(now time.Time, consider func(time.Time)) {
	switch {
	case a.inflight != nil:
		consider(now.Add(time.Second)) // follow it
	case a.pending != "":
		// Only the backoff needs a timer: whatever else holds a converge
		// back (a stream's initial state, an author, a barrier, a save's
		// window, a push) ends with an event that wakes the worker anyway.
		if a.retryAt.After(now) {
			consider(a.retryAt)
		}
	case !a.behindSince.IsZero() && a.cfg.CatchUpAfter > 0:
		consider(a.behindSince.Add(a.cfg.CatchUpAfter))
	}
	if a.cfg.Poll > 0 {
		consider(a.polled.Add(a.cfg.Poll))
	}
	if a.barrierToken != "" {
		consider(a.barrierDeadline)
	}
	if a.graceUntil.After(now) {
		consider(a.graceUntil) // the differences are judged once it closes
	}
}
