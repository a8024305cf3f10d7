package document

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// Policy is what a stream does with credentials: Secrets, and the fields
// of other kinds that rules name (ResourceRule credentialFields).
type Policy struct {
	Secrets Secrets
	// Drop are fields left out of every document; Encrypt are fields whose
	// objects are handed on to be sealed, these fields encrypted. Each is a
	// path of map keys, "*" standing for every key.
	Drop, Encrypt []FieldPath
}

// FieldPath is a field's keys from the object's root.
type FieldPath []string

func (p FieldPath) String() string { return strings.Join(p, ".") }

// secretValues are what a Secret's document encrypts.
var secretValues = []string{"data", "stringData"}

// NewPolicy is the policy of a scope fed by rules naming fields. A field
// both dropped and encrypted is dropped: what is not written cannot leak.
func NewPolicy(secrets Secrets, fields []v1.CredentialField) Policy {
	p := Policy{Secrets: secrets}
	drop := map[string]bool{}
	for _, f := range fields {
		if f.Action != v1.CredentialEncrypt {
			drop[f.Path] = true
		}
	}
	enc := map[string]bool{}
	for _, f := range fields {
		if !drop[f.Path] {
			enc[f.Path] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(drop)) {
		p.Drop = append(p.Drop, strings.Split(k, "."))
	}
	for _, k := range slices.Sorted(maps.Keys(enc)) {
		p.Encrypt = append(p.Encrypt, strings.Split(k, "."))
	}
	return p
}

// Document is obj's document under the policy, and the keys its sealed
// document encrypts (none: written in clear).
func (p Policy) Document(gr schema.GroupResource, obj *unstructured.Unstructured) (content []byte, encrypt []string, err error) {
	o := clean(gr, obj)
	for _, f := range p.Drop {
		drop(o, f)
	}
	content, err = marshalOrdered(o)
	return content, p.encrypted(gr, o), err
}

// String tells policies apart: a stream restarts when its policy changes.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(map[Secrets]string{SkipSecrets: "skip", SealSecrets: "seal"}[p.Secrets])
	for _, f := range p.Drop {
		b.WriteString(" -" + f.String())
	}
	for _, f := range p.Encrypt {
		b.WriteString(" +" + f.String())
	}
	return b.String()
}

// encrypted says which keys a sealed document of obj encrypts: a Secret's
// values, else the last named key of each Encrypt field obj has; none when
// the document is written in clear.
func (p Policy) encrypted(gr schema.GroupResource, obj map[string]any) []string {
	if gr == SecretsResource {
		return secretValues
	}
	var keys []string
	for _, f := range p.Encrypt {
		if has(obj, f) {
			keys = append(keys, lastNamed(f))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// lastNamed is the last key of f that is not "*": the key SOPS encrypts,
// and with it everything below.
func lastNamed(f FieldPath) string {
	for i := len(f) - 1; i >= 0; i-- {
		if f[i] != "*" {
			return f[i]
		}
	}
	return ""
}

// has says whether obj holds a field at f.
func has(obj map[string]any, f FieldPath) bool {
	if len(f) == 0 {
		return true
	}
	for k, v := range obj {
		if f[0] != "*" && k != f[0] {
			continue
		}
		if len(f) == 1 {
			return true
		}
		if m, ok := v.(map[string]any); ok && has(m, f[1:]) {
			return true
		}
	}
	return false
}

// drop removes the fields at f from obj, and maps it leaves empty.
func drop(obj map[string]any, f FieldPath) {
	for k, v := range obj {
		if f[0] != "*" && k != f[0] {
			continue
		}
		if len(f) == 1 {
			delete(obj, k)
			continue
		}
		if m, ok := v.(map[string]any); ok {
			drop(m, f[1:])
			if len(m) == 0 {
				delete(obj, k)
			}
		}
	}
}
