// Package seal turns a document that holds credentials (a Secret's, or one
// whose credential fields a rule names) into a SOPS document encrypted to
// age recipients: those fields encrypted (a Secret's data and stringData),
// everything else in clear, as `sops --decrypt` and Flux's
// kustomize-controller read it.
//
// SOPS output is randomised, and the controller holds only the recipients,
// never an identity that could decrypt what Git holds. So that an unchanged
// Secret makes no commit, each document carries, in clear, a keyed digest
// of its plaintext (HMAC-SHA256, annotation DigestAnnotation); Seal returns
// the document Git holds when that digest and its recipients still match.
// The digest key never leaves the controller: without it a digest tells
// nothing about the values, not even whether two Secrets of different
// GitTargets hold the same ones, since each GitTarget has a key of its own.
//
// A Sealer is immutable and safe for concurrent use; nothing in it blocks
// but the CPU.
package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	"github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	sopskeys "github.com/getsops/sops/v3/keys"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// EncryptedRegex is what SOPS encrypts of a document: the fields named
// keys, everything below them included; for a Secret (data, stringData)
// what Flux documents.
func EncryptedRegex(keys []string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = regexp.QuoteMeta(k)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// digestVersion prefixes digests, so that a later scheme is told apart.
const digestVersion = "hmac-sha256:"

// Sealer seals the Secrets of one GitTarget.
type Sealer struct {
	recipients []string // sorted
	key        []byte   // the GitTarget's digest key
}

// New returns the Sealer of one GitTarget (domain: its namespace/name),
// encrypting to recipients, whose digests are keyed by a key derived from
// master and domain.
func New(recipients []string, master []byte, domain string) (*Sealer, error) {
	if len(recipients) == 0 {
		return nil, errors.New("no age recipients")
	}
	if len(master) < 16 {
		return nil, errors.New("the digest key is shorter than 16 bytes")
	}
	rs := make([]string, 0, len(recipients))
	for _, r := range recipients {
		r = strings.TrimSpace(r)
		if _, err := age.MasterKeyFromRecipient(r); err != nil {
			return nil, fmt.Errorf("age recipient %q: %w", r, err)
		}
		rs = append(rs, r)
	}
	slices.Sort(rs)
	rs = slices.Compact(rs)
	mac := hmac.New(sha256.New, master)
	mac.Write([]byte("reverser.dev/sops-digest/v1\x00" + domain))
	return &Sealer{recipients: rs, key: mac.Sum(nil)}, nil
}

// Recipients are the sorted recipients the Sealer encrypts to.
func (s *Sealer) Recipients() []string { return slices.Clone(s.recipients) }

// Seal returns the SOPS document of plain, a document without
// DigestAnnotation, with the fields named keys encrypted and the digest of
// plain, bound to the ciphertext, in DigestAnnotation. priors are
// documents already written for it (what Git holds at its path): the first
// that is a SOPS document of the same plaintext, encrypting the same keys,
// to the same recipients, is returned as it is.
func (s *Sealer) Seal(plain []byte, keys []string, priors ...[]byte) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("no field to encrypt")
	}
	digest := s.digest(plain, keys)
	for _, prior := range priors {
		if prior != nil && s.holds(prior, digest) {
			return prior, nil
		}
	}
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{})
	// Errors of the YAML libraries may quote the document: never wrapped,
	// since they would carry its values into logs.
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		return nil, errors.New("the document is not valid YAML")
	}
	if len(branches) != 1 {
		return nil, fmt.Errorf("the document holds %d YAML documents, not one", len(branches))
	}
	group := make(sops.KeyGroup, 0, len(s.recipients))
	for _, r := range s.recipients {
		k, err := age.MasterKeyFromRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("age recipient %q: %w", r, err)
		}
		group = append(group, sopskeys.MasterKey(k))
	}
	// The MAC covers the encrypted values only, so that the digest can be
	// written once they are known: it binds them (sealed).
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups:        []sops.KeyGroup{group},
		EncryptedRegex:   EncryptedRegex(keys),
		MACOnlyEncrypted: true,
		Version:          sopsVersion(),
	}}
	dataKey, errs := tree.GenerateDataKey()
	if len(errs) > 0 {
		return nil, fmt.Errorf("encrypting the data key: %w", errors.Join(errs...))
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		return nil, fmt.Errorf("encrypting the document's fields: %w", err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	if tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339)); err != nil {
		return nil, fmt.Errorf("encrypting the MAC: %w", err)
	}
	if err := annotate(tree.Branches[0], v1.SOPSDigestAnnotation, s.sealed(digest, tree)); err != nil {
		return nil, err
	}
	out, err := store.EmitEncryptedFile(tree)
	if err != nil {
		return nil, errors.New("the SOPS document cannot be written as YAML")
	}
	return out, nil
}

