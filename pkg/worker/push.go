package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// How commits leave: pushes in batches, and, after a rejection, a fetch, a
// reset to the remote's head and a replay of the cluster's state; failures
// that stop the worker's local clone are LocalErrors.

// unpushedCommit is a commit the remote has not taken yet.
type unpushedCommit struct {
	target  string
	author  identity.Signature
	message string
	// changes are the blobs the commit wrote (the zero hash: deleted), not
	// their contents: an outage holds little memory, and a replay reads
	// them back from the local repository.
	changes map[string]plumbing.Hash
	seen    time.Time
	sha     string
	save    *SaveRequest
}

// outbox is what the remote has not taken yet and how pushing it fares.
// Only the worker's goroutine touches it, through push.go's steps (and
// the saves that name its last failure).
type outbox struct {
	// unpushed are the commits the remote has not taken yet: a rejected
	// push replays them, authors and messages kept, on the remote's head.
	unpushed []unpushedCommit
	// refused are rejected commits not replayed yet, and reassert says the
	// cluster's state is still to be re-asserted after a replay: a replay
	// that fails goes on from there at the next step.
	refused  []unpushedCommit
	reassert bool
	// prior is the local head's files before a fetch brought foreign
	// commits, until they are re-asserted against.
	prior   map[string]plumbing.Hash
	retryAt time.Time
	backoff time.Duration
	// lastErr is the last failure, until a push succeeds: a save that
	// gives up names it. outage is the stage of the first one.
	lastErr error
	outage  string
	// fetched: the worker has fetched once, so a head that differs from
	// pushed afterwards is someone else's.
	fetched bool
	// unpacked counts commits pushed since the last repack; repackAfter of
	// them make the next push repack the local repository.
	unpacked, repackAfter int
}

func (w *Worker) push(ctx context.Context) {
	start := w.clock.Now()
	err := w.repo.Push(ctx, w.head)
	metrics.PushSeconds.Observe(w.clock.Now().Sub(start).Seconds())
	switch {
	case err == nil:
		metrics.Pushes.WithLabelValues("ok").Inc()
		now := w.clock.Now()
		for _, c := range w.out.unpushed {
			metrics.EditToPush.Observe(now.Sub(c.seen).Seconds())
			if c.save != nil {
				w.endSave(c.save, SaveResult{Outcome: SaveCommitted, Commit: c.sha})
				if c.save.Applied != nil {
					w.followApply(w.targets[c.target], c.sha, c.save.CatchUp, c.save.Applied)
				}
			}
		}
		w.out.unpacked += len(w.out.unpushed)
		w.out.unpushed = nil
		w.pushed, w.out.backoff, w.out.lastErr = w.head, 0, nil
		w.pushedForAppliers(now)
		if w.out.unpacked >= w.out.repackAfter {
			// Everything worth keeping is on the branch now.
			if err := w.repo.Repack(); err != nil {
				klog.FromContext(ctx).Error(err, "Repacking the local repository")
			}
			w.out.unpacked = 0
		}
		if w.out.outage != "" {
			metrics.Recoveries.WithLabelValues(w.out.outage).Inc()
			w.out.outage = ""
		}
		w.reporter.Pushed(w.sortedTargets(), w.head.String(), now)
	case errors.Is(err, gitrepo.ErrRejected):
		metrics.Pushes.WithLabelValues("rejected").Inc()
		klog.FromContext(ctx).Info("Remote branch moved; fetching and replaying the cluster's state")
		if w.out.outage == "" {
			w.out.outage = "rejected"
		}
		w.reporter.Rejected(w.sortedTargets())
		// What was replayed before and refused again goes first.
		w.out.refused = append(w.out.unpushed, w.out.refused...)
		// Not ready until fetched: replaying on the refused head would find
		// nothing to do.
		w.out.unpushed, w.out.reassert, w.ready = nil, true, false
		if err := w.reset(ctx); err != nil {
			w.fail(stageFetch, err)
			return
		}
		if err := w.replay(); err != nil {
			w.failCommit(err)
		}
	case errors.Is(err, gitrepo.ErrFenced):
		// Not sent: this replica may not lead any more. Held and retried
		// until the process gives up leading, and not reported: status is
		// the leader's to write.
		metrics.Pushes.WithLabelValues("fenced").Inc()
		klog.FromContext(ctx).Info("Push not sent: this replica may not lead", "reason", err)
		w.backOff(stagePush, err)
	default:
		metrics.Pushes.WithLabelValues("error").Inc()
		w.fail(stagePush, err)
	}
}

// reset makes the remote head ours again: after start and after a rejection.
func (w *Worker) reset(ctx context.Context) error {
	head, err := w.repo.Fetch(ctx)
	if err != nil {
		return err
	}
	return w.moveTo(head)
}

// moveTo makes head, fetched, the worker's base. A head someone else pushed
// is re-asserted against, except by claimed targets, whose applier applies
// it instead.
func (w *Worker) moveTo(head plumbing.Hash) error {
	index, err := w.repo.Files(head)
	if err != nil {
		return err
	}
	moved := w.out.fetched && head != w.pushed
	if moved && w.out.prior == nil {
		w.out.prior = w.index // what Git held before the foreign commits: the map is no longer written once w.index is the fetched one
	}
	w.head, w.pushed, w.index, w.ready, w.out.fetched = head, head, index, true, true
	w.docs.rebuild(index, w.repo.ReadBlob)
	w.pruneBlobs()
	for _, t := range w.targets {
		w.keepBytes(t, maps.Keys(t.desired))
	}
	if moved {
		w.out.reassert = true
	}
	for _, t := range w.targets {
		t.sweep = len(t.synced) > 0
		if moved && t.apply != nil {
			w.foreignArrived(t)
		}
	}
	return nil
}

