package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/seal"
)

// oddSecret is pkg/seal's Secret of odd values.
func oddSecret(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "pkg/seal/testdata/odd-secret.yaml"))
	require.NoError(t, err)
	return b
}

// sopsCLI runs the sops CLI TestMain built, with identity's key.
func sopsCLI(t *testing.T, id *age.X25519Identity, doc []byte, args ...string) []byte {
	t.Helper()
	in := filepath.Join(t.TempDir(), "doc.yaml")
	require.NoError(t, os.WriteFile(in, doc, 0o600))
	cmd := exec.Command(filepath.Join(repoRoot, sopsPath), append(args, in)...)
	cmd.Env = append(os.Environ(), "SOPS_AGE_KEY="+id.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "sops %v: %s", args, stderr.String())
	return out
}

func yamlObject(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var o map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &o))
	return o
}

// sealedOddSecret is oddSecret sealed by pkg/seal to a fresh identity.
func sealedOddSecret(t *testing.T) (*age.X25519Identity, []byte) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	s, err := seal.New([]string{id.Recipient().String()}, []byte("0123456789abcdef0123456789abcdef"), "demo/mirror")
	require.NoError(t, err)
	doc, err := s.Seal(oddSecret(t), []string{"data", "stringData"})
	require.NoError(t, err)
	return id, doc
}

// TestTheSOPSCLIReadsWhatSealWrites (#32): pkg/seal writes SOPS without the
// SOPS library; the real CLI decrypts it, values byte for byte and type for
// type, and its MAC checks.
func TestTheSOPSCLIReadsWhatSealWrites(t *testing.T) {
	id, doc := sealedOddSecret(t)

	out := yamlObject(t, sopsCLI(t, id, doc, "--decrypt"))
	ann := out["metadata"].(map[string]any)["annotations"].(map[string]any)
	assert.Contains(t, ann, v1.SOPSDigestAnnotation)
	delete(ann, v1.SOPSDigestAnnotation)
	assert.Equal(t, yamlObject(t, oddSecret(t)), out)
}

// TestSealWritesTheDocumentTheSOPSCLIWrites (#32) pins the format: the
// same tree encrypted by the real CLI has the same structure, the same
// fields in clear, the same value types, and the same metadata keys;
// only the random ciphertexts, the time and the version differ.
func TestSealWritesTheDocumentTheSOPSCLIWrites(t *testing.T) {
	id, ours := sealedOddSecret(t)
	theirs := sopsCLI(t, id, oddSecret(t), "--encrypt", "--age", id.Recipient().String(),
		"--encrypted-regex", "^(data|stringData)$", "--mac-only-encrypted")

	shape := func(doc []byte) map[string]any {
		o := yamlObject(t, doc)
		if ann, ok := o["metadata"].(map[string]any)["annotations"].(map[string]any); ok {
			delete(ann, v1.SOPSDigestAnnotation) // ours carries it
		}
		for _, k := range []string{"lastmodified", "version"} {
			assert.NotEmpty(t, o["sops"].(map[string]any)[k], k)
			o["sops"].(map[string]any)[k] = "…"
		}
		for _, k := range o["sops"].(map[string]any)["age"].([]any) {
			k.(map[string]any)["enc"] = armored(k.(map[string]any)["enc"].(string))
		}
		return erase(o).(map[string]any)
	}
	assert.Equal(t, shape(theirs), shape(ours))
}

var ciphertext = regexp.MustCompile(`^ENC\[AES256_GCM,data:[^,]*,iv:[^,]+,tag:[^,]+,type:(\w+)\]$`)

// erase replaces each ciphertext by its type.
func erase(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = erase(e)
		}
	case []any:
		for i, e := range v {
			v[i] = erase(e)
		}
	case string:
		if m := ciphertext.FindStringSubmatch(v); m != nil {
			return "ENC[" + m[1] + "]"
		}
	}
	return v
}

// armored says whether an age key's enc is an armored age file.
func armored(enc string) string {
	if regexp.MustCompile(`(?s)^-----BEGIN AGE ENCRYPTED FILE-----\n.+\n-----END AGE ENCRYPTED FILE-----\n$`).MatchString(enc) {
		return "armored age file"
	}
	return enc
}
