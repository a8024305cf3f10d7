package kustomize

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Change is one live change of one object, as the mirror sees it.
type Change struct {
	ID ID
	// Old is the object before the change, New after it (sanitized YAML, as
	// the mirror writes documents). Old is nil when the object is new or
	// its previous state is not known (after a restart): the source's own
	// state stands in for it. New is nil for a deletion.
	Old, New []byte
	// NewPath is where a document for an object the folder does not hold
	// yet goes, relative to the repository.
	NewPath string
}

// Edit is the new content of one file; a nil Content deletes the file.
type Edit struct {
	File    string
	Content []byte
}

// Refusal says why a change cannot be written into the repository as it
// is; nothing is written for that object.
type Refusal struct {
	ID     ID
	Reason string
}

func (r *Refusal) Error() string { return fmt.Sprintf("%s cannot be written: %s", r.ID, r.Reason) }

func refuse(id ID, format string, args ...any) error {
	return &Refusal{ID: id, Reason: fmt.Sprintf(format, args...)}
}

// Plan says which files change so that the folder dir shows ch: in place
// in the document or generator entry the object comes from, a new document
// for a new object (added to resources: of dir's kustomization), a removed
// document (and entry) for a deleted one. In a folder kustomize builds,
// every plan is checked by rendering before and after: only the changed
// object may change, and exactly by the live change. A change that cannot
// be written is a *Refusal.
func Plan(files Files, dir string, ch Change) ([]Edit, error) {
	edits, outcomes, err := PlanAll(files, dir, []Change{ch})
	if err != nil {
		return nil, err
	}
	if r := outcomes[0].Refused; r != nil {
		return nil, r
	}
	return edits, nil
}

// Outcome is what became of one change of PlanAll.
type Outcome struct {
	// Verb is "create", "update" or "delete" when the change is written,
	// "" when the repository shows it already or it is refused.
	Verb    string
	Refused *Refusal
}

// PlanAll plans the changes of one commit together, each on the files as
// the ones before it left them, with one render before and one after. A
// change that cannot be written is refused alone; the others are planned
// without it. Edits hold each touched file once, in path order; outcomes
// say, change by change, what became of it.
func PlanAll(files Files, dir string, changes []Change) ([]Edit, []Outcome, error) {
	return (&Planner{}).PlanAll(files, dir, changes)
}

// Planner is PlanAll with a memory: the render it checked last is the
// render before the next commit, whose files are those it planned, so
// consecutive commits render once each. A Planner is not safe for
// concurrent use; the branch worker keeps one per target.
type Planner struct {
	// Namespace is the one the folder's applier puts namespaced documents
	// without a namespace into ("" when it is not known): such a document
	// is matched to the live object in Namespace, and no namespace is
	// written into it (feature R1).
	Namespace string

	key  [sha256.Size]byte
	objs []Object
}

// render renders dir, or returns the last render of the same files. Its
// objects are named by their keys in the planner's namespace (ID.Key).
func (p *Planner) render(files Files, dir string) ([]Object, error) {
	key := digest(files, dir, p.Namespace)
	if p.objs != nil && key == p.key {
		return p.objs, nil
	}
	objs, err := Render(files, dir)
	if err != nil {
		return nil, err
	}
	for i := range objs {
		objs[i].ID = objs[i].ID.Key(p.Namespace)
	}
	p.key, p.objs = key, objs
	return objs, nil
}

// Objects is the render of dir, each object named by its key in the
// planner's namespace; the same files are rendered once.
func (p *Planner) Objects(files Files, dir string) ([]Object, error) {
	return p.render(files, dir)
}

// digest identifies a snapshot of the files a render reads, keyed in ns.
func digest(files Files, dir, ns string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(dir))
	h.Write([]byte{0})
	h.Write([]byte(ns))
	for _, p := range sortedPaths(files) {
		sum := sha256.Sum256(files[p])
		h.Write([]byte{0})
		h.Write([]byte(p))
		h.Write(sum[:])
	}
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// PlanAll is the package's PlanAll, reusing the last render it checked,
// for a folder applied into the planner's namespace. Refusals name each
// object as its change did.
func (pl *Planner) PlanAll(files Files, dir string, changes []Change) ([]Edit, []Outcome, error) {
	keyed := make([]Change, len(changes))
	for i, ch := range changes {
		ch.ID = ch.ID.Key(pl.Namespace)
		keyed[i] = ch
	}
	edits, outcomes, err := pl.planAll(files, dir, keyed)
	for i := range outcomes {
		if r := outcomes[i].Refused; r != nil {
			r.ID = changes[i].ID
		}
	}
	return edits, outcomes, err
}

