package worker

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kustomize/api/konfig"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/kustomize"
)

// Writing into the repository people have (features F1, F2, B4). A change
// arrives at its layout path; before it is committed it is written where
// its object lives:
//
//   - in a folder kustomize builds (a kustomization file at the target's
//     path), every change goes through kustomize.PlanAll: documents are
//     edited in place, generated ConfigMaps in their generator's inputs,
//     replicas and images in the overlay's entries, new objects listed in
//     resources:, and what cannot be written is refused by name;
//   - elsewhere, an object whose document already exists under the
//     target's path in another file keeps that file;
//   - everything else is written at its layout path, as before.
//
// docIndex and the blob cache belong to the worker's goroutine, like the
// rest of its state.

// docIndex knows which objects the YAML files of the head hold.
type docIndex struct {
	ids   map[string][]kustomize.ID // path → its documents' objects
	where map[kustomize.ID][]string // object → paths holding it
	cache map[plumbing.Hash][]kustomize.ID
}

func newDocIndex() *docIndex {
	return &docIndex{ids: map[string][]kustomize.ID{}, where: map[kustomize.ID][]string{}, cache: map[plumbing.Hash][]kustomize.ID{}}
}

func isYAML(p string) bool {
	return (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) && !kustomize.IsKustomization(p)
}

// set records what path holds (nil: nothing any more).
func (d *docIndex) set(p string, ids []kustomize.ID) {
	for _, id := range d.ids[p] {
		d.where[id] = slices.DeleteFunc(d.where[id], func(q string) bool { return q == p })
		if len(d.where[id]) == 0 {
			delete(d.where, id)
		}
	}
	delete(d.ids, p)
	if len(ids) == 0 {
		return
	}
	d.ids[p] = ids
	for _, id := range ids {
		d.where[id] = append(d.where[id], p)
	}
}

// rebuild indexes the head's files, reading only blobs not seen before.
func (d *docIndex) rebuild(index map[string]plumbing.Hash, read func(plumbing.Hash) ([]byte, error)) {
	for p := range d.ids {
		if _, ok := index[p]; !ok {
			d.set(p, nil)
		}
	}
	live := make(map[plumbing.Hash]bool, len(index))
	for _, h := range index {
		live[h] = true
	}
	for h := range d.cache {
		if !live[h] {
			delete(d.cache, h) // keeps the cache to the head's blobs
		}
	}
	for p, h := range index {
		if !isYAML(p) {
			continue
		}
		ids, ok := d.cache[h]
		if !ok {
			content, err := read(h)
			if err != nil {
				klog.Background().Error(err, "Reading a document to index it", "path", p)
				continue
			}
			ids = idsOf(content)
			d.cache[h] = ids
		}
		d.set(p, ids)
	}
}

// wrote records a commit's changes; known names the objects of some of
// them already.
func (d *docIndex) wrote(changes map[string][]byte, known map[string]kustomize.ID) {
	for p, c := range changes {
		switch id, ok := known[p]; {
		case !isYAML(p):
		case c == nil:
			d.set(p, nil)
		case ok:
			d.set(p, []kustomize.ID{id})
		default:
			d.set(p, idsOf(c))
		}
	}
}

// holds tells whether the file p holds id, in a folder applied into ns
// (kustomize.ID.Key): a document at its layout path stays the one written,
// even when a copy exists elsewhere.
func (d *docIndex) holds(p string, id kustomize.ID, ns string) bool {
	return slices.ContainsFunc(d.ids[p], func(h kustomize.ID) bool { return h.Key(ns) == id.Key(ns) })
}

// elsewhere is the file under base, other than p, that holds id in a
// folder applied into ns: its document may name the namespace or leave it
// to the applier.
func (d *docIndex) elsewhere(id kustomize.ID, base, p, ns string) string {
	ids := []kustomize.ID{id}
	if ns != "" && id.Namespace == ns {
		ids = append(ids, id.Key(ns))
	}
	for _, id := range ids {
		for _, q := range d.where[id] {
			if q != p && under(q, base) {
				return q
			}
		}
	}
	return ""
}

