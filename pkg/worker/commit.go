package worker

import (
	"fmt"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/kustomize"
	"reverser.dev/reverser/pkg/metrics"
)

// How a closed window becomes a commit: what it writes (layout documents,
// kustomize sources) and what the repository refuses, then the commit
// itself.

// windowWrite is what a closed window writes: layout documents (nil
// content deletes them) and the objects they hold, changes of kustomize
// sources, and the lines of the commit message.
type windowWrite struct {
	changes map[string][]byte
	known   map[string]kustomize.ID
	items   []sourced
	lines   []string
}

// writesOf decides what a closed window writes, and which of its changes the
// repository refuses (reported, and kept for a later try).
func (w *Worker) writesOf(t *target, win *window) (windowWrite, error) {
	changes := map[string][]byte{}
	var lines []string
	kustomized := w.kustomized(t)
	// flat: people lay the folder out themselves (sources.go).
	flat := !kustomized && w.flat(t)
	// The objects of the layout documents written, so that indexing them
	// needs no parsing.
	known := map[string]kustomize.ID{}
	var items []sourced
	chart := w.chart(t)
	for _, p := range sortedKeys(win.paths) {
		d, held := t.desired[p]
		if chart != "" {
			t.refused[p] = win.paths[p] + chart
			continue
		}
		if refusal := w.sealedElsewhere(t, p, d, held); refusal != "" {
			t.refused[p] = win.paths[p] + refusal
			continue
		}
		if refusal := w.maybeTwice(t, p, held, kustomized); refusal != "" {
			t.refused[p] = win.paths[p] + refusal
			continue
		}
		// Credentials are never written into kustomize sources, which would
		// hold them in clear: a sealed document, and any Secret, keeps a
		// document of its own.
		if id, ok := w.idOf(t, p); ok && !d.sealed && !isSecret(id) && (kustomized || w.sourced(t, p, id, held, flat)) {
			ch := kustomize.Change{ID: id, Old: t.inSources[p], NewPath: w.newPath(t, p, id, kustomized || flat)}
			if held {
				b, err := w.bytesOf(d)
				if err != nil {
					return windowWrite{}, &LocalError{Err: err}
				}
				ch.New = b
			}
			items = append(items, sourced{layout: p, change: ch})
			continue
		}
		verb := ""
		switch cur, inGit := w.index[p]; {
		case held && !inGit:
			verb = "create"
		case held && cur != d.hash:
			verb = "update"
		case !held && inGit:
			verb = "delete"
		default:
			continue // the document in Git is already right
		}
		if held {
			b, err := w.bytesOf(d)
			if err != nil {
				return windowWrite{}, &LocalError{Err: err}
			}
			changes[p] = b
			if d.id != (kustomize.ID{}) {
				known[p] = d.id
			}
		} else {
			changes[p] = nil
			delete(t.ids, p)
		}
		lines = append(lines, fmt.Sprintf("- %s %s", verb, win.paths[p]))
	}
	if len(items) > 0 {
		edits, more, err := w.planSources(t, win, items, kustomized)
		if err != nil {
			return windowWrite{}, &LocalError{Err: err}
		}
		maps.Copy(changes, edits)
		lines = append(lines, more...)
	}
	w.reportRefusals(t)
	if len(lines) == 0 && len(changes) > 0 {
		lines = append(lines, "- write what the cluster holds")
	}
	return windowWrite{changes: changes, known: known, items: items, lines: lines}, nil
}

// commitWindow turns a closed window into a commit of what actually changed.
// The window, and its save, are forgotten only once the commit exists: after
// an error both are still there for the next try.
func (w *Worker) commitWindow(t *target, win *window, reason string) error {
	ww, err := w.writesOf(t, win)
	if err != nil {
		return err
	}
	changes, known, items, lines := ww.changes, ww.known, ww.items, ww.lines
	// The window is done: what it wrote into sources is the state before
	// the next change of those objects.
	done := func() {
		delete(t.windows, win.author)
		w.noteWritten(t, items)
	}
	if s := win.save; s != nil {
		if len(changes) == 0 && !s.Empty {
			done()
			t.finishSave(s)
			metrics.Windows.WithLabelValues("empty").Inc()
			w.endSave(s, SaveResult{Outcome: SaveNothingToCommit,
				Message: "the window held no change that Git does not have already; spec.whenNothingToCommit: CommitEmpty commits anyway"})
			return nil
		}
		if err := w.commit(t.cfg.Key, win.author, changes, known, saveMessage(s, lines), win.firstSeen, s); err != nil {
			return err
		}
		done()
		t.finishSave(s)
		metrics.Windows.WithLabelValues(reason).Inc()
		return nil
	}
	if len(changes) > 0 {
		if err := w.commit(t.cfg.Key, win.author, changes, known, commitMessage(t.cfg.Path, lines), win.firstSeen, nil); err != nil {
			return err
		}
	}
	done()
	metrics.Windows.WithLabelValues(map[bool]string{true: reason, false: "empty"}[len(changes) > 0]).Inc()
	return nil
}

