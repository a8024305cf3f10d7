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
	"reverser.dev/reverser/pkg/metrics"
)

// How commits leave: pushes in batches, and, after a rejection, a fetch, a
// reset to the remote's head and a replay of the cluster's state; failures
// that stop the worker's local clone are LocalErrors.

func (w *Worker) push(ctx context.Context) {
	start := w.clock.Now()
	err := w.repo.Push(ctx, w.head)
	metrics.PushSeconds.Observe(w.clock.Now().Sub(start).Seconds())
	switch {
	case err == nil:
		metrics.Pushes.WithLabelValues("ok").Inc()
		now := w.clock.Now()
		for _, c := range w.unpushed {
			metrics.EditToPush.Observe(now.Sub(c.seen).Seconds())
			if c.save != nil {
				w.endSave(c.save, SaveResult{Outcome: SaveCommitted, Commit: c.sha})
				if c.save.Applied != nil {
					w.followApply(w.targets[c.target], c.sha, c.save.CatchUp, c.save.Applied)
				}
			}
		}
		w.unpacked += len(w.unpushed)
		w.unpushed = nil
		w.pushed, w.backoff, w.lastErr = w.head, 0, nil
		w.pushedForAppliers(now)
		if w.unpacked >= w.repackAfter {
			// Everything worth keeping is on the branch now.
			if err := w.repo.Repack(); err != nil {
				klog.FromContext(ctx).Error(err, "Repacking the local repository")
			}
			w.unpacked = 0
		}
		if w.outage != "" {
			metrics.Recoveries.WithLabelValues(w.outage).Inc()
			w.outage = ""
		}
		w.reporter.Pushed(w.sortedTargets(), w.head.String(), now)
	case errors.Is(err, gitrepo.ErrRejected):
		metrics.Pushes.WithLabelValues("rejected").Inc()
		klog.FromContext(ctx).Info("Remote branch moved; fetching and replaying the cluster's state")
		if w.outage == "" {
			w.outage = "rejected"
		}
		// What was replayed before and refused again goes first.
		w.refused = append(w.unpushed, w.refused...)
		// Not ready until fetched: replaying on the refused head would find
		// nothing to do.
		w.unpushed, w.reassert, w.ready = nil, true, false
		if err := w.reset(ctx); err != nil {
			w.fail(stageFetch, err)
			return
		}
		if err := w.replay(); err != nil {
			w.failCommit(err)
		}
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
	moved := w.fetched && head != w.pushed
	w.head, w.pushed, w.index, w.ready, w.fetched = head, head, index, true, true
	w.docs.rebuild(index, w.repo.ReadBlob)
	w.pruneBlobs()
	for _, t := range w.targets {
		w.keepBytes(t, maps.Keys(t.desired))
	}
	if moved {
		w.reassert = true
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
	for len(w.refused) > 0 {
		c := w.refused[0]
		if _, ok := w.targets[c.target]; !ok {
			if c.save != nil {
				w.endSave(c.save, SaveResult{Outcome: SaveTargetGone, Message: "the GitTarget stopped being mirrored before its save was pushed"})
			}
			w.refused = w.refused[1:]
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
			w.refused = w.refused[1:]
			continue
		}
		if err := w.commit(c.target, c.author, changes, nil, c.message, c.seen, c.save); err != nil {
			return fmt.Errorf("replaying a refused commit: %w", err)
		}
		w.refused = w.refused[1:]
	}
	if w.reassert {
		now := w.clock.Now()
		for _, key := range w.sortedTargets() {
			t := w.targets[key]
			if t.apply != nil {
				continue // its applier puts the foreign commits on the cluster
			}
			for p, d := range t.desired {
				if w.index[p] != d.hash {
					w.touch(t, w.committer, p, d.desc, now)
				}
			}
		}
		w.reassert = false
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
	w.commitRetryAt = w.retryAt
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
	if w.outage == "" {
		w.outage = stage
	}
	if w.backoff == 0 {
		w.backoff = 500 * time.Millisecond
	} else {
		w.backoff = min(2*w.backoff, 30*time.Second)
	}
	w.retryAt = w.clock.Now().Add(w.backoff)
	w.lastErr = err
	w.reporter.Failed(w.sortedTargets(), err)
}
