package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// Outcomes of a save.
const (
	SaveCommitted       = "Committed"
	SaveNoWindow        = "NoWindow"
	SaveNothingToCommit = "NothingToCommit"
	SaveInProgress      = "SaveInProgress"
	SaveTargetGone      = "GitTargetGone"
	// SaveFailed: the save's commit was not made, or not pushed, by
	// GiveUpAt. Its changes are not lost: the worker keeps committing and
	// pushing them, without the request.
	SaveFailed = "SaveFailed"
)

// RequestTrailer names the CommitRequest a commit saved, so a restarted
// controller finds a save it made before it could report it.
const RequestTrailer = "Reverser-Commit-Request"

// SaveRequest asks a worker to commit an author's window with a message.
type SaveRequest struct {
	// ID identifies the request (its uid); it goes into the commit's trailer.
	ID     string
	Target string
	Author identity.Signature
	// Message replaces the generated subject; the list of changes follows.
	Message string
	// Next waits for the author's next window instead of the open one.
	Next bool
	// Empty commits an empty commit with the message when nothing changed.
	Empty bool
	// Collect keeps the window open this long after attaching, so the
	// author's edits still on their way join it.
	Collect time.Duration
	// Settle, when positive, closes the window sooner: once every change
	// the worker holds for the target is attributed (none waits for its
	// audit fact, which might be the author's) and Settle has passed since
	// the save was handed over, the time an edit made just before the save
	// takes to come from the watch.
	Settle time.Duration
	// Deadline ends the wait for a window: NoWindow.
	Deadline time.Time
	// GiveUpAt ends the save SaveFailed when its commit is not on the
	// remote by then (a commit or push failing for a while); zero waits as
	// long as it takes.
	GiveUpAt time.Time
	// Done hears the outcome, from the worker's goroutine; it must not block.
	Done func(SaveResult)
	// Applied, when set, hears how the apply of the pushed commit goes,
	// from the worker's goroutine; it must not block. CatchUp asks a
	// converge for it right after the push.
	Applied func(ApplyResult)
	CatchUp bool

	queued time.Time
}

// SaveResult is how a save ended. Commit is set for Committed, once pushed.
type SaveResult struct {
	Outcome string
	Commit  string
	Branch  string
	Message string
}

// Save hands a save to the worker. It never blocks, so it may be called from
// a FindSave callback, on the worker's own goroutine.
func (w *Worker) Save(_ context.Context, req SaveRequest) {
	w.post(func() {
		t, ok := w.targets[req.Target]
		if !ok {
			req.Done(SaveResult{Outcome: SaveTargetGone, Message: "the GitTarget is not mirrored by this worker any more"})
			return
		}
		if w.adopt(t, req) {
			return
		}
		for _, s := range t.saves {
			if s.Author == req.Author {
				req.Done(SaveResult{Outcome: SaveInProgress, Message: fmt.Sprintf(
					"another save of %s on this GitTarget is still waiting for or collecting its window; try again once it finishes",
					req.Author.Name)})
				return
			}
		}
		req.queued = w.clock.Now()
		// The next step attaches it, after the changes already queued.
		t.saves = append(t.saves, &req)
	})
}

// adopt hands an earlier save of the same request (waiting, collecting, or
// committed and not pushed yet) the new request's callbacks: the front end
// that made the earlier one stopped (a source cluster's watch restarted)
// and the new one waits for the outcome. Never two saves of one request.
func (w *Worker) adopt(t *target, req SaveRequest) bool {
	for _, s := range t.saves {
		if s.ID == req.ID {
			s.Done, s.Applied = req.Done, req.Applied
			return true
		}
	}
	for _, c := range slices.Concat(w.out.unpushed, w.out.refused) {
		if c.save != nil && c.save.ID == req.ID {
			c.save.Done, c.save.Applied = req.Done, req.Applied
			return true
		}
	}
	return false
}

// attachSaves gives waiting saves their windows, and ends those whose wait
// is over.
func (w *Worker) attachSaves(t *target) {
	now := w.clock.Now()
	kept := t.saves[:0]
	for _, s := range t.saves {
		win := t.windows[s.Author]
		switch {
		case win != nil && win.save == s:
			kept = append(kept, s) // collecting
		case win != nil && win.save == nil && (!s.Next || win.opened.After(s.queued)):
			win.save = s
			win.closeAt = now.Add(s.Collect)
			kept = append(kept, s)
		case !s.Next && win == nil && len(t.pending) == 0 && !now.Before(s.queued.Add(s.Settle)):
			// Nothing open and nothing on its way, once an edit made just
			// before the save has had the time to come from the watch
			// (Settle): no need to wait longer.
			w.noWindow(t, s, s.Author.Name+" has no open changes on this GitTarget")
		case !now.Before(s.Deadline):
			w.noWindow(t, s, fmt.Sprintf("no window of %s opened within spec.window.attachTimeout", s.Author.Name))
		default:
			kept = append(kept, s)
		}
	}
	clear(t.saves[len(kept):])
	t.saves = kept
}

