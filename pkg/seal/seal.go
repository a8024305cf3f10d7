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
// The SOPS format is written here, not by the SOPS library, whose every
// package links the cloud KMS clients (AWS, Azure, GCP, Vault) a controller
// that only encrypts to age recipients never uses: a data key of 32 random
// bytes, encrypted to each recipient with age (armored); each value below a
// field to encrypt sealed with AES-256-GCM (32-byte nonce, the value's key
// path joined by ":" as additional data) as ENC[AES256_GCM,data:,iv:,tag:,
// type:]; a MAC, SHA-512 over the encrypted values only (mac_only_encrypted),
// sealed the same way with lastmodified as additional data; and the sops:
// block SOPS writes, keys sorted. Tests decrypt what it writes with the SOPS
// library and CLI, and Flux's kustomize-controller applies it (test/e2e).
//
// A Sealer is immutable and safe for concurrent use; nothing in it blocks
// but the CPU.
package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"go.yaml.in/yaml/v3"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// SOPSVersion is the version each document records: the oldest SOPS that
// reads what this package writes (mac_only_encrypted came with 3.9.0).
const SOPSVersion = "3.9.0"

// metadataKey is the top-level key of SOPS's metadata.
const metadataKey = "sops"

// macOnlyEncryptedInit starts the MAC of a document whose MAC covers only
// the encrypted values, so that it never equals the MAC over all of them
// (SOPS's constant).
var macOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe,
	0x0b, 0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

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
	parsed     []age.Recipient
	key        []byte // the GitTarget's digest key
}

// New returns the Sealer of one GitTarget (domain: its namespace/name),
// encrypting to recipients, age X25519 public keys, whose digests are
// keyed by a key derived from master and domain.
func New(recipients []string, master []byte, domain string) (*Sealer, error) {
	if len(recipients) == 0 {
		return nil, errors.New("no age recipients")
	}
	if len(master) < 16 {
		return nil, errors.New("the digest key is shorter than 16 bytes")
	}
	rs := make([]string, 0, len(recipients))
	for _, r := range recipients {
		rs = append(rs, strings.TrimSpace(r))
	}
	slices.Sort(rs)
	rs = slices.Compact(rs)
	parsed := make([]age.Recipient, 0, len(rs))
	for _, r := range rs {
		p, err := age.ParseX25519Recipient(r)
		if err != nil {
			return nil, fmt.Errorf("age recipient %q: %w", r, err)
		}
		parsed = append(parsed, p)
	}
	mac := hmac.New(sha256.New, master)
	mac.Write([]byte("reverser.dev/sops-digest/v1\x00" + domain))
	return &Sealer{recipients: rs, parsed: parsed, key: mac.Sum(nil)}, nil
}

// Recipients are the sorted recipients the Sealer encrypts to.
func (s *Sealer) Recipients() []string { return slices.Clone(s.recipients) }

// Seal returns the SOPS document of plain, a document without
// DigestAnnotation, with the fields named keys encrypted and the digest of
// plain, bound to the ciphertext, in DigestAnnotation. priors are
// documents already written for it (what Git holds at its path): the first
// that is a SOPS document of the same plaintext, encrypting the same keys,
// to the same recipients, is returned as it is.
//
// Errors never quote the document: they would carry its values into logs.
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
	doc, err := loadPlain(plain)
	if err != nil {
		return nil, err
	}
	root := doc.Content[0]
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		return nil, fmt.Errorf("making a data key: %w", err)
	}
	e := encrypter{key: dataKey, fields: regexp.MustCompile(EncryptedRegex(keys)), mac: sha512.New()}
	e.mac.Write(macOnlyEncryptedInit)
	if err := e.walk(root, nil, false); err != nil {
		return nil, err
	}
	md := metadata{EncryptedRegex: EncryptedRegex(keys), LastModified: time.Now().UTC().Format(time.RFC3339),
		MACOnlyEncrypted: true, Version: SOPSVersion}
	// The MAC covers the encrypted values only, so that the digest can be
	// written once they are known: it binds them (sealed).
	if md.MAC, err = encryptValue(dataKey, fmt.Appendf(nil, "%X", e.mac.Sum(nil)), "str", md.LastModified); err != nil {
		return nil, err
	}
	for i, r := range s.parsed {
		enc, err := encryptDataKey(dataKey, r)
		if err != nil {
			return nil, fmt.Errorf("encrypting the data key to %s: %w", s.recipients[i], err)
		}
		md.Age = append(md.Age, ageKey{Enc: enc, Recipient: s.recipients[i]})
	}
	if err := annotate(root, v1.SOPSDigestAnnotation, s.sealed(digest, md.MAC, encryptedValues(root))); err != nil {
		return nil, err
	}
	var mdNode yaml.Node
	if err := mdNode.Encode(md); err != nil {
		return nil, fmt.Errorf("writing the sops metadata: %w", err)
	}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: metadataKey}, &mdNode)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(4) // as SOPS writes
	if err := enc.Encode(doc); err != nil {
		return nil, errors.New("the SOPS document cannot be written as YAML")
	}
	if err := enc.Close(); err != nil {
		return nil, errors.New("the SOPS document cannot be written as YAML")
	}
	return out.Bytes(), nil
}

