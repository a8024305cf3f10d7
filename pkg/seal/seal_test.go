package seal

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/getsops/sops/v3/decrypt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"sigs.k8s.io/yaml"
)

const plain = `apiVersion: v1
kind: Secret
metadata:
  labels:
    app: shop
  name: token
  namespace: demo
data:
  binary: AP/+gA==
  password: aHVudGVyMg==
type: Opaque
`

// secret are the keys of a Secret's values.
var secret = []string{"data", "stringData"}

func identity(t *testing.T) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	return id, id.Recipient().String()
}

func sealer(t *testing.T, master, domain string, recipients ...string) *Sealer {
	t.Helper()
	s, err := New(recipients, []byte(master), domain)
	require.NoError(t, err)
	return s
}

// decrypted is what `sops --decrypt` prints for doc, with ids' keys.
func decrypted(t *testing.T, doc []byte, ids ...*age.X25519Identity) []byte {
	t.Helper()
	var keys []string
	for _, id := range ids {
		keys = append(keys, id.String())
	}
	t.Setenv("SOPS_AGE_KEY", strings.Join(keys, "\n"))
	out, err := decrypt.Data(doc, "yaml")
	require.NoError(t, err)
	return out
}

func object(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var o map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &o))
	return o
}

func TestSealEncryptsValuesAndKeepsMetadataInClear(t *testing.T) {
	id, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	doc, err := s.Seal([]byte(plain), secret)
	require.NoError(t, err)
	for _, v := range []string{"aHVudGVyMg==", "AP/+gA==", "hunter2"} {
		assert.NotContains(t, string(doc), v, "a value in clear")
	}
	o := object(t, doc)
	assert.Equal(t, "token", o["metadata"].(map[string]any)["name"], "metadata is in clear")
	assert.Equal(t, "Opaque", o["type"])
	assert.Equal(t, "^(data|stringData)$", o["sops"].(map[string]any)["encrypted_regex"])

	// Decrypted, it is the Secret with the digest annotation, values byte
	// for byte.
	out := object(t, decrypted(t, doc, id))
	want := object(t, []byte(plain))
	ann := out["metadata"].(map[string]any)["annotations"].(map[string]any)
	assert.True(t, strings.HasPrefix(ann[v1.SOPSDigestAnnotation].(string), digestVersion))
	delete(out["metadata"].(map[string]any), "annotations")
	assert.Equal(t, want, out)
}

func TestAnUnchangedSecretKeepsItsDocument(t *testing.T) {
	_, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	first, err := s.Seal([]byte(plain), secret)
	require.NoError(t, err)
	again, err := s.Seal([]byte(plain), secret)
	require.NoError(t, err)
	assert.NotEqual(t, first, again, "SOPS output is randomised")

	kept, err := s.Seal([]byte(plain), secret, first)
	require.NoError(t, err)
	assert.Equal(t, first, kept, "the same plaintext keeps Git's document")

	// A restarted controller (a new Sealer, same key) keeps it too.
	kept, err = sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r).Seal([]byte(plain), secret, first)
	require.NoError(t, err)
	assert.Equal(t, first, kept)
}

func TestWhatMakesASecretEncryptedAfresh(t *testing.T) {
	_, r1 := identity(t)
	_, r2 := identity(t)
	master := "0123456789abcdef0123456789abcdef"
	first, err := sealer(t, master, "demo/mirror", r1).Seal([]byte(plain), secret)
	require.NoError(t, err)
	edited := strings.Replace(plain, "aHVudGVyMg==", "aHVudGVyMw==", 1)
	for name, c := range map[string]struct {
		s     *Sealer
		plain string
		keys  []string
	}{
		"a changed value":       {sealer(t, master, "demo/mirror", r1), edited, secret},
		"another recipient":     {sealer(t, master, "demo/mirror", r1, r2), plain, secret},
		"another GitTarget":     {sealer(t, master, "demo/other", r1), plain, secret},
		"another digest key":    {sealer(t, "fedcba9876543210fedcba9876543210", "demo/mirror", r1), plain, secret},
		"a recipient withdrawn": {sealer(t, master, "demo/mirror", r2), plain, secret},
		"other fields":          {sealer(t, master, "demo/mirror", r1), plain, []string{"data"}},
	} {
		t.Run(name, func(t *testing.T) {
			doc, err := c.s.Seal([]byte(c.plain), c.keys, first)
			require.NoError(t, err)
			assert.NotEqual(t, first, doc)
			got, ok := Recipients(doc)
			require.True(t, ok)
			assert.Equal(t, c.s.Recipients(), got, "encrypted to the recipients now configured")
		})
	}
}

// A digest names neither the values nor, across GitTargets, their
// equality.
func TestTheDigestIsKeyed(t *testing.T) {
	_, r := identity(t)
	master := "0123456789abcdef0123456789abcdef"
	a := sealer(t, master, "demo/mirror", r)
	b := sealer(t, master, "other/mirror", r)
	assert.NotEqual(t, a.digest([]byte(plain), secret), b.digest([]byte(plain), secret))
}

func TestNewRefusesBadInput(t *testing.T) {
	_, err := New(nil, []byte("0123456789abcdef"), "d")
	assert.ErrorContains(t, err, "no age recipients")
	_, err = New([]string{"age1nope"}, []byte("0123456789abcdef"), "d")
	assert.ErrorContains(t, err, `age recipient "age1nope"`)
	_, r := identity(t)
	_, err = New([]string{r}, []byte("short"), "d")
	assert.ErrorContains(t, err, "shorter than 16 bytes")
}

