package kustomize

import (
	"fmt"
	"reflect"
	"slices"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// carry writes into src, a source document, what changed from rendered to
// live: a field live sets differently is set, one it drops is removed, and
// everything else of src stays as it is, comments and key order included.
// A list of the same length is carried element by element, so a changed
// container image keeps the comments of the rest; a list that grew or
// shrank is replaced.
func carry(src *kyaml.RNode, rendered, live any) error {
	if reflect.DeepEqual(rendered, live) {
		return nil
	}
	switch l := live.(type) {
	case map[string]any:
		r, ok := rendered.(map[string]any)
		if !ok || src.YNode().Kind != kyaml.MappingNode {
			return replace(src, live)
		}
		for _, k := range sortedKeys(r) {
			if _, kept := l[k]; !kept {
				if _, err := src.Pipe(kyaml.Clear(k)); err != nil {
					return err
				}
			}
		}
		for _, k := range sortedKeys(l) {
			field := src.Field(k)
			if field == nil {
				// A field the render has but the source lacks comes from a
				// transformer: writing it into the source would not be the
				// live change. The render check finds those. A map the
				// transformer fills (labels, annotations) takes what the live
				// change adds beside it, in a map of the source's own.
				if rv, fromRender := r[k]; fromRender {
					if err := carryBeside(src, k, rv, l[k]); err != nil {
						return fmt.Errorf("%s: %w", k, err)
					}
					continue
				}
				n, err := nodeOf(l[k])
				if err != nil {
					return err
				}
				if err := src.PipeE(kyaml.SetField(k, n)); err != nil {
					return err
				}
				continue
			}
			if err := carry(field.Value, r[k], l[k]); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case []any:
		r, ok := rendered.([]any)
		if !ok || len(r) != len(l) || src.YNode().Kind != kyaml.SequenceNode || len(src.Content()) != len(l) {
			return replace(src, live)
		}
		for i := range l {
			if err := carry(kyaml.NewRNode(src.Content()[i]), r[i], l[i]); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	default:
		return replace(src, live)
	}
}

// formatAs writes n with the sequence indentation of orig, the text it
// was read from: a file keeps the style its author chose ("- " under its
// key, or two spaces in).
func formatAs(n *kyaml.RNode, orig []byte) []byte {
	style := kyaml.SequenceIndentStyle(kyaml.DeriveSeqIndentStyle(string(orig)))
	out, err := kyaml.MarshalWithOptions(n.YNode(), &kyaml.EncoderOptions{SeqIndent: style})
	if err != nil {
		return []byte(n.MustString())
	}
	return out
}

// replace puts v in n's place, keeping n's comments.
func replace(n *kyaml.RNode, v any) error {
	nn, err := nodeOf(v)
	if err != nil {
		return err
	}
	y := n.YNode()
	head, line, foot := y.HeadComment, y.LineComment, y.FootComment
	*y = *nn.YNode()
	y.HeadComment, y.LineComment, y.FootComment = head, line, foot
	return nil
}

func nodeOf(v any) (*kyaml.RNode, error) {
	data, err := kyaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	return kyaml.Parse(string(data))
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// carryBeside writes into a new map k of src what live adds to rendered, a
// map a transformer made; nothing when the change is not that.
func carryBeside(src *kyaml.RNode, k string, rendered, live any) error {
	r, rok := rendered.(map[string]any)
	l, lok := live.(map[string]any)
	if !rok || !lok || reflect.DeepEqual(r, l) {
		return nil
	}
	n := kyaml.NewMapRNode(nil)
	if err := carry(n, r, l); err != nil {
		return err
	}
	if len(n.Content()) == 0 {
		return nil
	}
	return src.PipeE(kyaml.SetField(k, n))
}