// metadata is SOPS's metadata block, as SOPS writes it for age keys: its
// keys sorted.
type metadata struct {
	Age              []ageKey `yaml:"age"`
	EncryptedRegex   string   `yaml:"encrypted_regex"`
	LastModified     string   `yaml:"lastmodified"`
	MAC              string   `yaml:"mac"`
	MACOnlyEncrypted bool     `yaml:"mac_only_encrypted"`
	Version          string   `yaml:"version"`
}

type ageKey struct {
	Enc       string `yaml:"enc"`
	Recipient string `yaml:"recipient"`
}

// otherKeys are the metadata keys of key kinds other than age, and of key
// groups: a document holding one is not this package's to keep.
var otherKeys = []string{"key_groups", "kms", "gcp_kms", "hckms", "azure_kv", "hc_vault", "pgp"}

// loadPlain reads a document to seal: one YAML document, a mapping, with
// unique keys and no sops key of its own.
func loadPlain(plain []byte) (*yaml.Node, error) {
	docs, err := documents(plain)
	if err != nil {
		return nil, errors.New("the document is not valid YAML")
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("the document holds %d YAML documents, not one", len(docs))
	}
	doc := docs[0]
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the document is not a mapping")
	}
	// Decoding into a map is what finds duplicate keys, as SOPS does.
	var unique map[string]any
	if err := doc.Content[0].Decode(&unique); err != nil {
		return nil, errors.New("the document is not valid YAML")
	}
	if _, ok := unique[metadataKey]; ok {
		return nil, errors.New("the document already has a top-level sops key")
	}
	return doc, nil
}

// documents are the YAML documents of b.
func documents(b []byte) ([]*yaml.Node, error) {
	var docs []*yaml.Node
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var n yaml.Node
		err := d.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

// encrypter seals the values below the fields to encrypt, in document
// order, and sums their plaintexts into the MAC in that order, as SOPS
// reads them back.
type encrypter struct {
	key    []byte
	fields *regexp.Regexp
	mac    hash.Hash
}

// walk seals what is below n, at path; encrypt says a field on the path is
// one to encrypt. Anchors, aliases and comments are refused where SOPS
// would expand or encrypt them: our documents have none, and a comment
// kept in clear inside a credential could carry it.
func (e *encrypter) walk(n *yaml.Node, path []string, encrypt bool) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return errors.New("the document uses YAML anchors or aliases, which are not sealed")
	}
	if encrypt && (n.HeadComment != "" || n.LineComment != "" || n.FootComment != "") {
		return errors.New("a field to encrypt holds a YAML comment, which would stay in clear")
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			var key any
			if err := k.Decode(&key); err != nil {
				return errors.New("the document has a key that cannot be read")
			}
			name, ok := key.(string)
			if !ok {
				return errors.New("the document has a key that is not a string, which SOPS cannot hold")
			}
			inner := encrypt || e.fields.MatchString(name)
			if inner && (k.HeadComment != "" || k.LineComment != "" || k.FootComment != "") {
				return errors.New("a field to encrypt holds a YAML comment, which would stay in clear")
			}
			if err := e.walk(v, append(slices.Clip(path), name), inner); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if err := e.walk(item, path, encrypt); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if encrypt {
			return e.leaf(n, path)
		}
	}
	return nil
}

// leaf seals one value, typed as SOPS types it; null stays null and
// outside the MAC, and so does the empty string's ciphertext: SOPS writes
// it as it is.
func (e *encrypter) leaf(n *yaml.Node, path []string) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return errors.New("a value to encrypt cannot be read")
	}
	var kind string
	var plain []byte
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		kind, plain = "str", []byte(v)
	case int:
		kind, plain = "int", []byte(strconv.Itoa(v))
	case float64:
		kind, plain = "float", []byte(strconv.FormatFloat(v, 'f', -1, 64))
	case bool:
		kind, plain = "bool", []byte(map[bool]string{true: "True", false: "False"}[v])
	case time.Time:
		b, err := v.MarshalText()
		if err != nil {
			return errors.New("a time to encrypt cannot be written")
		}
		kind, plain = "time", b
	default:
		return fmt.Errorf("a value to encrypt is of a type SOPS cannot hold (%T)", v)
	}
	e.mac.Write(plain)
	if kind == "str" && len(plain) == 0 {
		return nil
	}
	sealed, err := encryptValue(e.key, plain, kind, strings.Join(path, ":")+":")
	if err != nil {
		return err
	}
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: sealed}
	return nil
}