func TestSealReplacesADocumentThatIsNotItsOwn(t *testing.T) {
	id, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	doc, err := s.Seal([]byte(plain), secret, []byte(plain))
	require.NoError(t, err)
	assert.NotContains(t, string(doc), "aHVudGVyMg==", "a plaintext document in Git is replaced, never kept")
	assert.Contains(t, string(decrypted(t, doc, id)), "aHVudGVyMg==")
}

// A field another kind embeds is encrypted, and only fields of its name.
func TestSealEncryptsTheFieldsNamed(t *testing.T) {
	id, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	const cm = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: demo
data:
  color: blue
  password: hunter2
`
	doc, err := s.Seal([]byte(cm), []string{"password"})
	require.NoError(t, err)
	assert.NotContains(t, string(doc), "hunter2")
	assert.Contains(t, string(doc), "color: blue", "other fields stay in clear")
	assert.Equal(t, "^(password)$", object(t, doc)["sops"].(map[string]any)["encrypted_regex"])
	out := object(t, decrypted(t, doc, id))
	assert.Equal(t, "hunter2", out["data"].(map[string]any)["password"])
	_, err = s.Seal([]byte(cm), nil)
	assert.ErrorContains(t, err, "no field to encrypt")
}

// What cannot be sealed is refused without quoting the document, whose
// values the error would carry into logs.
func TestSealErrorsNeverQuoteTheDocument(t *testing.T) {
	_, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	for _, doc := range []string{"data: {password: hunter2\n", "data:\n  password: hunter2\n  password: hunter3\n", "- hunter2\n"} {
		_, err := s.Seal([]byte(doc), secret)
		require.Error(t, err, doc)
		assert.NotContains(t, err.Error(), "hunter", doc)
	}
}

// TestACopiedDigestDoesNotKeepADocumentOfOtherValues (#27, finding 8):
// anyone may encrypt to the recipients; someone who pushes a SOPS document
// of other values carrying the digest of the live Secret's document gets
// it replaced, not kept: the digest is bound to the ciphertext.
func TestACopiedDigestDoesNotKeepADocumentOfOtherValues(t *testing.T) {
	id, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	ours, err := s.Seal([]byte(plain), secret)
	require.NoError(t, err)
	digest := digestOf(t, ours)

	other := strings.Replace(plain, "password: aHVudGVyMg==", "password: b3RoZXI=", 1)
	require.NotEqual(t, plain, other)
	theirs, err := sealer(t, "another key of 32 bytes, mallory", "demo/mirror", r).Seal([]byte(other), secret)
	require.NoError(t, err)
	theirDigest := digestOf(t, theirs)
	forged := []byte(strings.Replace(string(theirs), theirDigest, digest, 1))
	require.Contains(t, string(forged), digest)

	got, err := s.Seal([]byte(plain), secret, forged)
	require.NoError(t, err)
	assert.False(t, bytes.Equal(forged, got), "encrypted afresh")
	assert.Contains(t, string(decrypted(t, got, id)), "aHVudGVyMg==", "the live values")
}

// digestOf is the digest annotation of a sealed document.
func digestOf(t *testing.T, doc []byte) string {
	t.Helper()
	root, _, ok := loadSealed(doc)
	require.True(t, ok, "a SOPS document")
	d, ok := annotation(root, v1.SOPSDigestAnnotation)
	require.True(t, ok, "with a digest")
	return d
}

func TestSealRoundTripsOddValues(t *testing.T) {
	id, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	odd, err := os.ReadFile("testdata/odd-secret.yaml")
	require.NoError(t, err)
	doc, err := s.Seal(odd, secret)
	require.NoError(t, err)
	for _, v := range []string{"AP/+gA==", "line one", "héllo", "reads as a bool", "not a ciphertext"} {
		assert.NotContains(t, string(doc), v, "a value in clear")
	}
	assert.Contains(t, string(doc), "kept: in clear", "fields outside data and stringData stay in clear")
	out := object(t, decrypted(t, doc, id))
	delete(out["metadata"].(map[string]any)["annotations"].(map[string]any), v1.SOPSDigestAnnotation)
	assert.Equal(t, object(t, odd), out, "decrypted by the SOPS library, byte for byte and type for type")
}

// What SOPS would expand or encrypt and this package does not write is
// refused, never written half in clear.
func TestSealRefusesWhatItCannotSeal(t *testing.T) {
	_, r := identity(t)
	s := sealer(t, "0123456789abcdef0123456789abcdef", "demo/mirror", r)
	for name, c := range map[string]struct{ doc, err string }{
		"a comment in a field to encrypt": {"metadata: {name: a}\ndata:\n  # the password\n  password: aHVudGVyMg==\n",
			"holds a YAML comment"},
		"an alias":            {"metadata: {name: a}\nx: &p aHVudGVyMg==\ndata:\n  password: *p\n", "anchors or aliases"},
		"a key not a string":  {"metadata: {name: a}\ndata:\n  1: aHVudGVyMg==\n", "not a string"},
		"already a SOPS file": {"metadata: {name: a}\ndata: {password: x}\nsops: {mac: x}\n", "already has a top-level sops key"},
		"no metadata":         {"data: {password: x}\n", "no metadata"},
		"a sequence":          {"- hunter2\n", "not a mapping"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Seal([]byte(c.doc), secret)
			assert.ErrorContains(t, err, c.err)
			if err != nil {
				assert.NotContains(t, err.Error(), "aHVudGVyMg==")
			}
		})
	}
}
