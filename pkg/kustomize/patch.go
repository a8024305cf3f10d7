package kustomize

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// A field a patch of the folder sets is the patch's to say (feature R4):
// a person who changed it would edit the patch, since the document under
// it does not decide what is rendered. planPatched writes such fields into
// the patch and hands the rest of the change on, for the document.

// patchRef is one patch a kustomization under the folder applies: a file
// (path) or a string of the kustomization itself (inline, at index of
// field), strategic-merge or JSON 6902.
type patchRef struct {
	kfile  string // the kustomization that applies it
	file   string // the patch's file, "" when inline
	field  string // patches, patchesStrategicMerge or patchesJson6902
	index  int
	target *types.Selector
	body   string
}

// planPatched writes into the folder's patches what of the change they set
// and returns the change with those fields as they were, for the
// document. A field set by a patch outside dir is refused: that patch is a
// base's, which other folders may build too.
func planPatched(files Files, dir string, o Object, ch Change) ([]Edit, Change, error) {
	if ch.New == nil || ch.Old == nil {
		return nil, ch, nil
	}
	var before, after any
	if err := kyaml.Unmarshal(ch.Old, &before); err != nil {
		return nil, ch, err
	}
	if err := kyaml.Unmarshal(ch.New, &after); err != nil {
		return nil, ch, err
	}
	if reflect.DeepEqual(before, after) {
		return nil, ch, nil
	}
	patches, err := patchesFor(files, dir, ch.ID)
	if err != nil {
		return nil, ch, err
	}
	bodies := map[patchRef]string{}
	for _, p := range patches {
		body, rest, err := writePatch(p.body, before, after)
		if err != nil {
			return nil, ch, refuse(ch.ID, "writing its patch in %s: %v", p.where(), err)
		}
		if body == p.body {
			continue
		}
		if !under(p.kfile, dir) || p.file != "" && !under(p.file, dir) {
			return nil, ch, refuse(ch.ID, "what changed is set by a patch in %s, a base outside %s that other folders may build too", p.where(), dir)
		}
		bodies[p] = body
		after = rest
	}
	if len(bodies) == 0 {
		return nil, ch, nil
	}
	edits, err := patchEdits(files, bodies)
	if err != nil {
		return nil, ch, err
	}
	rest, err := kyaml.Marshal(after)
	if err != nil {
		return nil, ch, err
	}
	ch.New = rest
	return edits, ch, nil
}

func (p patchRef) where() string {
	if p.file != "" {
		return p.file
	}
	return fmt.Sprintf("%s (%s[%d])", p.kfile, p.field, p.index)
}

