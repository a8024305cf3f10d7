package worker

import (
	"bytes"
	"fmt"
	"iter"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// What happens to a change once it reaches the worker: it waits for its
// author (resolvePending), is sealed when it holds credentials, and joins
// its author's window on the target.

// resolvePending hands every change whose author is known to its author's
// window, in order; a change waiting for its author holds back the later
// changes of the same object, not those of others.
func (w *Worker) resolvePending(t *target) error {
	now := w.clock.Now()
	t.retryAt = time.Time{}
	blocked := map[string]bool{}
	kept := t.pending[:0]
	for i := range t.pending {
		ch := &t.pending[i]
		if blocked[ch.Path] {
			kept = append(kept, *ch)
			continue
		}
		author, ready := w.committer, true
		var retryAt time.Time
		switch {
		case ch.author != nil:
			author = *ch.author
		case t.cfg.Authors != nil:
			author, ready, retryAt = t.cfg.Authors.Author(ch.Change, now)
		}
		if ready {
			ch.author = &author
		}
		if !ready {
			blocked[ch.Path] = true
			kept = append(kept, *ch)
			if t.retryAt.IsZero() || retryAt.Before(t.retryAt) {
				t.retryAt = retryAt
			}
			continue
		}
		if len(ch.Encrypt) > 0 && !ch.sealed {
			if !w.seal(t, &ch.Change) {
				continue
			}
			ch.sealed = true
		}
		if w.deferInitial(t, *ch) {
			continue
		}
		if w.echo(t, ch.Change, author) {
			continue
		}
		if err := w.addToWindow(t, ch.Change, author); err != nil {
			t.pending = append(kept, t.pending[i:]...) // keeps the author it resolved
			return err
		}
		if !ch.Snapshot {
			t.noteLiveEdit()
		}
	}
	clear(t.pending[len(kept):])
	t.pending = kept
	return nil
}

// seal replaces a document in clear that holds credentials by its sealed
// document, reusing what Git holds or the window already has when that
// holds the same values. false drops the change: the target does not seal,
// or sealing failed (which no retry mends; the plaintext is never logged).
func (w *Worker) seal(t *target, ch *document.Change) bool {
	if t.cfg.Seal == nil {
		metrics.WatchEvents.WithLabelValues(string(document.OutcomeSecretSkipped)).Inc()
		return false
	}
	if ch.Content == nil {
		return true // a delete has nothing to seal
	}
	var priors [][]byte
	if h, ok := w.index[ch.Path]; ok {
		if b, err := w.repo.ReadBlob(h); err == nil {
			priors = append(priors, b)
		}
	}
	if d, ok := t.desired[ch.Path]; ok && d.content != nil {
		priors = append(priors, d.content) // else Git's, read above
	}
	sealed, err := t.cfg.Seal.Seal(ch.Content, ch.Encrypt, priors...)
	if err != nil {
		metrics.Seals.WithLabelValues("failed").Inc()
		klog.Background().Error(err, "Cannot encrypt a document's credentials; it is not written", "gitTarget", t.cfg.Key, "object", ch.Desc)
		return false
	}
	outcome := "encrypted"
	if slices.ContainsFunc(priors, func(p []byte) bool { return bytes.Equal(p, sealed) }) {
		outcome = "kept"
	}
	metrics.Seals.WithLabelValues(outcome).Inc()
	ch.Content = sealed
	return true
}

// addToWindow makes a change part of its author's window. Another author's open
// window holding the same object commits first, so commits keep the
// cluster's order of that object's changes.
func (w *Worker) addToWindow(t *target, ch document.Change, author identity.Signature) error {
	for _, other := range sortedWindows(t) {
		if _, holds := other.paths[ch.Path]; holds && other.author != author {
			if err := w.commitWindow(t, other, "conflict"); err != nil {
				return err
			}
		}
	}
	if ch.Content == nil {
		delete(t.desired, ch.Path)
	} else {
		_ = w.hold(t, ch.Path, doc{content: ch.Content, desc: ch.Desc, id: idOfChange(ch), sealed: len(ch.Encrypt) > 0}) // bytes given: cannot fail
	}
	w.touch(t, author, ch.Path, ch.Desc, ch.Seen)
	return nil
}

// hold makes d the document to hold at p, keeping its bytes only when Git
// does not have them there. A d given by hash alone takes its bytes from the
// document it replaces or from the repository.
func (w *Worker) hold(t *target, p string, d doc) error {
	if d.content != nil {
		d.hash = gitrepo.BlobHash(d.content)
	}
	if w.index[p] == d.hash {
		d.content = nil
	} else if d.content == nil {
		if prev, ok := t.desired[p]; ok && prev.hash == d.hash && prev.content != nil {
			d.content = prev.content
		} else {
			b, err := w.repo.ReadBlob(d.hash)
			if err != nil {
				return fmt.Errorf("reading the document of %s: %w", p, err)
			}
			d.content = b
		}
	}
	t.desired[p] = d
	return nil
}

// keepBytes keeps, after the head's files changed at paths, the bytes of
// t's documents Git does not hold there, and drops those it does. The
// blobs dropped earlier are still in the repository here: only a repack
// after a push deletes what the branch stopped reaching.
func (w *Worker) keepBytes(t *target, paths iter.Seq[string]) {
	for p := range paths {
		d, ok := t.desired[p]
		if !ok || (d.content == nil) == (w.index[p] == d.hash) {
			continue
		}
		if err := w.hold(t, p, doc{hash: d.hash, desc: d.desc, id: d.id, sealed: d.sealed}); err != nil {
			// Only a broken repository loses a blob it held; the commit
			// that needs these bytes reports it (bytesOf).
			klog.Background().Error(err, "Keeping a document Git no longer holds", "gitTarget", t.cfg.Key, "object", d.desc)
		}
	}
}

// bytesOf is a document's content: its bytes, or Git's copy of them.
func (w *Worker) bytesOf(d doc) ([]byte, error) {
	if d.content != nil {
		return d.content, nil
	}
	return w.repo.ReadBlob(d.hash)
}

func (w *Worker) touch(t *target, author identity.Signature, p, desc string, seen time.Time) {
	now := w.clock.Now()
	win, ok := t.windows[author]
	if !ok {
		win = &window{author: author, opened: now, firstSeen: seen, paths: map[string]string{}}
		t.windows[author] = win
	}
	win.last = now
	win.paths[p] = desc
}

// heldByPerson says whether a window other than the committer's holds p.
func (w *Worker) heldByPerson(t *target, p string) bool {
	for author, win := range t.windows {
		if _, ok := win.paths[p]; ok && author != w.committer {
			return true
		}
	}
	return false
}

func sortedWindows(t *target) []*window {
	out := make([]*window, 0, len(t.windows))
	for _, win := range t.windows {
		out = append(out, win)
	}
	slices.SortFunc(out, func(a, b *window) int { return a.opened.Compare(b.opened) })
	return out
}
