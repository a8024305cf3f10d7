package v1alpha1_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// docSections maps each kind to the heading of docs/api.md that documents it.
var docSections = map[string]struct {
	heading string
	obj     any
}{
	"GitProvider":      {"GitProvider", v1.GitProvider{}},
	"KubeProvider":     {"KubeProvider", v1.KubeProvider{}},
	"GitTarget":        {"GitTarget", v1.GitTarget{}},
	"WatchRule":        {"WatchRule and ClusterWatchRule", v1.WatchRule{}},
	"ClusterWatchRule": {"WatchRule and ClusterWatchRule", v1.ClusterWatchRule{}},
	"CommitRequest":    {"CommitRequest", v1.CommitRequest{}},
	"FluxClaim":        {"FluxClaim and ArgoCDClaim", v1.FluxClaim{}},
	"ArgoCDClaim":      {"FluxClaim and ArgoCDClaim", v1.ArgoCDClaim{}},
}

// fieldPaths lists the JSON paths of t's fields, parents before children.
func fieldPaths(prefix string, t reflect.Type, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t.PkgPath() != reflect.TypeOf(v1.GitTarget{}).PkgPath() {
		return nil
	}
	seen[t] = true
	defer delete(seen, t)
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" { // inlined
			out = append(out, fieldPaths(prefix, f.Type, seen)...)
			continue
		}
		p := prefix + "." + name
		out = append(out, p)
		out = append(out, fieldPaths(p, f.Type, seen)...)
	}
	return out
}

func section(t *testing.T, doc, heading string) string {
	_, s, ok := strings.Cut(doc, "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/api.md has no section %q", heading)
	}
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

var (
	codeRE  = regexp.MustCompile("`([^`]+)`")
	identRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
)

// units splits a section into what documents one thing: table rows, and
// paragraphs or list items elsewhere.
func units(text string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "|"):
			flush()
			out = append(out, trimmed)
		case trimmed == "", strings.HasPrefix(trimmed, "- "):
			flush()
			cur.WriteString(trimmed)
		default:
			cur.WriteString(" " + trimmed)
		}
	}
	flush()
	return out
}

// braceRE finds a.{x,y}: the fields x and y of a.
var braceRE = regexp.MustCompile(`^([A-Za-z0-9.]*)\{([A-Za-z0-9, ]+)\}$`)

// spans are the code spans of a unit as field paths: spec.rules[].resources
// is spec.rules.resources, a.{x,y} is a.x and a.y, and .email after
// spec.committer.name is spec.committer.email.
func spans(u string) []string {
	var out []string
	last := ""
	for _, m := range codeRE.FindAllStringSubmatch(u, -1) {
		s := strings.ReplaceAll(m[1], "[]", "")
		if strings.HasPrefix(s, ".") && strings.Contains(last, ".") {
			s = last[:strings.LastIndex(last, ".")] + s
		}
		if b := braceRE.FindStringSubmatch(s); b != nil && b[1] != "" {
			for _, f := range strings.Split(b[2], ",") {
				out = append(out, b[1]+strings.TrimSpace(f))
			}
			continue
		}
		out = append(out, s)
		last = s
	}
	return out
}

// documented reports whether a unit names path: as it is, without its
// spec./status. prefix, through a child, or as its parent's with the field
// named beside it (`{namespace, name, key}`, "Status: `a` (`b`, `c`)").
func documented(us []string, path string) bool {
	_, short, _ := strings.Cut(path, ".")
	parent, leaf := path[:strings.LastIndex(path, ".")], path[strings.LastIndex(path, ".")+1:]
	_, shortParent, _ := strings.Cut(parent, ".")
	grand := parent[:max(strings.LastIndex(parent, "."), 0)]
	parentLeaf := parent[strings.LastIndex(parent, ".")+1:]
	for _, u := range us {
		ss := spans(u)
		words := map[string]bool{}
		parentNamed, grandNamed, parentLeafNamed := false, false, false
		for _, s := range ss {
			for _, name := range []string{path, short} {
				if name != "" && (s == name || strings.HasPrefix(s, name+".") || strings.HasPrefix(s, name+":")) {
					return true
				}
			}
			parentNamed = parentNamed || s == parent || (shortParent != "" && s == shortParent) || strings.HasPrefix(s, parent+" ")
			grandNamed = grandNamed || (grand != "" && (s == grand || strings.HasPrefix(s, grand+".")))
			parentLeafNamed = parentLeafNamed || s == parentLeaf
			for _, w := range identRE.FindAllString(s, -1) {
				words[w] = true
			}
		}
		if (parentNamed || (grandNamed && parentLeafNamed)) && words[leaf] {
			return true
		}
	}
	return false
}

// Every field of every kind is named in its section of docs/api.md (#29);
// status.observedGeneration and status.conditions are the Conventions'.
func TestDocsNameEveryField(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	conventions := section(t, doc, "Conventions")
	for _, common := range []string{"`status.observedGeneration`", "`status.conditions`"} {
		if !strings.Contains(conventions, common) {
			t.Errorf("Conventions do not name %s", common)
		}
	}
	for kind, s := range docSections {
		us := units(section(t, doc, s.heading))
		typ := reflect.TypeOf(s.obj)
		for _, top := range []string{"Spec", "Status"} {
			f, ok := typ.FieldByName(top)
			if !ok {
				continue
			}
			for _, p := range fieldPaths(strings.ToLower(top), f.Type, map[reflect.Type]bool{}) {
				if p == "status.observedGeneration" || p == "status.conditions" {
					continue
				}
				if !documented(us, p) {
					t.Errorf("docs/api.md, section %s: %s of %s is not documented", s.heading, p, kind)
				}
			}
		}
	}
}

// The matcher must not pass what a unit does not name.
func TestDocumentedNeedsTheFieldNamed(t *testing.T) {
	us := units("| `spec.ref` | none | `{name, key}` of a Secret. |\n\nStatus: `streams.{desired,running}`, `last.sha`.\n\n" +
		"| `spec.committer.name` / `.email` | x | y |\n| `spec.rules[].resources` | required | z |")
	for path, want := range map[string]bool{
		"spec.ref": true, "spec.ref.name": true, "spec.ref.key": true, "spec.ref.namespace": false,
		"status.streams.desired": true, "status.streams.running": true, "status.streams.stopped": false,
		"status.last.sha": true, "status.last.time": false,
		"spec.committer.email": true, "spec.committer.phone": false,
		"spec.rules.resources": true, "spec.rules.apiGroups": false, "spec.other": false,
	} {
		if got := documented(us, path); got != want {
			t.Errorf("documented(%s) = %v, want %v", path, got, want)
		}
	}
}
