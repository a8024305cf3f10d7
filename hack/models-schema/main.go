// Command models-schema prints the OpenAPI v2 definitions of our API, which
// applyconfiguration-gen reads to know each type's merge rules.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"reverser.dev/reverser/pkg/generated/openapi"
)

func main() {
	if err := output(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func output() error {
	refFunc := func(name string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + name)
	}
	defs := openapi.GetOpenAPIDefinitions(refFunc)
	schemaDefs := make(map[string]spec.Schema, len(defs))
	for k, v := range defs {
		// Prefer an embedded v2 schema so the output is always OpenAPI v2.
		if schema, ok := v.Schema.Extensions[common.ExtensionV2Schema]; ok {
			if v2Schema, isSchema := schema.(spec.Schema); isSchema {
				schemaDefs[k] = v2Schema
				continue
			}
		}
		schemaDefs[k] = v.Schema
	}
	data, err := json.Marshal(&spec.Swagger{
		SwaggerProps: spec.SwaggerProps{
			Definitions: schemaDefs,
			Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "reverser.dev", Version: "unversioned"}},
			Swagger:     "2.0",
		},
	})
	if err != nil {
		return fmt.Errorf("serializing definitions: %w", err)
	}
	_, err = os.Stdout.Write(data)
	return err
}