// replay rebuilds the refused commits on the fetched head, each with its
// author and message, leaving out what the head already has; then every
// target's state is re-asserted, by the committer, against whatever the
// foreign commits changed. A commit that fails leaves the rest in refused,
// and the next step goes on from there.
func (w *Worker) replay() error {
	for len(w.out.refused) > 0 {
		c := w.out.refused[0]
		if _, ok := w.targets[c.target]; !ok {
			if c.save != nil {
				w.endSave(c.save, SaveResult{Outcome: SaveTargetGone, Message: "the GitTarget stopped being mirrored before its save was pushed"})
			}
			w.out.refused = w.out.refused[1:]
			continue
		}
		changes := map[string][]byte{}
		for p, blob := range c.changes {
			cur, inGit := w.index[p]
			switch {
			case blob.IsZero() && inGit:
				changes[p] = nil
			case !blob.IsZero() && cur != blob:
				content, err := w.repo.ReadBlob(blob)
				if err != nil {
					// Retrying cannot bring a lost object back: the
					// re-assertion below writes the cluster's document,
					// by the committer.
					klog.Background().Error(err, "Reading a refused commit's document; it is re-asserted instead", "path", p)
					continue
				}
				changes[p] = append([]byte{}, content...) // never nil: nil deletes
			}
		}
		if len(changes) == 0 && (c.save == nil || !c.save.Empty) {
			if c.save != nil {
				w.endSave(c.save, SaveResult{Outcome: SaveNothingToCommit, Message: "a foreign commit already made the same changes"})
			}
			w.out.refused = w.out.refused[1:]
			continue
		}
		if err := w.commit(c.target, c.author, changes, nil, c.message, c.seen, c.save); err != nil {
			return fmt.Errorf("replaying a refused commit: %w", err)
		}
		w.out.refused = w.out.refused[1:]
	}
	if w.out.reassert {
		for _, key := range w.sortedTargets() {
			if t := w.targets[key]; t.apply == nil { // else its applier puts the foreign commits on the cluster
				if err := w.reassert(t); err != nil {
					return err
				}
			}
		}
		w.out.reassert, w.out.prior = false, nil
	}
	return nil
}

// reassert puts t's documents that foreign commits changed back as the
// cluster holds them, in the committer's window, which the next step
// closes at once: the next push leaves the folder equal to the cluster.
// A document in a person's open window is theirs to commit; until their
// window closes, Git gets back what it held before the foreign commits.
func (w *Worker) reassert(t *target) error {
	now := w.clock.Now()
	restore := map[string][]byte{}
	var lines []string
	for _, p := range sortedKeys(t.desired) {
		d := t.desired[p]
		if w.index[p] == d.hash {
			continue
		}
		if !w.heldByPerson(t, p) {
			w.touch(t, w.committer, p, d.desc, now)
			continue
		}
		if old, ok := w.out.prior[p]; ok && old != w.index[p] {
			b, err := w.repo.ReadBlob(old)
			if err != nil {
				klog.Background().Error(err, "Reading a document as it was before a foreign commit; its window writes it", "path", p)
				continue
			}
			restore[p] = append([]byte{}, b...)
			lines = append(lines, "- restore "+d.desc)
		}
	}
	t.reasserting = true
	if len(restore) == 0 {
		return nil
	}
	if err := w.commit(t.cfg.Key, w.committer, restore, nil, commitMessage(t.cfg.Path, lines), now, nil); err != nil {
		return fmt.Errorf("restoring documents a foreign commit changed: %w", err)
	}
	return nil
}

// LocalError is a failure of the local repository (a commit that could not
// be written: the data directory full or broken), not of the remote.
type LocalError struct{ Err error }

func (e *LocalError) Error() string { return e.Err.Error() }
func (e *LocalError) Unwrap() error { return e.Err }

// failCommit backs off after a local commit failed: windows wait until
// then, with their saves, and are committed as they are on the next try.
func (w *Worker) failCommit(err error) {
	w.fail(stageCommit, &LocalError{Err: err})
	w.commitRetryAt = w.out.retryAt
}

// Stages a failure happens in, for the recoveries metric.
const (
	stageFetch  = "fetch"
	stageCommit = "commit"
	stagePush   = "push"
)

// fail backs off after an error in stage; the next successful push counts
// as a recovery from the outage's first failure.
func (w *Worker) fail(stage string, err error) {
	w.backOff(stage, err)
	w.reporter.Failed(w.sortedTargets(), err)
}

// backOff holds the next attempt back, longer after each failure in a row.
func (w *Worker) backOff(stage string, err error) {
	if w.out.outage == "" {
		w.out.outage = stage
	}
	if w.out.backoff == 0 {
		w.out.backoff = 500 * time.Millisecond
	} else {
		w.out.backoff = min(2*w.out.backoff, 30*time.Second)
	}
	w.out.retryAt = w.clock.Now().Add(w.out.backoff)
	w.out.lastErr = err
}