// patchesFor lists the patches of the kustomizations dir builds (its own
// and those of the folders it includes) that may apply to id; the render
// check finds one that matched more than it should.
func patchesFor(files Files, dir string, id ID) ([]patchRef, error) {
	var out []patchRef
	seen := map[string]bool{}
	var walk func(d string) error
	walk = func(d string) error {
		if seen[d] {
			return nil
		}
		seen[d] = true
		kfile := KustomizationFile(files, d)
		var k types.Kustomization
		if err := kyaml.Unmarshal(files[kfile], &k); err != nil {
			return fmt.Errorf("reading %s: %w", kfile, err)
		}
		add := func(field string, i int, p types.Patch) {
			ref := patchRef{kfile: kfile, field: field, index: i, target: p.Target, body: p.Patch}
			if p.Path != "" {
				ref.file = join(d, p.Path)
				ref.body = string(files[ref.file])
			}
			if ref.body != "" && patchMayApply(ref, id) {
				out = append(out, ref)
			}
		}
		for i, p := range k.Patches {
			add("patches", i, p)
		}
		//lint:ignore SA1019 kustomize still reads these, so their patches are written too
		for i, p := range k.PatchesStrategicMerge {
			s := string(p)
			if !strings.Contains(s, "\n") && files[join(d, s)] != nil {
				add("patchesStrategicMerge", i, types.Patch{Path: s})
			} else {
				add("patchesStrategicMerge", i, types.Patch{Patch: s})
			}
		}
		//lint:ignore SA1019 as above
		for i, p := range k.PatchesJson6902 {
			add("patchesJson6902", i, p)
		}
		//lint:ignore SA1019 as above
		for _, e := range append(append([]string{}, k.Resources...), append(k.Components, k.Bases...)...) {
			if p := join(d, e); HasKustomization(files, p) {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(clean(dir)); err != nil {
		return nil, err
	}
	return out, nil
}

// patchMayApply tells whether p may patch id: its target, or for a
// strategic-merge patch without one, the object it names. Names are
// matched loosely (a prefix or suffix may come after the patch); the
// render check refuses a patch that also changes another object.
func patchMayApply(p patchRef, id ID) bool {
	if t := p.target; t != nil {
		if t.Kind != "" && t.Kind != id.Kind || t.Group != "" && t.Group != id.Group {
			return false
		}
		if t.Name == "" || strings.Contains(id.Name, t.Name) {
			return true
		}
		// kustomize reads a target's name as an anchored pattern.
		re, err := regexp.Compile("^(?:" + t.Name + ")$")
		return err == nil && re.MatchString(trimHash(id.Name))
	}
	ids, err := documentIDs([]byte(p.body))
	if err != nil || len(ids) != 1 {
		return false
	}
	d := ids[0]
	return d.Kind == id.Kind && d.Group == id.Group && d.Name != "" && strings.Contains(id.Name, d.Name)
}

// writePatch writes into the patch body what it sets of the change from
// before to after, and returns after with those fields as before had
// them. A JSON 6902 patch is a list of operations; anything else is a
// strategic-merge patch.
func writePatch(body string, before, after any) (string, any, error) {
	var ops []map[string]any
	if kyaml.Unmarshal([]byte(body), &ops) == nil && len(ops) > 0 {
		return writeJSON6902(body, before, after)
	}
	node, err := kyaml.Parse(body)
	if err != nil {
		return "", nil, err
	}
	var shape map[string]any
	if err := node.YNode().Decode(&shape); err != nil {
		return "", nil, err
	}
	delete(shape, "apiVersion")
	delete(shape, "kind")
	pb, pa := projectMerge(before, shape), projectMerge(after, shape)
	if reflect.DeepEqual(pb, pa) {
		return body, after, nil
	}
	if err := carry(node, pb, pa); err != nil {
		return "", nil, err
	}
	return keepFormat(body, formatAs(node, []byte(body))), restore(after, before, shape), nil
}

// keepFormat keeps the leading "---" of the patch orig, and its last
// line break or its lack (an inline patch written "|-").
func keepFormat(orig string, s []byte) string {
	out := string(joinDocuments([]byte(orig), []string{string(s)}))
	if !strings.HasSuffix(orig, "\n") {
		out = strings.TrimSuffix(out, "\n")
	}
	return out
}

// writeJSON6902 sets the value of each add or replace operation whose
// path changed to the value after has there.
func writeJSON6902(body string, before, after any) (string, any, error) {
	node, err := kyaml.Parse(body)
	if err != nil {
		return "", nil, err
	}
	changed := false
	for _, op := range node.Content() {
		opn := kyaml.NewRNode(op)
		verb, _ := opn.GetString("op")
		ptr, _ := opn.GetString("path")
		if verb != "add" && verb != "replace" || ptr == "" {
			continue
		}
		segs := pointer(ptr)
		b, bok := atPointer(before, segs)
		a, aok := atPointer(after, segs)
		if bok == aok && reflect.DeepEqual(a, b) {
			continue
		}
		if !aok {
			return "", nil, fmt.Errorf("%s %s: the live object no longer has the field the operation sets", verb, ptr)
		}
		v, err := nodeOf(a)
		if err != nil {
			return "", nil, err
		}
		if f := opn.Field("value"); f != nil {
			err = replace(f.Value, a)
		} else {
			err = opn.PipeE(kyaml.SetField("value", v))
		}
		if err != nil {
			return "", nil, err
		}
		after = setPointer(deepCopy(after), segs, b, bok)
		changed = true
	}
	if !changed {
		return body, after, nil
	}
	return keepFormat(body, formatAs(node, []byte(body))), after, nil
}

// pointer splits a JSON pointer (RFC 6901) into its unescaped segments.
func pointer(p string) []string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return segs
}

func atPointer(v any, segs []string) (any, bool) {
	for _, s := range segs {
		switch t := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = t[s]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(t) {
				return nil, false
			}
			v = t[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// setPointer sets (or with present false, removes) the value at segs of v,
// a copy the caller owns.
func setPointer(v any, segs []string, val any, present bool) any {
	if len(segs) == 0 {
		return val
	}
	switch t := v.(type) {
	case map[string]any:
		if len(segs) == 1 && !present {
			delete(t, segs[0])
			return t
		}
		t[segs[0]] = setPointer(t[segs[0]], segs[1:], val, present)
	case []any:
		if i, err := strconv.Atoi(segs[0]); err == nil && i >= 0 && i < len(t) {
			t[i] = setPointer(t[i], segs[1:], val, present)
		}
	}
	return v
}

// projectMerge is project for a strategic-merge patch (projectAs).
func projectMerge(live, shape any) any { return projectAs(live, shape, true) }

// restore is after with the fields shape sets as before has them.
func restore(after, before, shape any) any {
	switch s := shape.(type) {
	case map[string]any:
		a, aok := after.(map[string]any)
		b, bok := before.(map[string]any)
		if !aok || !bok {
			return before
		}
		out := make(map[string]any, len(a))
		for k, v := range a {
			out[k] = v
		}
		for k, sv := range s {
			if strings.HasPrefix(k, "$") {
				continue
			}
			bv, inBefore := b[k]
			av, inAfter := a[k]
			switch {
			case !inBefore:
				delete(out, k)
			case inAfter:
				out[k] = restore(av, bv, sv)
			default:
				out[k] = bv
			}
		}
		return out
	case []any:
		a, aok := after.([]any)
		b, bok := before.([]any)
		if !aok || !bok || !named(s) {
			return before
		}
		out := append([]any(nil), a...)
		for _, e := range s {
			ai, bi := byName(a, nameOf(e)), byName(b, nameOf(e))
			if ai >= 0 && bi >= 0 {
				out[ai] = restore(a[ai], b[bi], e)
			}
		}
		return out
	default:
		return before
	}
}

// named tells whether every element of l is a map with a name.
func named(l []any) bool {
	for _, e := range l {
		if nameOf(e) == "" {
			return false
		}
	}
	return len(l) > 0
}

func nameOf(e any) string {
	m, _ := e.(map[string]any)
	n, _ := m["name"].(string)
	return n
}

func byName(l []any, name string) int {
	for i, e := range l {
		if nameOf(e) == name {
			return i
		}
	}
	return -1
}

// patchEdits writes the new patch bodies: into their files, or into the
// kustomization strings that hold them inline.
func patchEdits(files Files, bodies map[patchRef]string) ([]Edit, error) {
	var edits []Edit
	inline := map[string]*kyaml.RNode{}
	for p, body := range bodies {
		if p.file != "" {
			edits = append(edits, Edit{File: p.file, Content: []byte(body)})
			continue
		}
		k := inline[p.kfile]
		if k == nil {
			var err error
			if k, err = kyaml.Parse(string(files[p.kfile])); err != nil {
				return nil, fmt.Errorf("reading %s: %w", p.kfile, err)
			}
			inline[p.kfile] = k
		}
		list := k.Field(p.field)
		if list == nil || p.index >= len(list.Value.Content()) {
			return nil, fmt.Errorf("%s: %s[%d] is gone", p.kfile, p.field, p.index)
		}
		n := list.Value.Content()[p.index]
		if p.field != "patchesStrategicMerge" {
			f := kyaml.NewRNode(n).Field("patch")
			if f == nil {
				return nil, fmt.Errorf("%s: %s[%d] has no patch", p.kfile, p.field, p.index)
			}
			n = f.Value.YNode()
		}
		n.Value = body
		n.Style = kyaml.LiteralStyle
	}
	for kfile, k := range inline {
		edits = append(edits, Edit{File: kfile, Content: formatAs(k, files[kfile])})
	}
	return edits, nil
}