func (pl *Planner) planAll(files Files, dir string, changes []Change) ([]Edit, []Outcome, error) {
	dir = clean(dir)
	outcomes := make([]Outcome, len(changes))
	cur, touched := maps.Clone(files), map[string]bool{}
	if !HasKustomization(files, dir) {
		for i, ch := range changes {
			edits, verb, err := pl.planPlain(cur, dir, ch)
			if refused(err, ch.ID, &outcomes[i]) {
				continue
			}
			applyEdits(cur, touched, edits)
			outcomes[i].Verb = verb
		}
		return editsOf(cur, touched), outcomes, nil
	}
	before, err := pl.render(files, dir)
	if err != nil {
		// A folder kustomize cannot build here (a remote base, a plugin)
		// takes no write: every change is refused with why.
		for i, ch := range changes {
			outcomes[i].Refused = &Refusal{ID: ch.ID, Reason: err.Error()}
		}
		return nil, outcomes, nil
	}
	var planned []int
	for i, ch := range changes {
		edits, verb, err := pl.planOne(cur, dir, before, ch)
		if refused(err, ch.ID, &outcomes[i]) {
			continue
		}
		applyEdits(cur, touched, edits)
		if len(edits) > 0 {
			outcomes[i].Verb = verb
			planned = append(planned, i)
		}
	}
	if len(planned) == 0 {
		return editsOf(cur, touched), outcomes, nil
	}
	err = pl.verify(cur, dir, before, pick(changes, planned))
	if err == nil {
		return editsOf(cur, touched), outcomes, nil
	}
	if len(planned) == 1 {
		outcomes[planned[0]].Verb = ""
		refused(err, changes[planned[0]].ID, &outcomes[planned[0]])
		return nil, outcomes, nil
	}
	// Some change does not render as it should: plan them one by one, so
	// only that one is refused.
	cur, touched = maps.Clone(files), map[string]bool{}
	for _, i := range planned {
		outcomes[i].Verb = ""
		base, err := pl.render(cur, dir)
		if err != nil {
			return nil, nil, err
		}
		edits, verb, err := pl.planOne(cur, dir, base, changes[i])
		if err == nil {
			next := maps.Clone(cur)
			applyEdits(next, map[string]bool{}, edits)
			err = pl.verify(next, dir, base, []Change{changes[i]})
		}
		if refused(err, changes[i].ID, &outcomes[i]) {
			continue
		}
		applyEdits(cur, touched, edits)
		outcomes[i].Verb = verb
	}
	return editsOf(cur, touched), outcomes, nil
}

// refused records in o why a change cannot be written and says whether
// it cannot: any failure to plan one change (a document that does not
// parse, say) refuses that change, never the commit's others.
func refused(err error, id ID, o *Outcome) bool {
	if err == nil {
		return false
	}
	var r *Refusal
	if !errors.As(err, &r) {
		r = &Refusal{ID: id, Reason: err.Error()}
	}
	o.Refused = r
	return true
}

func pick(changes []Change, idx []int) []Change {
	out := make([]Change, len(idx))
	for j, i := range idx {
		out[j] = changes[i]
	}
	return out
}

func applyEdits(files Files, touched map[string]bool, edits []Edit) {
	for _, e := range edits {
		touched[e.File] = true
		if e.Content == nil {
			delete(files, e.File)
		} else {
			files[e.File] = e.Content
		}
	}
}

func editsOf(files Files, touched map[string]bool) []Edit {
	var out []Edit
	for _, p := range slices.Sorted(maps.Keys(touched)) {
		out = append(out, Edit{File: p, Content: files[p]})
	}
	return out
}