// unnamespaced is a file under base, other than p, holding a document of
// id's kind and name without a namespace: in a folder whose applier's
// namespace is not known, it may be id's document or another's.
func (d *docIndex) unnamespaced(id kustomize.ID, base, p string) string {
	if id.Namespace == "" {
		return ""
	}
	id.Namespace = ""
	return d.elsewhere(id, base, p, "")
}

func idsOf(content []byte) []kustomize.ID {
	docs, err := kustomize.Documents(kustomize.Files{"f.yaml": content}, ".")
	if err != nil {
		return nil
	}
	ids := make([]kustomize.ID, 0, len(docs))
	for id := range docs {
		ids = append(ids, id)
	}
	return ids
}

func under(p, base string) bool {
	base = strings.Trim(base, "/")
	return base == "" || base == "." || strings.HasPrefix(p, base+"/")
}

// kustomized tells whether kustomize builds the target's folder.
func (w *Worker) kustomized(t *target) bool {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if _, ok := w.index[path.Join(t.cfg.Path, n)]; ok {
			return true
		}
	}
	return false
}

// sourced tells whether a change of a folder kustomize does not build goes
// through kustomize.PlanAll: its object's document is in another file of
// the folder, or it is new in a folder people lay out themselves (flat).
func (w *Worker) sourced(t *target, p string, id kustomize.ID, held, flat bool) bool {
	if w.docs.holds(p, id, t.cfg.Namespace) {
		return false // a document at its layout path stays the one written
	}
	if w.docs.elsewhere(id, t.cfg.Path, p, t.cfg.Namespace) != "" {
		return true
	}
	_, inGit := w.index[p]
	return held && !inGit && flat
}

// flat tells whether people lay the target's folder out themselves: it
// holds documents of objects at its top, where the layout puts none (an
// Argo CD app's folder, a folder of kubectl apply -f). It reads the whole
// index: once per commit.
func (w *Worker) flat(t *target) bool {
	top := path.Clean("./" + strings.Trim(t.cfg.Path, "/"))
	for p := range w.docs.ids {
		if path.Dir(p) == top {
			return true
		}
	}
	return false
}

// newPath is where a new object's document goes: in a folder people lay
// out themselves or kustomize builds (atTop), a file of its own at the
// folder's top, named as people name them there (<name>-<kind>.yaml);
// elsewhere, or when that name is taken, its layout path p.
func (w *Worker) newPath(t *target, p string, id kustomize.ID, atTop bool) string {
	if !atTop {
		return p
	}
	q := path.Join(t.cfg.Path, id.Name+"-"+strings.ToLower(id.Kind)+".yaml")
	if _, taken := w.index[q]; taken {
		return p
	}
	return q
}

// sourced is one change that goes through kustomize.PlanAll.
type sourced struct {
	layout string
	change kustomize.Change
}

// idOf is the object a layout path's change is about: from its document,
// or, for a deletion, from what was known of it.
func (w *Worker) idOf(t *target, p string) (kustomize.ID, bool) {
	if d, held := t.desired[p]; held {
		if d.id != (kustomize.ID{}) {
			t.ids[p] = d.id
			return d.id, true
		}
		ids := w.docs.ids[p] // Git holds the document
		if d.content != nil {
			ids = idsOf(d.content)
		}
		if len(ids) == 1 {
			t.ids[p] = ids[0]
			return ids[0], true
		}
		return kustomize.ID{}, false
	}
	if id, ok := t.ids[p]; ok {
		return id, true
	}
	if ids := w.docs.ids[p]; len(ids) == 1 {
		return ids[0], true
	}
	return kustomize.ID{}, false
}

