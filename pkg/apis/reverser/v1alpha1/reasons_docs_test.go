package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// productReasons reads the controllers' and servers' sources under dir for
// the condition and Event reasons they write: string literals given to a
// field or key named Reason or reason, to a parameter named reason of a
// function of the same sources, or as the value of a constant named
// Reason*. It returns each with where it is written.
func productReasons(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "generated" {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Which arguments of each function name are a reason.
	reasonArgs := map[string][]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			i := 0
			for _, field := range fd.Type.Params.List {
				for j, name := range field.Names {
					if name.Name == "reason" {
						reasonArgs[fd.Name.Name] = append(reasonArgs[fd.Name.Name], i+j)
					}
				}
				i += max(len(field.Names), 1)
			}
		}
	}
	reasons := map[string]string{}
	add := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil && v != "" {
				reasons[v] = fset.Position(lit.Pos()).String()
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok && strings.EqualFold(id.Name, "reason") {
					add(n.Value)
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if strings.HasPrefix(name.Name, "Reason") && i < len(n.Values) {
						add(n.Values[i])
					}
				}
			case *ast.CallExpr:
				var name string
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				for _, i := range reasonArgs[name] {
					if i < len(n.Args) {
						add(n.Args[i])
					}
				}
			}
			return true
		})
	}
	return reasons
}

// Every condition and Event reason the product writes is named in its docs
// (#29), in a code span (`False SecretNotFound`, `Pushed`).
func TestDocsNameEveryReason(t *testing.T) {
	words := map[string]bool{}
	docs, err := filepath.Glob("../../../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatal(err)
		}
		codeWords(string(b), words)
	}
	reasons := productReasons(t, "../../../../pkg")
	if len(reasons) < 50 {
		t.Fatalf("only %d reasons found in pkg/: the scan no longer sees how reasons are written", len(reasons))
	}
	for r, at := range reasons {
		if !words[r] {
			t.Errorf("reason %q (%s) is in no code span of docs/", r, at)
		}
	}
}

// The scan must find reasons however they are written.
func TestProductReasonsFindsEachForm(t *testing.T) {
	dir := t.TempDir()
	src := `package p
const ReasonPushed = "Pushed"
type outcome struct{ reason string }
func reasonf(reason, format string, args ...any) error { return nil }
func cond(typ string, ok bool, reason string) {}
func f() {
	_ = outcome{reason: "Keyed"}
	_ = reasonf("Called", "x")
	cond("Ready", true, "Third")
	_ = struct{ Reason string }{Reason: "Field"}
	_ = "NotAReason"
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := productReasons(t, dir)
	for _, want := range []string{"Pushed", "Keyed", "Called", "Third", "Field"} {
		if _, ok := got[want]; !ok {
			t.Errorf("%s not found", want)
		}
	}
	if _, ok := got["NotAReason"]; ok || len(got) != 5 {
		t.Errorf("found %v, want the five reasons only", got)
	}
}

// codeWords adds the words of text's code: its code spans, and its fenced
// blocks whole (whose backticks would otherwise pair with the text's).
func codeWords(text string, words map[string]bool) {
	var prose strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			fenced = !fenced
		case fenced:
			for _, w := range identRE.FindAllString(line, -1) {
				words[w] = true
			}
		default:
			prose.WriteString(line + "\n")
		}
	}
	for _, m := range codeRE.FindAllStringSubmatch(prose.String(), -1) {
		for _, w := range identRE.FindAllString(m[1], -1) {
			words[w] = true
		}
	}
}