// digest is the keyed digest of plain with keys encrypted, as
// DigestAnnotation holds it.
func (s *Sealer) digest(plain []byte, keys []string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(EncryptedRegex(keys) + "\x00"))
	mac.Write(plain)
	return digestVersion + hex.EncodeToString(mac.Sum(nil))
}

// sealed is what DigestAnnotation holds: the plaintext's digest, then a
// keyed digest of it with the document's ciphertext (its encrypted values
// and MAC), so that a document of other values pushed with a copied digest
// is told apart (#27, finding 8): only the controller's key makes the
// second part, and it changes with every encryption.
func (s *Sealer) sealed(digest string, tree sops.Tree) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("reverser.dev/sops-ciphertext/v1\x00" + digest + "\x00" + tree.Metadata.MessageAuthenticationCode))
	for _, v := range encryptedValues(tree.Branches) {
		mac.Write([]byte("\x00" + v))
	}
	return digest + "." + hex.EncodeToString(mac.Sum(nil))
}

// encryptedValues are a document's SOPS ciphertexts ("ENC[...]"), in order.
func encryptedValues(branches sops.TreeBranches) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case sops.TreeBranch:
			for _, it := range v {
				walk(it.Value)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case string:
			if strings.HasPrefix(v, "ENC[") {
				out = append(out, v)
			}
		}
	}
	for _, b := range branches {
		walk(b)
	}
	return out
}

// holds says whether doc is a SOPS document of digest sealed by this
// Sealer's key (its ciphertext bound), encrypted to the Sealer's
// recipients and no others.
func (s *Sealer) holds(doc []byte, digest string) bool {
	tree, err := sopsyaml.NewStore(&config.YAMLStoreConfig{}).LoadEncryptedFile(doc)
	if err != nil || len(tree.Branches) != 1 || len(tree.Metadata.KeyGroups) != 1 || !tree.Metadata.MACOnlyEncrypted {
		return false
	}
	got, _ := annotation(tree.Branches[0], v1.SOPSDigestAnnotation)
	if !hmac.Equal([]byte(got), []byte(s.sealed(digest, tree))) {
		return false
	}
	var rs []string
	for _, k := range tree.Metadata.KeyGroups[0] {
		ak, ok := k.(*age.MasterKey)
		if !ok {
			return false // a key of another kind: not ours to keep
		}
		rs = append(rs, ak.Recipient)
	}
	slices.Sort(rs)
	return slices.Equal(rs, s.recipients)
}

// Recipients of a SOPS document's age keys, sorted; ok is false when doc is
// not a SOPS document.
func Recipients(doc []byte) (recipients []string, ok bool) {
	tree, err := sopsyaml.NewStore(&config.YAMLStoreConfig{}).LoadEncryptedFile(doc)
	if err != nil {
		return nil, false
	}
	for _, g := range tree.Metadata.KeyGroups {
		for _, k := range g {
			if ak, isAge := k.(*age.MasterKey); isAge {
				recipients = append(recipients, ak.Recipient)
			}
		}
	}
	slices.Sort(recipients)
	return recipients, true
}

// annotate sets metadata.annotations[key] = value in a document's branch.
func annotate(doc sops.TreeBranch, key, value string) error {
	i := slices.IndexFunc(doc, func(it sops.TreeItem) bool { return it.Key == "metadata" })
	if i < 0 {
		return errors.New("the document has no metadata")
	}
	md, ok := doc[i].Value.(sops.TreeBranch)
	if !ok {
		return errors.New("the document's metadata is not a mapping")
	}
	j := slices.IndexFunc(md, func(it sops.TreeItem) bool { return it.Key == "annotations" })
	if j < 0 {
		md = append(md, sops.TreeItem{Key: "annotations", Value: sops.TreeBranch{}})
		j = len(md) - 1
	}
	ann, ok := md[j].Value.(sops.TreeBranch)
	if !ok {
		return errors.New("the document's annotations are not a mapping")
	}
	if k := slices.IndexFunc(ann, func(it sops.TreeItem) bool { return it.Key == key }); k >= 0 {
		ann[k].Value = value
	} else {
		ann = append(ann, sops.TreeItem{Key: key, Value: value})
	}
	md[j].Value = ann
	doc[i].Value = md
	return nil
}

// annotation reads metadata.annotations[key] of a document's branch.
func annotation(doc sops.TreeBranch, key string) (string, bool) {
	for _, it := range doc {
		if it.Key != "metadata" {
			continue
		}
		md, _ := it.Value.(sops.TreeBranch)
		for _, m := range md {
			if m.Key != "annotations" {
				continue
			}
			ann, _ := m.Value.(sops.TreeBranch)
			for _, a := range ann {
				if a.Key == key {
					v, ok := a.Value.(string)
					return v, ok
				}
			}
		}
	}
	return "", false
}

// sopsVersion is the version of the SOPS library this binary was built
// with, which SOPS records in each document.
func sopsVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/getsops/sops/v3" {
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "3"
}
