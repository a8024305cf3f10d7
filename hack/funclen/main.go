// Command funclen fails when a function under the given folders is longer
// than -max lines (generated code and tests aside): long functions are
// where this code base's bugs hid, so `make verify` keeps them short.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 80, "longest function allowed, in lines")
	flag.Parse()
	var long []string
	fset := token.NewFileSet()
	for _, root := range flag.Args() {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "generated":
				return filepath.SkipDir
			case d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated"):
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
				if n := end.Line - start.Line + 1; n > *maxLines {
					long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", p, start.Line, fn.Name.Name, n))
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	for _, l := range long {
		fmt.Fprintf(os.Stderr, "%s, over %d: split it into the steps it takes\n", l, *maxLines)
	}
	if len(long) > 0 {
		os.Exit(1)
	}
}
