package document

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// runtimeMetadata are metadata fields the cluster sets; they change without
// anybody editing the object and mean nothing in another cluster.
var runtimeMetadata = []string{
	"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp", "deletionTimestamp",
	"deletionGracePeriodSeconds", "selfLink", "ownerReferences", "finalizers", "generateName",
}

// lastApplied is kubectl's copy of what it applied: the whole object again.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// runtimeAnnotations and label/annotation prefixes that appliers and
// controllers stamp on objects.
var (
	runtimeAnnotations = map[string]bool{
		lastApplied:                         true,
		"deployment.kubernetes.io/revision": true,
		// An applier puts a sealed Secret's digest on the cluster.
		v1.SOPSDigestAnnotation: true,
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
		DropStrings(md, "annotations", func(k string) bool { return runtimeAnnotations[k] || hasApplierPrefix(k) })
		DropStrings(md, "labels", hasApplierPrefix)
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

// DropStrings deletes from md[field] (annotations, labels) the keys drop
// says, and the field once it is empty.
func DropStrings(md map[string]any, field string, drop func(string) bool) {
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

// yamlKeyLess is the YAML encoder's order of string keys: letters by code
// point, before digits and other characters; runs of digits by value, a
// longer run after a shorter one of the same value (leading zeros).
func yamlKeyLess(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al, bl := unicode.IsLetter(ar[i]), unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			// Inside a number whose earlier digits are not all zero,
			// zeros count as digits, not as padding.
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		ai, bi := i, i
		for ; ai < len(ar) && unicode.IsDigit(ar[ai]); ai++ {
			an = an*10 + int64(ar[ai]-'0')
		}
		for ; bi < len(br) && unicode.IsDigit(br[bi]); bi++ {
			bn = bn*10 + int64(br[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

// marshalOrdered writes apiVersion, kind and metadata first, then the other
// top-level fields sorted; nested maps are sorted by the YAML encoder. It
// writes the bytes sigs.k8s.io/yaml would write for each field in turn
// (TestMarshalOrderedAsBefore), with one encoder per document instead of a
// JSON round trip, a parser and an encoder per field: for a snapshot of many
// objects, those were most of what the controller allocated.
func marshalOrdered(o map[string]any) ([]byte, error) {
	doc := make(yaml.MapSlice, 0, len(o))
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if v, ok := o[k]; ok {
			doc = append(doc, yaml.MapItem{Key: k, Value: yamlValue(v)})
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
		doc = append(doc, yaml.MapItem{Key: k, Value: yamlValue(o[k])})
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the document: %w", err)
	}
	return b, nil
}

// yamlValue is v as a JSON round trip hands it to the YAML encoder, with
// each map's keys in the encoder's order. The encoder sorts a map itself,
// but its order is not transitive ("1" < "02" < "0o17" < "1"), so it used
// to write such keys in whatever order the map was walked: one object gave
// different documents. Sorted from a fixed order, keys the encoder orders
// consistently come out as it writes them, and the others always the same.
func yamlValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if v == nil {
			return nil
		}
		keys := slices.Sorted(maps.Keys(v))
		sort.SliceStable(keys, func(i, j int) bool { return yamlKeyLess(keys[i], keys[j]) })
		m := make(yaml.MapSlice, len(keys))
		for i, k := range keys {
			m[i] = yaml.MapItem{Key: k, Value: yamlValue(v[k])}
		}
		return m
	case []any:
		if v == nil {
			return nil
		}
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = yamlValue(e)
		}
		return l
	case float64:
		// Rare in objects (whole numbers decode as int64): the value YAML
		// reads from JSON's text of it, exactly as the round trip did.
		b, err := json.Marshal(v)
		var out any
		if err == nil && yaml.Unmarshal(b, &out) == nil {
			return out
		}
	}
	return v
}