// settled says whether a collecting save may close before its collect
// delay: nothing waits for its author, and the settle time has passed.
func (t *target) settled(s *SaveRequest, now time.Time) bool {
	return s.Settle > 0 && len(t.pending) == 0 && !now.Before(s.queued.Add(s.Settle))
}

// noWindow ends a save that found no window: with Empty, as an empty commit
// carrying the message.
func (w *Worker) noWindow(t *target, s *SaveRequest, why string) {
	if !s.Empty {
		w.endSave(s, SaveResult{Outcome: SaveNoWindow, Message: why})
		return
	}
	if err := w.commit(t.cfg.Key, s.Author, map[string][]byte{}, nil, saveMessage(s, nil), w.clock.Now(), s); err != nil {
		w.endSave(s, SaveResult{Outcome: SaveNoWindow, Message: "the empty commit failed: " + err.Error()})
	}
}

// expireSaves ends SaveFailed the saves whose commit is not on the remote by
// their GiveUpAt, naming the error that holds them back. Their windows and
// commits stay: the changes are committed and pushed without the request.
func (w *Worker) expireSaves(now time.Time) {
	due := func(s *SaveRequest) bool { return s != nil && !s.GiveUpAt.IsZero() && !now.Before(s.GiveUpAt) }
	why := "no error was reported"
	if w.out.lastErr != nil {
		why = w.out.lastErr.Error()
	}
	for _, key := range w.sortedTargets() {
		t := w.targets[key]
		kept := t.saves[:0]
		for _, s := range t.saves {
			if !due(s) {
				kept = append(kept, s)
				continue
			}
			if win := t.windows[s.Author]; win != nil && win.save == s {
				win.save = nil // closes on silence or max age, as any window
			}
			metrics.SaveFailures.WithLabelValues("commit").Inc()
			w.endSave(s, SaveResult{Outcome: SaveFailed, Message: fmt.Sprintf(
				"the save was not committed in time: %s; its changes stay open and are committed once that clears", why)})
		}
		clear(t.saves[len(kept):])
		t.saves = kept
	}
	for _, list := range [][]unpushedCommit{w.out.unpushed, w.out.refused} {
		w.expireCommitted(list, due, why)
	}
}

// expireCommitted ends the due saves of commits made but not on the remote.
func (w *Worker) expireCommitted(list []unpushedCommit, due func(*SaveRequest) bool, why string) {
	for i := range list {
		c := &list[i]
		if !due(c.save) {
			continue
		}
		metrics.SaveFailures.WithLabelValues("push").Inc()
		w.endSave(c.save, SaveResult{Outcome: SaveFailed, Message: fmt.Sprintf(
			"committed as %.7s but not pushed in time: %s; Reverser keeps pushing it, and its trailer %s: %s finds it once pushed",
			c.sha, why, RequestTrailer, c.save.ID)})
		c.save = nil
	}
}

func (w *Worker) endSave(s *SaveRequest, r SaveResult) {
	r.Branch = w.repo.Branch()
	s.Done(r)
}

// finishSave removes a save from its target once its window has committed.
func (t *target) finishSave(s *SaveRequest) {
	for i, x := range t.saves {
		if x == s {
			t.saves = append(t.saves[:i], t.saves[i+1:]...)
			return
		}
	}
}

// saveMessage is the commit message of a saved window: the request's
// message, the generated list of changes, and the trailer.
func saveMessage(s *SaveRequest, lines []string) string {
	msg := strings.TrimRight(withoutFormatCharacters(s.Message), "\n") + "\n"
	if len(lines) > 0 {
		msg += "\n" + strings.Join(lines, "\n") + "\n"
	}
	return msg + "\n" + RequestTrailer + ": " + s.ID + "\n"
}

// FindSave looks for the commit that saved request id among the branch's
// recent commits, for a controller resuming a save it claimed before a
// restart. done hears the sha, or "" when there is none, on the worker's
// goroutine. FindSave never blocks.
func (w *Worker) FindSave(ctx context.Context, id string, done func(sha string, err error)) {
	w.post(func() {
		if !w.ready {
			if err := w.reset(ctx); err != nil {
				done("", err)
				return
			}
		}
		sha, err := w.repo.FindTrailer(w.head, RequestTrailer+": "+id, 1000)
		done(sha, err)
	})
}

// withoutFormatCharacters drops the Unicode format characters (Cf) of a
// requester's message but the zero-width joiner emoji need: a
// right-to-left override or an invisible character would make a commit
// message read otherwise than it is in a review (#27, finding 8).
func withoutFormatCharacters(msg string) string {
	return strings.Map(func(r rune) rune {
		if r != '\u200d' && unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, msg)
}
