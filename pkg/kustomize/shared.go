package kustomize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// sharedInputs are the repository's files that a Flux HelmRelease
// (spec.chart.spec.valuesFiles, relative to the source's root) or an Argo
// CD Application (helm.valueFiles, relative to its source's path) reads as
// values, with who reads them: a generator input that is also a values
// file belongs to both, so a live edit of the ConfigMap is not written into
// it and deleting the ConfigMap keeps it.
func sharedInputs(files Files) map[string]string {
	out := map[string]string{}
	for _, p := range sortedPaths(files) {
		if !isYAML(p) || IsKustomization(p) {
			continue
		}
		d := kyaml.NewDecoder(bytes.NewReader(files[p]))
		for {
			var doc struct {
				Kind     string `yaml:"kind"`
				Metadata struct{ Name, Namespace string }
				Spec     struct {
					Chart struct {
						Spec struct {
							ValuesFiles []string `yaml:"valuesFiles"`
						}
					}
					Source  argoSource   `yaml:"source"`
					Sources []argoSource `yaml:"sources"`
				}
			}
			err := d.Decode(&doc)
			if errors.Is(err, io.EOF) || err != nil {
				break
			}
			who := fmt.Sprintf("%s %s/%s", doc.Kind, doc.Metadata.Namespace, doc.Metadata.Name)
			switch doc.Kind {
			case "HelmRelease":
				for _, f := range doc.Spec.Chart.Spec.ValuesFiles {
					out[join(".", f)] = who
				}
			case "Application":
				for _, s := range append([]argoSource{doc.Spec.Source}, doc.Spec.Sources...) {
					for _, f := range s.Helm.ValueFiles {
						out[join(s.Path, f)] = who
					}
				}
			}
		}
	}
	return out
}

type argoSource struct {
	Path string `yaml:"path"`
	Helm struct {
		ValueFiles []string `yaml:"valueFiles"`
	} `yaml:"helm"`
}

// sharedWith says who else reads an input file, or "".
func sharedWith(files Files, file string) string {
	return sharedInputs(files)[path.Clean(file)]
}