// planOne plans one change against the render before, without checking,
// and names what it does.
func (pl *Planner) planOne(files Files, dir string, before []Object, ch Change) ([]Edit, string, error) {
	match := sameObject
	if ch.New == nil {
		// A generated object under an older content hash goes when its
		// applier prunes it: that is not the generator's deletion.
		match = func(r, l ID) bool { return r == l }
	}
	var found []int
	for i, o := range before {
		if match(o.ID, ch.ID) || pl.Namespace == "" && ch.New != nil && MayBeSame(o.ID, ch.ID, "") {
			found = append(found, i)
		}
	}
	switch {
	case len(found) == 0 && ch.New == nil:
		return nil, "", nil // gone already, or an older generation
	case len(found) == 0:
		edits, err := pl.planNew(files, dir, ch)
		return edits, "create", err
	case len(found) > 1:
		return nil, "", refuse(ch.ID, "the folder renders it more than once, from %s: remove all but one%s", sourcesOf(before, found), pl.fix())
	case !match(before[found[0]].ID, ch.ID):
		// A document without a namespace, in a folder whose applier's
		// namespace is not known: it may be this object, or not.
		return nil, "", refuse(ch.ID, "%s names no namespace, and the namespace the folder is applied into is not known%s",
			before[found[0]].Source.File, pl.fix())
	}
	i := found[0]
	verb := "update"
	if ch.New == nil {
		verb = "delete"
	}
	o := before[i]
	if ch.Old != nil && ch.New != nil && !renderShows(ch.Old, o.YAML) {
		// The repository changed under the object since its last state
		// (a foreign commit): the cluster's state is re-asserted on what
		// the render sets, as when the state before is not known.
		ch.Old = nil
	}
	if ch.Old == nil && ch.New != nil {
		// The state before is not known (a snapshot, a restart): the
		// render stands in for it, and only what the render sets counts,
		// not the API server's defaults or an applier's labels.
		ch.Old = o.YAML
		projected, err := projectYAML(ch.New, o.YAML)
		if err != nil {
			return nil, "", err
		}
		ch.New = projected
	}
	if ch.New != nil && alreadyShows(o.YAML, ch) {
		return nil, "", nil // wherever its source is, nothing is to be written
	}
	if o.Source.Unknown != "" {
		return nil, "", refuse(ch.ID, "%s", o.Source.Unknown)
	}
	edits, ch, err := planSource(files, dir, o, ch)
	for _, e := range edits {
		if err == nil && !under(e.File, dir) {
			// A GitTarget writes its own folder only: another target's, or
			// files nobody mirrors, are not its to change.
			err = refuse(ch.ID, "writing it would change %s, outside %s", e.File, dir)
		}
	}
	if err != nil {
		return nil, "", err
	}
	if len(edits) == 0 && ch.New != nil {
		// Nothing to write: right when the render already shows the live
		// object, a refusal when what changed is not the sources' to say.
		err = rendersAs(o, ch)
	}
	return edits, verb, err
}

// planSource writes a change into where the render takes the object from:
// its generator's entry, or the patches, transformers and document that
// make it, in that order. It returns the change as the patches left it.
func planSource(files Files, dir string, o Object, ch Change) ([]Edit, Change, error) {
	if o.Source.Kind == FromGenerator {
		edits, err := planGenerated(files, o, ch)
		if err == nil && len(edits) > 0 && !under(o.Source.File, dir) {
			return nil, ch, refuse(ch.ID, "its generator is in %s, a base outside %s that other folders may build too", o.Source.File, dir)
		}
		return edits, ch, err
	}
	patched, ch, err := planPatched(files, dir, o, ch)
	switch {
	case err != nil:
		return nil, ch, err
	case len(patched) > 0 && equalYAML(ch.Old, ch.New):
		return patched, ch, nil // the patches say all of it
	}
	edits, done, err := planTransformed(files, dir, o, ch)
	if err == nil && !done {
		edits, err = planDocument(files, dir, o, ch)
	}
	return append(patched, edits...), ch, err
}

// fix says how to tell the planner the folder's namespace, when it does
// not know it.
func (pl *Planner) fix() string {
	if pl.Namespace != "" {
		return ""
	}
	return " (set the GitTarget's spec.targetNamespace to the namespace its applier puts documents without one into)"
}

// sourcesOf names the files the objects at idx come from.
func sourcesOf(objs []Object, idx []int) string {
	var files []string
	for _, i := range idx {
		files = append(files, objs[i].Source.File)
	}
	return strings.Join(files, " and ")
}

