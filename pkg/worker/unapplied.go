package worker

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/kustomize"
)

// What Git holds that the cluster lacks, for a target an applier applies
// (feature R3). Such a target is never swept, so a document the cluster
// lacks stays in Git until somebody deletes the object; the GitTarget is
// not Ready while one does, and says which and why (the claim not held
// yet, the Startup converge still to come, the applier's failure). The
// worker's goroutine owns all of it.

// deferInitial holds back an initial-state change of an object the
// applier wrote last, until the applier's first converge since the target
// started has ended: the cluster may hold an older revision of the branch
// than Git (or objects Git no longer holds, which the apply prunes), and
// mirroring it would revert Git. Any other change of the object replaces
// the one held back, being newer.
func (w *Worker) deferInitial(t *target, ch pendingChange) bool {
	if t.adopted || !t.cfg.Applied || t.cfg.AppliedBy == "" || !ch.Snapshot || ch.Manager != t.cfg.AppliedBy {
		delete(t.deferred, ch.Path)
		return false
	}
	t.deferred[ch.Path] = ch
	return true
}

// releaseDeferred hands the changes held back to the target once the
// applier's first converge ended (applied or failed) and its apply window
// closed: what the cluster still holds of them then is its state, judged
// as any initial state (an echo of Git, a Repair, or a document to write).
// A change still waiting for its author is newer and wins.
func (w *Worker) releaseDeferred(t *target) {
	if t.adopted {
		return
	}
	if a := t.apply; t.cfg.Applied && (a == nil || !a.ended || a.inflight != nil || a.windowOpen(w.clock.Now())) {
		return
	}
	t.adopted = t.cfg.Applied
	for _, p := range sortedKeys(t.deferred) {
		if slices.ContainsFunc(t.pending, func(q pendingChange) bool { return q.Path == p }) {
			continue
		}
		ch := t.deferred[p]
		t.seq++
		ch.seq = t.seq
		t.pending = append(t.pending, ch)
	}
	clear(t.deferred)
}

// unappliedShown bounds the objects a report names; the rest are counted.
const unappliedShown = 5

// reportUnapplied tells the reporter, when it changed, which objects of
// t's folder the cluster lacks. It judges only a settled state: every
// stream's initial state delivered, no change waiting or uncommitted, no
// converge running nor its apply window open (the applier's writes are
// still arriving).
func (w *Worker) reportUnapplied(t *target) {
	if !t.cfg.Applied || !w.ready || len(t.cfg.Scopes) == 0 || !allSynced(t) || len(t.pending) > 0 || len(t.windows) > 0 {
		return // without a stream nothing is known of the cluster
	}
	why := "nothing applies the branch yet: the applier claim the GitTarget names is not held (see the claim's status)"
	if a := t.apply; a != nil {
		// The apply window's writes are judged first; a failure is named
		// at once, its retries' windows would hide it.
		if a.inflight != nil || (a.failure == "" && a.windowOpen(w.clock.Now())) {
			return
		}
		switch {
		case a.failure != "":
			why = "the applier's last converge failed: " + a.failure
		case !a.known:
			why = "the applier's first converge has not applied the branch yet"
		default:
			why = fmt.Sprintf("the applier applied %.7s without them: see the applier's own status (a path it does not read, a failing apply, an object it prunes)", a.applied)
		}
	}
	at := fmt.Sprintf("%s %d %s", w.head, t.seq, why)
	if at == t.unappliedAt {
		return
	}
	t.unappliedAt = at
	missing, err := w.unapplied(t)
	if err != nil {
		// The folder does not render: its writes are refused by name
		// already, which says more than this could.
		klog.Background().V(2).Info("Cannot tell what the cluster lacks", "gitTarget", t.cfg.Key, "err", err.Error())
		missing = nil
	}
	msg := ""
	if len(missing) > 0 {
		shown := missing[:min(len(missing), unappliedShown)]
		msg = fmt.Sprintf("Git holds %d object(s) the cluster lacks: %s", len(missing), strings.Join(shown, ", "))
		if more := len(missing) - len(shown); more > 0 {
			msg += fmt.Sprintf(" and %d more", more)
		}
		msg += "; " + why
	}
	if msg == t.unapplied && t.unappliedSent {
		return
	}
	t.unapplied, t.unappliedSent = msg, true
	klog.Background().V(2).Info("Compared the folder with the cluster", "gitTarget", t.cfg.Key, "missing", len(missing),
		"namespace", t.cfg.Namespace, "kinds", len(t.cfg.Kinds))
	w.reporter.Unapplied(t.cfg.Key, msg)
}

// unapplied names, sorted, the objects of t's folder that t mirrors and
// the cluster lacks: a kustomized folder's render, else every document of
// the folder's files.
func (w *Worker) unapplied(t *target) ([]string, error) {
	ns := t.cfg.Namespace
	live := map[kustomize.ID]bool{}
	for _, d := range t.desired {
		if d.id != (kustomize.ID{}) {
			live[d.id.Key(ns)] = true
		}
	}
	for _, ch := range t.deferred {
		if id := idOfChange(ch.Change); id != (kustomize.ID{}) {
			live[id.Key(ns)] = true // held back, but on the cluster
		}
	}
	var missing []string
	lacks := func(id kustomize.ID) {
		if w.mirrors(t, id) && !live[id.Key(ns)] {
			missing = append(missing, id.String())
		}
	}
	if w.kustomized(t) {
		files, err := w.sourceFiles(t, nil, true)
		if err != nil {
			return nil, err
		}
		objs, err := t.planner.Objects(files, t.cfg.Path)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			lacks(o.ID)
		}
	} else {
		for p := range w.index {
			if !under(p, t.cfg.Path) {
				continue
			}
			if w.layoutPath(t, p) {
				// Written at its layout path: the path names the object,
				// whatever the document says.
				_, held := t.desired[p]
				if _, deferred := t.deferred[p]; !held && !deferred {
					missing = append(missing, strings.TrimPrefix(p, strings.Trim(t.cfg.Path, "/")+"/"))
				}
				continue
			}
			for _, id := range w.docs.ids[p] {
				lacks(id)
			}
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}

// layoutPath tells whether p is a layout path of one of t's synced scopes.
func (w *Worker) layoutPath(t *target, p string) bool {
	return path.Ext(p) == ".yaml" && slices.ContainsFunc(t.synced, func(s document.Scope) bool {
		return document.InScope(p, t.cfg.Path, s.GVR, s.Namespace)
	})
}

// mirrors tells whether a document naming id is one of an object t
// mirrors: of a scope's kind, in its namespace once applied.
func (w *Worker) mirrors(t *target, id kustomize.ID) bool {
	ns := id.Namespace
	if ns == "" {
		ns = t.cfg.Namespace
	}
	return slices.ContainsFunc(t.synced, func(s document.Scope) bool {
		if s.GVR.Group != id.Group || t.cfg.Kinds[s.GVR] != id.Kind {
			return false
		}
		switch s.Namespace {
		case "*":
			return ns != ""
		case "":
			return id.Namespace == "" // a cluster-scoped resource
		}
		return s.Namespace == ns
	})
}