// encryptValue is SOPS's AES-256-GCM ciphertext of plain: a 32-byte nonce,
// additional the value's path (or, for the MAC, lastmodified).
func encryptValue(key, plain []byte, kind, additional string) (string, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", fmt.Errorf("AES: %w", err)
	}
	gcm, err := cipher.NewGCMWithNonceSize(block, 32)
	if err != nil {
		return "", fmt.Errorf("AES-GCM: %w", err)
	}
	iv := make([]byte, 32)
	if _, err := rand.Read(iv); err != nil {
		return "", fmt.Errorf("making a nonce: %w", err)
	}
	out := gcm.Seal(nil, iv, plain, []byte(additional))
	tag := len(out) - gcm.Overhead()
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("ENC[AES256_GCM,data:%s,iv:%s,tag:%s,type:%s]", b64(out[:tag]), b64(iv), b64(out[tag:]), kind), nil
}

// encryptDataKey is the data key encrypted to r, armored, as SOPS keeps it.
func encryptDataKey(dataKey []byte, r age.Recipient) (string, error) {
	var b bytes.Buffer
	aw := armor.NewWriter(&b)
	w, err := age.Encrypt(aw, r)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(dataKey); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	if err := aw.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
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
// and encrypted MAC), so that a document of other values pushed with a
// copied digest is told apart (#27, finding 8): only the controller's key
// makes the second part, and it changes with every encryption.
func (s *Sealer) sealed(digest, encryptedMAC string, values []string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("reverser.dev/sops-ciphertext/v1\x00" + digest + "\x00" + encryptedMAC))
	for _, v := range values {
		mac.Write([]byte("\x00" + v))
	}
	return digest + "." + hex.EncodeToString(mac.Sum(nil))
}

// encryptedValues are a document's SOPS ciphertexts ("ENC[...]"), in
// document order, outside its metadata.
func encryptedValues(root *yaml.Node) []string {
	var out []string
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 1; i < len(n.Content); i += 2 {
				walk(n.Content[i])
			}
		case yaml.SequenceNode:
			for _, item := range n.Content {
				walk(item)
			}
		case yaml.ScalarNode:
			if n.ShortTag() == "!!str" && strings.HasPrefix(n.Value, "ENC[") {
				out = append(out, n.Value)
			}
		}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != metadataKey {
			walk(root.Content[i+1])
		}
	}
	return out
}

// loadSealed reads a SOPS document: its root mapping and its metadata;
// false when doc is not one SOPS document, or holds keys of another kind
// than age.
func loadSealed(doc []byte) (*yaml.Node, metadata, bool) {
	docs, err := documents(doc)
	if err != nil || len(docs) != 1 || len(docs[0].Content) != 1 || docs[0].Content[0].Kind != yaml.MappingNode {
		return nil, metadata{}, false
	}
	root := docs[0].Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != metadataKey {
			continue
		}
		var md metadata
		var keys map[string]any
		if root.Content[i+1].Decode(&md) != nil || root.Content[i+1].Decode(&keys) != nil || md.MAC == "" {
			return nil, metadata{}, false
		}
		for _, k := range otherKeys {
			if _, ok := keys[k]; ok {
				return nil, metadata{}, false
			}
		}
		return root, md, true
	}
	return nil, metadata{}, false
}

// holds says whether doc is a SOPS document of digest sealed by this
// Sealer's key (its ciphertext bound), encrypted to the Sealer's
// recipients and no others.
func (s *Sealer) holds(doc []byte, digest string) bool {
	root, md, ok := loadSealed(doc)
	if !ok || !md.MACOnlyEncrypted {
		return false
	}
	got, _ := annotation(root, v1.SOPSDigestAnnotation)
	if !hmac.Equal([]byte(got), []byte(s.sealed(digest, md.MAC, encryptedValues(root)))) {
		return false
	}
	return slices.Equal(md.recipients(), s.recipients)
}

func (md metadata) recipients() []string {
	var rs []string
	for _, k := range md.Age {
		rs = append(rs, k.Recipient)
	}
	slices.Sort(rs)
	return rs
}

// Recipients of a SOPS document's age keys, sorted; ok is false when doc is
// not a SOPS document of age keys.
func Recipients(doc []byte) (recipients []string, ok bool) {
	_, md, ok := loadSealed(doc)
	if !ok {
		return nil, false
	}
	return md.recipients(), true
}

// annotate sets metadata.annotations[key] = value in a document's root.
func annotate(root *yaml.Node, key, value string) error {
	md := field(root, "metadata")
	if md == nil || md.Kind != yaml.MappingNode {
		return errors.New("the document has no metadata mapping")
	}
	ann := field(md, "annotations")
	if ann == nil {
		ann = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		md.Content = append(md.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "annotations"}, ann)
	}
	if ann.Kind != yaml.MappingNode {
		return errors.New("the document's annotations are not a mapping")
	}
	v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
	for i := 0; i+1 < len(ann.Content); i += 2 {
		if ann.Content[i].Value == key {
			ann.Content[i+1] = v
			return nil
		}
	}
	ann.Content = append(ann.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	return nil
}

// annotation reads metadata.annotations[key] of a document's root.
func annotation(root *yaml.Node, key string) (string, bool) {
	if v := field(field(root, "metadata"), "annotations"); v != nil {
		if n := field(v, key); n != nil && n.Kind == yaml.ScalarNode {
			return n.Value, true
		}
	}
	return "", false
}

// field is the value of key in mapping n; nil when n is not a mapping or
// has no such key.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