// sameObject matches a live object to a rendered one: a generated name's
// content hash may differ, since the live object was made from an older
// input.
func sameObject(rendered, live ID) bool {
	if rendered == live {
		return true
	}
	r, l := rendered, live
	r.Name, l.Name = trimHash(r.Name), trimHash(l.Name)
	return r == l && rendered.Name != trimHash(rendered.Name)
}

func trimHash(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 && len(name)-i-1 == hashLen {
		return name[:i]
	}
	return name
}

// planPlain writes a folder without kustomization: the object's document
// where it is, or a new file at NewPath.
func (pl *Planner) planPlain(files Files, dir string, ch Change) ([]Edit, string, error) {
	docs, err := documentsIn(files, dir, pl.Namespace)
	if err != nil {
		return nil, "", err
	}
	loc, ok := docs[ch.ID]
	if ok && ch.Old == nil && ch.New != nil {
		// The state before is not known (a snapshot, a restart): the
		// document stands in for it, and only what it sets counts, not the
		// API server's defaults, an applier's labels or the namespace it
		// leaves to its applier.
		projected, err := projectYAML(ch.New, []byte(splitDocuments(files[loc.File])[loc.Index]))
		if err != nil {
			return nil, "", refuse(ch.ID, "reading %s: %v", loc.File, err)
		}
		ch.New = projected
	}
	if !ok {
		if ch.New == nil {
			return nil, "", nil
		}
		if ch.NewPath == "" {
			return nil, "", refuse(ch.ID, "it is new and no path was given for it")
		}
		doc, err := pl.asSource(nil, ch.New)
		if err != nil {
			return nil, "", refuse(ch.ID, "%v", err)
		}
		return []Edit{{File: ch.NewPath, Content: doc}}, "create", nil
	}
	edits, err := spliceDocument(files, loc, ch)
	verb := map[bool]string{true: "delete", false: "update"}[ch.New == nil]
	if len(edits) == 0 {
		verb = ""
	}
	return edits, verb, err
}

// planDocument writes a document kustomize reads from resources. A
// document outside dir belongs to a base other folders may build too: it is
// read-only.
func planDocument(files Files, dir string, o Object, ch Change) ([]Edit, error) {
	if !under(o.Source.File, dir) {
		return nil, refuse(ch.ID, "it comes from %s, a base outside %s that other folders may build too", o.Source.File, dir)
	}
	loc, err := documentOf(files, o, ch.ID)
	if err != nil {
		return nil, err
	}
	if ch.New == nil {
		edits, err := spliceDocument(files, loc, ch)
		if err != nil {
			return nil, err
		}
		if len(edits) == 1 && edits[0].Content == nil {
			return dropResourceEntry(files, dir, edits, o.Source.File)
		}
		return edits, nil
	}
	return spliceDocument(files, loc, ch) // planOne has set ch.Old
}

// documentOf finds the document an object comes from among its file's
// documents: it names the object before transformers (namespace, name
// prefixes) renamed it.
func documentOf(files Files, o Object, id ID) (Location, error) {
	docs, err := Documents(Files{o.Source.File: files[o.Source.File]}, ".")
	if err != nil {
		return Location{}, err
	}
	var found []Location
	for d, l := range docs {
		if d.Kind == id.Kind && d.Group == id.Group && strings.Contains(id.Name, d.Name) {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Location{}, refuse(id, "its document in %s was not found", o.Source.File)
	default:
		return Location{}, refuse(id, "%s holds more than one document it could come from", o.Source.File)
	}
}

// spliceDocument rewrites or removes the loc.Index-th document of its
// file, leaving the others byte for byte.
func spliceDocument(files Files, loc Location, ch Change) ([]Edit, error) {
	segs := splitDocuments(files[loc.File])
	if loc.Index >= len(segs) {
		return nil, fmt.Errorf("%s has no document %d", loc.File, loc.Index)
	}
	if ch.New == nil {
		segs = slices.Delete(segs, loc.Index, loc.Index+1)
		if len(segs) == 0 {
			return []Edit{{File: loc.File}}, nil
		}
		return []Edit{{File: loc.File, Content: joinDocuments(files[loc.File], segs)}}, nil
	}
	src, err := kyaml.Parse(segs[loc.Index])
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", loc.File, err)
	}
	old := ch.Old
	if old == nil {
		old = []byte(segs[loc.Index])
	}
	var before, after any
	if err := kyaml.Unmarshal(old, &before); err != nil {
		return nil, err
	}
	if err := kyaml.Unmarshal(ch.New, &after); err != nil {
		return nil, err
	}
	if reflect.DeepEqual(before, after) {
		return nil, nil // nothing changed: the file stays as its author wrote it
	}
	if err := carry(src, before, after); err != nil {
		return nil, refuse(ch.ID, "%v", err)
	}
	segs[loc.Index] = string(formatAs(src, []byte(segs[loc.Index])))
	content := joinDocuments(files[loc.File], segs)
	if bytes.Equal(content, files[loc.File]) {
		return nil, nil
	}
	return []Edit{{File: loc.File, Content: content}}, nil
}