// planSources writes the sourced changes of a window: it returns the file
// changes and a commit line for each change written; refusals are kept on
// the target, by layout path, until that object is written or gone.
func (w *Worker) planSources(t *target, win *window, items []sourced, kustomized bool) (map[string][]byte, []string, error) {
	files, err := w.sourceFiles(t, items, kustomized)
	if err != nil {
		return nil, nil, err
	}
	changes := make([]kustomize.Change, len(items))
	for i, it := range items {
		changes[i] = it.change
	}
	edits, outcomes, err := t.planner.PlanAll(files, t.cfg.Path, changes)
	if err != nil {
		return nil, nil, fmt.Errorf("planning the writes into %s: %w", t.cfg.Path, err)
	}
	out := map[string][]byte{}
	for _, e := range edits {
		out[e.File] = e.Content
	}
	var lines []string
	for i, o := range outcomes {
		p := items[i].layout
		switch {
		case o.Refused != nil:
			t.refused[p] = o.Refused.Error()
		case o.Verb != "":
			delete(t.refused, p)
			lines = append(lines, fmt.Sprintf("- %s %s", o.Verb, win.paths[p]))
		default:
			delete(t.refused, p)
		}
	}
	return out, lines, nil
}

// sourceFiles is what PlanAll reads: every file of the head for a folder
// kustomize builds (bases and generator inputs may be anywhere), else the
// files holding the changed objects.
func (w *Worker) sourceFiles(t *target, items []sourced, kustomized bool) (kustomize.Files, error) {
	files := kustomize.Files{}
	add := func(p string) error {
		h, ok := w.index[p]
		if !ok {
			return nil
		}
		content, err := w.readBlob(h)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		files[p] = content
		return nil
	}
	if kustomized {
		for p := range w.index {
			if err := add(p); err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	for _, it := range items {
		if q := w.docs.elsewhere(it.change.ID, t.cfg.Path, it.layout, t.cfg.Namespace); q != "" {
			if err := add(q); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// readBlob reads a blob of the local repository, through a cache: a
// kustomized folder is read whole at each commit.
func (w *Worker) readBlob(h plumbing.Hash) ([]byte, error) {
	if c, ok := w.blobs[h]; ok {
		return c, nil
	}
	c, err := w.repo.ReadBlob(h)
	if err != nil {
		return nil, err
	}
	c = append([]byte{}, c...)
	w.blobs[h] = c
	return c, nil
}

// noteWritten remembers, once a window is committed, what its sourced
// changes wrote: the state before the next change of each object. A
// refused change is not remembered: its next change is planned from the
// state Git still shows.
func (w *Worker) noteWritten(t *target, items []sourced) {
	for _, it := range items {
		p := it.layout
		switch {
		case t.refused[p] != "":
		case it.change.New == nil:
			delete(t.inSources, p)
			delete(t.ids, p)
		default:
			t.inSources[p] = it.change.New
		}
	}
}

// reportRefusals tells the reporter the target's refusals when they
// changed: the GitTarget is Stalled while any stands.
func (w *Worker) reportRefusals(t *target) {
	var msgs []string
	for _, p := range sortedKeys(t.refused) {
		msgs = append(msgs, t.refused[p])
	}
	joined := strings.Join(msgs, "\n")
	if joined == t.reported {
		return
	}
	t.reported = joined
	w.reporter.Refused(t.cfg.Key, msgs)
}

// pruneBlobs keeps in the blob cache only what the head holds.
func (w *Worker) pruneBlobs() {
	if len(w.blobs) == 0 {
		return
	}
	keep := make(map[plumbing.Hash]bool, len(w.index))
	for _, h := range w.index {
		keep[h] = true
	}
	for h := range w.blobs {
		if !keep[h] {
			delete(w.blobs, h)
		}
	}
}

// idOfChange names a change's object from what the stream says of it.
func idOfChange(ch document.Change) kustomize.ID {
	if ch.Kind == "" || ch.Name == "" {
		return kustomize.ID{}
	}
	return kustomize.ID{Group: ch.GVR.Group, Kind: ch.Kind, Namespace: ch.Namespace, Name: ch.Name}
}
