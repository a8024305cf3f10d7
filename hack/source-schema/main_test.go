package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// The files in artifacts/source are what the generator writes now
// (hack/verify-codegen.sh checks the same, after regenerating everything).
func TestArtifactsUpToDate(t *testing.T) {
	files, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(files) {
		have, err := os.ReadFile(filepath.Join("..", "..", "artifacts", "source", filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("artifacts/source/%s: %v: run hack/update-codegen.sh", name, err)
			continue
		}
		if !bytes.Equal(have, files[name]) {
			t.Errorf("artifacts/source/%s is stale: run hack/update-codegen.sh", name)
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b, err := render()
		if err != nil {
			t.Fatal(err)
		}
		for name := range a {
			if !bytes.Equal(a[name], b[name]) {
				t.Fatalf("%s differs between two runs", name)
			}
		}
	}
}

func TestParseRevision(t *testing.T) {
	for desc, want := range map[string][2]int{
		"Saves.\n\nSchema revision 3, compatible from revision 2.": {3, 2},
		"Schema revision 1, compatible from revision 1.":           {1, 1},
	} {
		rev, compat, err := parseRevision(desc)
		if err != nil || rev != want[0] || compat != want[1] {
			t.Errorf("%q: %d, %d, %v; want %v", desc, rev, compat, err, want)
		}
	}
	for _, desc := range []string{
		"Saves.",
		"Saves. Schema revision 1, compatible from revision 1.", // not its own paragraph
		"Saves.\n\nSchema revision 1, compatible from revision 2.",
		"Saves.\n\nSchema revision 0, compatible from revision 0.",
		"Saves.\n\nSchema revision 1, compatible from revision 1.\n\nMore.",
	} {
		if _, _, err := parseRevision(desc); err == nil {
			t.Errorf("%q: accepted", desc)
		}
	}
}

func TestConverter(t *testing.T) {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: "A string."}}
	defs := map[string]common.OpenAPIDefinition{
		"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
			"metadata": {SchemaProps: spec.SchemaProps{Ref: ref("meta"), Default: map[string]any{}}},
			"s":        {SchemaProps: spec.SchemaProps{Ref: ref("str"), Description: "Mine.", Default: "x"}},
			"list": {
				VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{
					"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": []any{"s"},
					"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "s",
				}},
				SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &spec.Schema{
					SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{"s": str}},
				}}},
			},
		}}}},
		"meta": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Description: "Not kept."}}},
		"str":  {Schema: str},
	}
	got, err := (&converter{defs: defs}).definition("root", "")
	if err != nil {
		t.Fatal(err)
	}
	props := got["properties"].(map[string]any)
	if md := props["metadata"].(map[string]any); len(md) != 1 || md["type"] != "object" {
		t.Errorf("metadata is %v, want just type: object", md)
	}
	if s := props["s"].(map[string]any); s["type"] != "string" || s["description"] != "Mine." || s["default"] != "x" {
		t.Errorf("a $ref with a description and default is %v, want the string with both of the property's", s)
	}
	list := props["list"].(map[string]any)
	if list["x-kubernetes-list-type"] != "map" || list["x-kubernetes-patch-strategy"] != nil || list["x-kubernetes-patch-merge-key"] != nil {
		t.Errorf("list extensions are %v, want the list type without the patch strategy", list)
	}

	for name, s := range map[string]spec.Schema{
		"uniqueItems": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, UniqueItems: true}},
		"oneOf":       {SchemaProps: spec.SchemaProps{OneOf: []spec.Schema{str, str}}},
		"an unknown extension": {VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-unions": []any{}}},
			SchemaProps: spec.SchemaProps{Type: []string{"object"}}},
	} {
		defs := map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, Properties: map[string]spec.Schema{"p": s},
		}}}}
		if _, err := (&converter{defs: defs}).definition("root", ""); err == nil || !strings.Contains(err.Error(), "CommitRequest.p") {
			t.Errorf("%s: %v, want an error naming the field", name, err)
		}
	}

	recursive := map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
		Type: []string{"object"}, Properties: map[string]spec.Schema{"self": {SchemaProps: spec.SchemaProps{Ref: ref("root")}}},
	}}}}
	if _, err := (&converter{defs: recursive}).definition("root", ""); err == nil {
		t.Error("a recursive definition converts")
	}
}