// splitDocuments splits a file at its "---" lines; each part keeps its
// comments.
func splitDocuments(data []byte) []string {
	var segs []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \t\r\n") == "---" {
			segs = append(segs, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	segs = append(segs, cur.String())
	// A leading "---" makes an empty first part.
	return slices.DeleteFunc(segs, func(s string) bool { return strings.TrimSpace(s) == "" })
}

// joinDocuments joins segs as the file orig separated its documents: a
// leading "---" stays.
func joinDocuments(orig []byte, segs []string) []byte {
	var b strings.Builder
	if first, _, _ := strings.Cut(string(orig), "\n"); strings.TrimRight(first, " \t\r") == "---" {
		b.WriteString(first + "\n")
	}
	for i, s := range segs {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	return []byte(b.String())
}

// planNew writes a new object as its own file, listed in resources: of
// dir's kustomization, as a person would write it there: without the
// namespace the folder is applied into or its kustomization sets, and
// without the kustomization's name prefix and suffix.
func (pl *Planner) planNew(files Files, dir string, ch Change) ([]Edit, error) {
	if !under(ch.NewPath, dir) {
		return nil, refuse(ch.ID, "its new file %s is outside %s", ch.NewPath, dir)
	}
	kfile := KustomizationFile(files, dir)
	doc, err := pl.asSource(files[kfile], ch.New)
	if err != nil {
		return nil, refuse(ch.ID, "%v", err)
	}
	ch.New = doc
	rel := strings.TrimPrefix(ch.NewPath, strings.TrimSuffix(dir, "/")+"/")
	if dir == "." {
		rel = ch.NewPath
	}
	k, err := kyaml.Parse(string(files[kfile]))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kfile, err)
	}
	list, err := k.Pipe(kyaml.LookupCreate(kyaml.SequenceNode, "resources"))
	if err != nil {
		return nil, err
	}
	if err := list.PipeE(kyaml.Append(kyaml.NewScalarRNode(rel).YNode())); err != nil {
		return nil, err
	}
	return []Edit{{File: ch.NewPath, Content: ch.New}, {File: kfile, Content: formatAs(k, files[kfile])}}, nil
}

// dropResourceEntry removes a deleted file from resources: of the
// kustomizations under dir that list it; those elsewhere are not the
// target's to write.
func dropResourceEntry(files Files, dir string, edits []Edit, file string) ([]Edit, error) {
	for _, kfile := range sortedPaths(files) {
		if !IsKustomization(kfile) || !under(kfile, dir) {
			continue
		}
		k, err := kyaml.Parse(string(files[kfile]))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", kfile, err)
		}
		list := k.Field("resources")
		if list == nil {
			continue
		}
		kept := list.Value.Content()[:0]
		dropped := false
		for _, n := range list.Value.Content() {
			if join(path.Dir(kfile), n.Value) == file {
				dropped = true
				continue
			}
			kept = append(kept, n)
		}
		if dropped {
			list.Value.YNode().Content = kept
			edits = append(edits, Edit{File: kfile, Content: formatAs(k, files[kfile])})
		}
	}
	return edits, nil
}

