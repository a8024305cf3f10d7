// Package watch turns live objects into the documents Reverser writes: it
// strips runtime fields, decides what is never mirrored, lays documents out
// in the repository, and runs the watch streams that feed branch workers.
package watch

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// runtimeMetadata are metadata fields the cluster sets; they change without
// anybody editing the object and mean nothing in another cluster.
var runtimeMetadata = []string{
	"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "deletionTimestamp",
	"deletionGracePeriodSeconds", "selfLink", "ownerReferences", "finalizers", "generateName",
}

// SOPSDigestAnnotation holds the keyed digest of a sealed Secret's
// plaintext (package seal).
const SOPSDigestAnnotation = "reverser.dev/sops-digest"

// lastApplied is kubectl's copy of what it applied: the whole object again.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// runtimeAnnotations and label/annotation prefixes that appliers and
// controllers stamp on objects.
var (
	runtimeAnnotations = map[string]bool{
		lastApplied:                         true,
		"deployment.kubernetes.io/revision": true,
		// An applier puts a sealed Secret's digest on the cluster.
		SOPSDigestAnnotation: true,
	}
	applierPrefixes = []string{"kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/", "argocd.argoproj.io/"}
)

// perType lists fields allocated by the cluster for some kinds.
var perType = map[schema.GroupResource][][]string{
	{Group: "", Resource: "services"}:               {{"spec", "clusterIP"}, {"spec", "clusterIPs"}},
	{Group: "", Resource: "persistentvolumeclaims"}: {{"spec", "volumeName"}},
	{Group: "", Resource: "serviceaccounts"}:        {{"secrets"}},
	{Group: "apps", Resource: "deployments"}:        {{"spec", "template", "metadata", "creationTimestamp"}},
	{Group: "apps", Resource: "statefulsets"}:       {{"spec", "template", "metadata", "creationTimestamp"}},
	{Group: "apps", Resource: "daemonsets"}:         {{"spec", "template", "metadata", "creationTimestamp"}},
	{Group: "batch", Resource: "cronjobs"}:          {{"spec", "jobTemplate", "metadata", "creationTimestamp"}},
	{Group: "", Resource: "replicationcontrollers"}: {{"spec", "template", "metadata", "creationTimestamp"}},
}

// Sanitize returns the document for obj: no status, no runtime metadata, no
// applier tracking, as deterministic YAML with apiVersion, kind and metadata
// first. Two objects that differ only in runtime fields give the same bytes.
func Sanitize(gr schema.GroupResource, obj *unstructured.Unstructured) ([]byte, error) {
	return marshalOrdered(clean(gr, obj))
}

// clean is a copy of obj without status, runtime metadata and applier
// tracking.
func clean(gr schema.GroupResource, obj *unstructured.Unstructured) map[string]any {
	o := obj.DeepCopy().Object
	delete(o, "status")
	if md, ok := o["metadata"].(map[string]any); ok {
		for _, f := range runtimeMetadata {
			delete(md, f)
		}
		cleanStrings(md, "annotations", func(k string) bool { return runtimeAnnotations[k] || hasApplierPrefix(k) })
		cleanStrings(md, "labels", hasApplierPrefix)
	}
	for _, path := range perType[gr] {
		unstructured.RemoveNestedField(o, path...)
	}
	return o
}

func hasApplierPrefix(k string) bool {
	for _, p := range applierPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func cleanStrings(md map[string]any, field string, drop func(string) bool) {
	m, ok := md[field].(map[string]any)
	if !ok {
		return
	}
	for k := range m {
		if drop(k) {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		delete(md, field)
	}
}

// marshalOrdered writes apiVersion, kind and metadata first, then the other
// top-level fields sorted; nested maps are sorted by the YAML encoder.
func marshalOrdered(o map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	write := func(k string) error {
		v, ok := o[k]
		if !ok {
			return nil
		}
		b, err := yaml.Marshal(map[string]any{k: v})
		if err != nil {
			return fmt.Errorf("encoding %s: %w", k, err)
		}
		buf.Write(b)
		return nil
	}
	first := []string{"apiVersion", "kind", "metadata"}
	for _, k := range first {
		if err := write(k); err != nil {
			return nil, err
		}
	}
	rest := make([]string, 0, len(o))
	for k := range o {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		if err := write(k); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}
