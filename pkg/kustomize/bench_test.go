package kustomize

import (
	"fmt"
	"strings"
	"testing"
)

// corpus is a folder of n ConfigMaps, listed in a kustomization or not.
func corpus(n int, kustomized bool) Files {
	files := Files{}
	var res strings.Builder
	res.WriteString("namespace: shop\nresources:\n")
	for i := range n {
		p := fmt.Sprintf("site/cm-%04d.yaml", i)
		files[p] = fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%04d\n  namespace: shop\ndata:\n  v: \"%d\"\n", i, i)
		fmt.Fprintf(&res, "- cm-%04d.yaml\n", i)
	}
	if kustomized {
		files["site/kustomization.yaml"] = []byte(res.String())
	}
	return files
}

// One edit of one of 1,000 objects: kustomized (two renders) against the
// plain folder (a document index).
func BenchmarkPlanOneEditOf1000(b *testing.B) {
	for _, kustomized := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "kustomized"}[kustomized], func(b *testing.B) {
			files := corpus(1000, kustomized)
			ch := Change{ID: ID{Kind: "ConfigMap", Namespace: "shop", Name: "cm-0500"},
				New: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-0500\n  namespace: shop\ndata:\n  v: changed\n")}
			for b.Loop() {
				edits, err := Plan(files, "site", ch)
				if err != nil || len(edits) != 1 {
					b.Fatalf("%v %v", edits, err)
				}
			}
		})
	}
}