// verify renders the planned files and checks that the render changed
// exactly by the live changes: each changed object as its change says (a
// generated one under a new content hash; compared on the fields the
// render sets, which the API server's defaults do not touch), a deleted one
// gone, every other object as before.
func (pl *Planner) verify(next Files, dir string, before []Object, changes []Change) error {
	after, err := pl.render(next, dir)
	if err != nil {
		return refuse(changes[0].ID, "the folder no longer builds with the change: %v", err)
	}
	// Never a second copy of an object (feature R2): one the folder
	// already renders twice is the user's to mend, and is refused when
	// written (planOne).
	if id, from := pl.twice(after); from != "" {
		if _, already := pl.twice(before); already == "" {
			return refuse(changes[0].ID, "writing it would render %s twice, from %s%s", id, from, pl.fix())
		}
	}
	changeOf := func(id ID) (Change, bool) {
		for _, ch := range changes {
			if sameObject(id, ch.ID) || sameObject(ch.ID, id) {
				return ch, true
			}
		}
		return Change{}, false
	}
	seen := map[ID]bool{}
	for _, o := range after {
		ch, changed := changeOf(o.ID)
		if !changed {
			k := slices.IndexFunc(before, func(b Object) bool { return b.ID == o.ID })
			switch {
			case k < 0:
				return refuse(changes[0].ID, "writing it would also render %s", o.ID)
			case !bytes.Equal(before[k].YAML, o.YAML):
				return refuse(changes[0].ID, "writing it would also change %s", o.ID)
			}
			continue
		}
		seen[ch.ID] = true
		if ch.New == nil {
			return refuse(ch.ID, "it is still rendered after its source was removed")
		}
		if err := rendersAs(o, ch); err != nil {
			return err
		}
	}
	for _, ch := range changes {
		if ch.New != nil && !seen[ch.ID] {
			return refuse(ch.ID, "it is no longer rendered")
		}
	}
	return nil
}

// rendersAs checks a rendered object against the live one, on the fields
// the render sets (a generated name's content hash is kustomize's to
// choose).
func rendersAs(o Object, ch Change) error {
	if !renderShows(ch.New, o.YAML) {
		return refuse(ch.ID, "the render would not equal the live object (a transformer sets what changed)")
	}
	return nil
}

// project keeps of live what shape has: the fields a render sets.
func project(live, shape any) any { return projectAs(live, shape, false) }

// projectAs is project; for a strategic-merge patch (merge), a list of
// named maps (containers, ports, env) is matched by name, not position,
// and directives ($patch, $setElementOrder) are not fields.
func projectAs(live, shape any, merge bool) any {
	switch s := shape.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return live
		}
		out := map[string]any{}
		for k, v := range s {
			if merge && strings.HasPrefix(k, "$") {
				continue
			}
			if lv, ok := l[k]; ok {
				out[k] = projectAs(lv, v, merge)
			}
		}
		return out
	case []any:
		l, ok := live.([]any)
		if !ok {
			return live
		}
		if merge && named(s) {
			var out []any
			for _, e := range s {
				if i := byName(l, nameOf(e)); i >= 0 {
					out = append(out, projectAs(l[i], e, merge))
				}
			}
			return out
		}
		if len(l) != len(s) {
			return live
		}
		out := make([]any, len(l))
		for i := range l {
			out[i] = projectAs(l[i], s[i], merge)
		}
		return out
	default:
		return live
	}
}

// renderShows tells whether the render shows live on the fields it sets.
func renderShows(live, render []byte) bool {
	var l, r any
	if kyaml.Unmarshal(live, &l) != nil || kyaml.Unmarshal(render, &r) != nil {
		return false
	}
	if lm, ok := l.(map[string]any); ok {
		unname(lm)
	}
	if rm, ok := r.(map[string]any); ok {
		unname(rm)
	}
	return reflect.DeepEqual(project(l, r), r)
}

func projectYAML(live, shape []byte) ([]byte, error) {
	var l, s any
	if err := kyaml.Unmarshal(live, &l); err != nil {
		return nil, err
	}
	if err := kyaml.Unmarshal(shape, &s); err != nil {
		return nil, err
	}
	return kyaml.Marshal(project(l, s))
}

func unname(obj map[string]any) {
	if md, ok := obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok {
			md["name"] = trimHash(n)
		}
	}
}