func isSecret(id kustomize.ID) bool { return id.Group == "" && id.Kind == "Secret" }

// sealedElsewhere refuses a sealed document whose object Git already holds
// in another file under the target's path (a SOPS file made by hand): a
// copy at its layout path would give appliers the object twice, and that
// file may hold other documents. "" writes it at its layout path.
func (w *Worker) sealedElsewhere(t *target, p string, d doc, held bool) string {
	if !held || !d.sealed {
		return ""
	}
	id, ok := w.idOf(t, p)
	if !ok || w.docs.holds(p, id, t.cfg.Namespace) {
		delete(t.refused, p)
		return ""
	}
	if q := w.docs.elsewhere(id, t.cfg.Path, p, t.cfg.Namespace); q != "" {
		return fmt.Sprintf(" is already in %s, which Reverser does not rewrite encrypted: move it to %s (git mv) to have it mirrored", q, p)
	}
	delete(t.refused, p)
	return ""
}

// chart refuses every write into a Helm chart's folder (it holds
// Chart.yaml): its objects come from templates Helm renders with values,
// and a document written beside them would be one Helm never reads. ""
// when the folder is not a chart.
func (w *Worker) chart(t *target) string {
	file := path.Join(t.cfg.Path, "Chart.yaml")
	if _, ok := w.index[file]; !ok {
		return ""
	}
	return fmt.Sprintf(" is not written: %s makes the folder a Helm chart, whose objects Helm renders from templates and values, "+
		"which are not written back; mirror the HelmRelease or Application that installs the chart instead, or point the GitTarget "+
		"at a folder of manifests", file)
}

// maybeTwice refuses a document for a folder that is not kustomized, whose
// applier's namespace is not known, and that holds a document of the
// object's kind and name without a namespace: written, it may be a second
// copy of that object (feature R2). "" writes it, and drops an earlier
// refusal of p, which the rest of the commit decides again.
func (w *Worker) maybeTwice(t *target, p string, held, kustomized bool) string {
	if held && t.cfg.Namespace == "" && !kustomized {
		id, ok := w.idOf(t, p)
		if ok && !w.docs.holds(p, id, "") && w.docs.elsewhere(id, t.cfg.Path, p, "") == "" {
			if q := w.docs.unnamespaced(id, t.cfg.Path, p); q != "" {
				return fmt.Sprintf(" may already be in %s, which names no namespace: set the GitTarget's spec.targetNamespace to the "+
					"namespace its applier puts documents without one into", q)
			}
		}
	}
	delete(t.refused, p)
	return ""
}

func commitMessage(base string, lines []string) string {
	where := base
	if where == "" {
		where = "the repository root"
	}
	subject := fmt.Sprintf("Reverser: %s", strings.TrimPrefix(lines[0], "- "))
	if len(lines) > 1 {
		subject = fmt.Sprintf("Reverser: %d changes in %s", len(lines), where)
	}
	return subject + "\n\n" + strings.Join(lines, "\n") + "\n"
}

// commit writes changes; known names the objects of some of them, for the
// document index.
func (w *Worker) commit(key string, author identity.Signature, changes map[string][]byte, known map[string]kustomize.ID, message string, seen time.Time,
	save *SaveRequest) error {
	start := w.clock.Now()
	if w.commitErr != nil {
		if err := w.commitErr(); err != nil {
			return err
		}
	}
	sha, err := w.repo.Commit(w.head, changes, gitrepo.CommitInfo{Author: author, Committer: w.committer, Message: message, When: start,
		Signer: w.signer})
	if err != nil {
		return err
	}
	metrics.CommitSeconds.Observe(w.clock.Now().Sub(start).Seconds())
	metrics.Commits.Inc()
	w.head = sha
	blobs := make(map[string]plumbing.Hash, len(changes))
	for p, c := range changes {
		if c == nil {
			delete(w.index, p)
			blobs[p] = plumbing.ZeroHash
		} else {
			w.index[p] = gitrepo.BlobHash(c)
			blobs[p] = w.index[p]
		}
	}
	if t := w.targets[key]; t != nil {
		w.keepBytes(t, maps.Keys(changes))
	}
	w.docs.wrote(changes, known)
	w.out.unpushed = append(w.out.unpushed, unpushedCommit{target: key, author: author, message: message, changes: blobs, seen: seen,
		sha: sha.String(), save: save})
	w.reporter.Committed(key, sha.String(), start)
	return nil
}