// planGenerated writes a live change of a generated ConfigMap into its
// generator entry's inputs: literals, env files and files, by key.
func planGenerated(files Files, o Object, ch Change) ([]Edit, error) {
	if o.Source.GeneratorKind != "ConfigMapGenerator" {
		return nil, refuse(ch.ID, "objects of a %s are not written back", o.Source.GeneratorKind)
	}
	kfile := o.Source.File
	var k types.Kustomization
	if err := kyaml.Unmarshal(files[kfile], &k); err != nil {
		return nil, fmt.Errorf("reading %s: %w", kfile, err)
	}
	gi := slices.IndexFunc(k.ConfigMapGenerator, func(g types.ConfigMapArgs) bool {
		ns := g.Namespace
		if ns == "" {
			ns = k.Namespace
		}
		return g.Name == o.Source.Generator && ns == o.Source.GeneratorNamespace
	})
	if gi < 0 {
		return nil, refuse(ch.ID, "its generator entry %s is not in %s", o.Source.Generator, kfile)
	}
	if ch.New == nil {
		return removeGenerator(files, kfile, o.Source)
	}
	oldData, err := dataOf(o.YAML)
	if ch.Old != nil {
		oldData, err = dataOf(ch.Old)
	}
	if err != nil {
		return nil, err
	}
	newData, err := dataOf(ch.New)
	if err != nil {
		return nil, err
	}
	return writeGeneratorData(files, kfile, k.ConfigMapGenerator[gi].GeneratorArgs, o.Source, oldData, newData, ch.ID)
}

func dataOf(doc []byte) (map[string]string, error) {
	var obj struct {
		Data map[string]string `yaml:"data"`
	}
	if err := kyaml.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	if obj.Data == nil {
		obj.Data = map[string]string{}
	}
	return obj.Data, nil
}

// asSource is a new object's document as the kustomization kdata (nil: a
// folder kustomize does not build) would render it into the live one: the namespace the folder supplies left out,
// the name without the prefix and suffix kustomize adds.
func (pl *Planner) asSource(kdata, live []byte) ([]byte, error) {
	var k types.Kustomization
	if kdata != nil {
		if err := kyaml.Unmarshal(kdata, &k); err != nil {
			return nil, fmt.Errorf("reading the kustomization: %w", err)
		}
	}
	node, err := kyaml.Parse(string(live))
	if err != nil {
		return nil, err
	}
	md, err := node.Pipe(kyaml.Lookup("metadata"))
	if err != nil || md == nil {
		return live, err
	}
	if ns, _ := md.GetString("namespace"); ns != "" && (ns == pl.Namespace || ns == k.Namespace) {
		if _, err := md.Pipe(kyaml.Clear("namespace")); err != nil {
			return nil, err
		}
	}
	orig, _ := md.GetString("name")
	name := orig
	if k.NamePrefix != "" {
		name = strings.TrimPrefix(name, k.NamePrefix)
	}
	if k.NameSuffix != "" {
		name = strings.TrimSuffix(name, k.NameSuffix)
	}
	if name != "" && name != orig {
		if err := md.PipeE(kyaml.SetField("name", kyaml.NewScalarRNode(name))); err != nil {
			return nil, err
		}
	}
	return []byte(node.MustString()), nil
}

// twice finds an object objs hold twice once applied into the planner's
// namespace, and names the files of both; "" when there is none.
func (pl *Planner) twice(objs []Object) (ID, string) {
	seen := make(map[ID]Object, len(objs))
	for _, o := range objs {
		if p, ok := seen[o.ID]; ok {
			return o.ID, p.Source.File + " and " + o.Source.File
		}
		seen[o.ID] = o
	}
	if pl.Namespace != "" {
		return ID{}, ""
	}
	// The namespace is not known: a document without one may be any
	// namespace's object of its name.
	for _, o := range objs {
		if o.ID.Namespace == "" {
			continue
		}
		bare := o.ID
		bare.Namespace = ""
		if p, ok := seen[bare]; ok {
			return o.ID, p.Source.File + " and " + o.Source.File
		}
	}
	return ID{}, ""
}

// equalYAML tells whether two documents hold the same data.
func equalYAML(a, b []byte) bool {
	var x, y any
	return kyaml.Unmarshal(a, &x) == nil && kyaml.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// alreadyShows tells whether the render shows what changed from ch.Old to
// ch.New already: the change carried onto it leaves it as it is.
func alreadyShows(render []byte, ch Change) bool {
	var before, after any
	if kyaml.Unmarshal(ch.Old, &before) != nil || kyaml.Unmarshal(ch.New, &after) != nil {
		return false
	}
	if reflect.DeepEqual(before, after) {
		return true
	}
	node, err := kyaml.Parse(string(render))
	if err != nil || carry(node, before, after) != nil {
		return false
	}
	return equalYAML([]byte(node.MustString()), render)
}
