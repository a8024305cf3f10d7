package e2e

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/yaml"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// sopsPath is where TestMain builds the sops CLI, from the module Reverser
// seals with, relative to the repository.
const sopsPath = "_output/e2e/bin/sops"

// sealedMirror is a mirror of its namespace's ConfigMaps and Secrets whose
// Secrets are encrypted to a fresh age identity, which alice may edit.
type sealedMirror struct {
	*mirrorFixture
	id *age.X25519Identity
}

func newSealedMirror(t *testing.T) *sealedMirror {
	t.Helper()
	return newSealedMirrorWith(t, configMapRule)
}

// newSealedMirrorWith is a sealed mirror of what rules select.
func newSealedMirrorWith(t *testing.T, rules string) *sealedMirror {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	f := newMirror(t, rules, fmt.Sprintf("  encryption: {sops: {ageRecipients: [%q]}}", id.Recipient().String()))
	kubectlOK(t, admin, harness.UserRole(f.ns, "secrets", controlplane.UserAlice, `- apiGroups: [""]
  resources: [secrets]
  verbs: ["*"]`), "apply", "-f", "-")
	return &sealedMirror{mirrorFixture: f, id: id}
}

func (f *sealedMirror) secretPath(name string) string {
	return filepath.Join(mirrorPath, f.ns, "secrets", name+".yaml")
}

// decrypt runs the real `sops --decrypt` on doc with the mirror's identity.
func (f *sealedMirror) decrypt(doc string) string {
	f.t.Helper()
	in := filepath.Join(f.t.TempDir(), "secret.yaml")
	require.NoError(f.t, os.WriteFile(in, []byte(doc), 0o600))
	cmd := exec.Command(filepath.Join(repoRoot, sopsPath), "--decrypt", in)
	cmd.Env = append(os.Environ(), "SOPS_AGE_KEY="+f.id.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(f.t, err, "sops --decrypt: %s", stderr.String())
	return string(out)
}

// commitsOf counts the commits of main that changed p.
func (f *sealedMirror) commitsOf(p string) int {
	out := git(f.t, f.bare, "log", "--format=%H", "main", "--", p)
	return len(strings.Fields(out))
}

// secretData is what the tests put in their Secret: a password, a value
// that is not UTF-8 and one of several lines.
func secretData(password string) map[string][]byte {
	return map[string][]byte{
		"password": []byte(password),
		"binary":   {0x00, 0xff, 0xfe, 0x80, 'k'},
		"config":   []byte("user: app\npassword: " + password + "\n"),
	}
}

// secretYAML is Secret name in ns holding data, as kubectl apply takes it
// (which also writes the data, in clear, into last-applied-configuration).
func secretYAML(ns, name string, data map[string][]byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s, labels: {app: shop}}\ntype: Opaque\ndata:\n", name, ns)
	for k, v := range data {
		fmt.Fprintf(&b, "  %s: %s\n", k, base64.StdEncoding.EncodeToString(v))
	}
	return b.String()
}

// decoded reads the data of a Secret's YAML document.
func decoded(t *testing.T, doc string) (map[string][]byte, map[string]any) {
	t.Helper()
	var o map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
	data := map[string][]byte{}
	for k, v := range o["data"].(map[string]any) {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		require.NoError(t, err)
		data[k] = b
	}
	return data, o
}

// TestSecretsAreWrittenSealed (B6): a Secret alice creates and edits live
// becomes a SOPS document that the real `sops --decrypt` restores value for
// value, committed as hers; an unchanged Secret makes no commit across a
// controller restart; no plaintext value is anywhere Reverser writes.
func TestSecretsAreWrittenSealed(t *testing.T) {
	f := newSealedMirror(t)
	const password = "e2e-hunter2-correct-horse"
	kubectlOK(t, alice, secretYAML(f.ns, "token", secretData(password)), "apply", "-f", "-")
	f.waitFile(f.secretPath("token"), func(s string) bool { return strings.Contains(s, "sops:") }, "the Secret written sealed")

	doc := f.file(f.secretPath("token"))
	assert.Contains(t, doc, "encrypted_regex: ^(data|stringData)$")
	assert.Contains(t, doc, f.id.Recipient().String())
	data, obj := decoded(t, f.decrypt(doc))
	assert.Equal(t, secretData(password), data, "sops --decrypt restores every value byte for byte")
	md := obj["metadata"].(map[string]any)
	assert.Equal(t, map[string]any{"app": "shop"}, md["labels"])
	assert.NotContains(t, md["annotations"], "kubectl.kubernetes.io/last-applied-configuration")
	assert.Equal(t, "Opaque", obj["type"])

	// An edit is hers, and decrypts to the new value.
	const edited = "e2e-hunter3-battery-staple"
	kubectlOK(t, alice, secretYAML(f.ns, "token", secretData(edited)), "apply", "-f", "-")
	f.waitFile(f.secretPath("token"), func(s string) bool { return s != doc }, "the edit committed")
	data, _ = decoded(t, f.decrypt(f.file(f.secretPath("token"))))
	assert.Equal(t, secretData(edited), data)
	gt := f.gitTarget()
	assert.NotContains(t, conditionMessage(gt.Status.Conditions, v1.ConditionStreamsRunning), "Secrets are not written")

	// The controller restarts: every Secret is read again, none committed
	// again.
	commits := f.commitsOf(f.secretPath("token"))
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))
	f.waitReady()
	f.barrier()
	assert.Equal(t, commits, f.commitsOf(f.secretPath("token")), "an unchanged Secret makes no commit after a restart")
	assert.Positive(t, metric(t, `reverser_seals_total{outcome="kept"}`), "the document Git holds was kept")

	// Deleted live, deleted in Git.
	kubectlOK(t, alice, "", "delete", "secret", "-n", f.ns, "token")
	f.waitFile(f.secretPath("token"), func(s string) bool { return s == "" }, "the delete committed")

	noPlaintext(t, f.mirrorFixture, password, edited)
}

// TestRotatingRecipientsEncryptsAgain (B6): a recipient added to the
// GitTarget encrypts every Secret again, to both, in one commit; the new
// identity decrypts what was there before.
func TestRotatingRecipientsEncryptsAgain(t *testing.T) {
	f := newSealedMirror(t)
	const a, b = "e2e-rotate-first-value", "e2e-rotate-second-value"
	kubectlOK(t, alice, secretYAML(f.ns, "first", secretData(a)), "apply", "-f", "-")
	kubectlOK(t, alice, secretYAML(f.ns, "second", secretData(b)), "apply", "-f", "-")
	f.waitFile(f.secretPath("second"), exists, "both Secrets written")
	head := git(t, f.bare, "rev-parse", "main")

	next, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	kubectlOK(t, admin, "", "patch", "gittarget", "-n", f.ns, "site", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"encryption":{"sops":{"ageRecipients":[%q,%q]}}}}`, f.id.Recipient().String(), next.Recipient().String()))
	for _, name := range []string{"first", "second"} {
		f.waitFile(f.secretPath(name), func(s string) bool { return strings.Contains(s, next.Recipient().String()) }, name+" encrypted again")
	}
	assert.Equal(t, "Reverser | Reverser: 2 changes in "+mirrorPath, git(t, f.bare, "log", "--format=%an | %s", head+"..main"),
		"one commit by the committer")
	f.id = next
	data, _ := decoded(t, f.decrypt(f.file(f.secretPath("first"))))
	assert.Equal(t, secretData(a), data, "the new identity decrypts")
	noPlaintext(t, f.mirrorFixture, a, b)
}

// TestFluxAppliesASealedSecret (B6, E1): the real Flux kustomize-controller
// decrypts the document Reverser wrote, with its SOPS decryption, and
// applies the Secret as it was.
func TestFluxAppliesASealedSecret(t *testing.T) {
	f := newSealedMirror(t)
	const password = "e2e-flux-decrypts-me"
	kubectlOK(t, alice, secretYAML(f.ns, "token", secretData(password)), "apply", "-f", "-")
	f.waitFile(f.secretPath("token"), func(s string) bool { return strings.Contains(s, "sops:") }, "the Secret written sealed")

	key := uniqueName("sops-age")
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.FluxNamespace, key, "--from-literal=identity.agekey="+f.id.String())
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "secret", "-n", controlplane.FluxNamespace, key) })
	into := namespace(t, "sealed-applied")
	ks := fluxSyncWith(t, f.url, "./"+filepath.Dir(f.secretPath("token")), into, "1m",
		fmt.Sprintf("  decryption: {provider: sops, secretRef: {name: %s}}\n", key))
	waitApplied(t, ks, git(t, f.bare, "rev-parse", "main"))
	out := kubectlOK(t, admin, "", "get", "secret", "-n", into, "token", "-o", "yaml")
	data, _ := decoded(t, out)
	assert.Equal(t, secretData(password), data, "Flux applied the Secret's values")

	noPlaintext(t, f.mirrorFixture, password)
}

// TestSecretsWithoutEncryptionAreNeverWritten (B6): without
// spec.encryption a Secret is neither written nor swept, and the status
// names the field to set.
func TestSecretsWithoutEncryptionAreNeverWritten(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	const password = "e2e-never-in-git"
	kubectlOK(t, admin, secretYAML(f.ns, "token", secretData(password)), "apply", "-f", "-")
	f.barrier()
	for _, file := range f.files() {
		assert.NotContains(t, file, "/secrets/")
	}
	eventually(t, 30*time.Second, "the status names the field", func() (bool, error) {
		return strings.Contains(conditionMessage(f.gitTarget().Status.Conditions, v1.ConditionStreamsRunning),
			"set spec.encryption.sops.ageRecipients"), nil
	})
	c := meta.FindStatusCondition(f.gitTarget().Status.Conditions, v1.ConditionReady)
	require.NotNil(t, c)
	noPlaintext(t, f, password)
}

// TestATenantCannotSealWhatTheyCannotRead (B6, tenancy): bob, with rights
// in his own namespace only, points a rule with his own age key at another
// namespace's Secrets: refused, and nothing of theirs reaches his
// repository. His own Secrets are sealed to his key, and a digest he forges
// on a live Secret changes nothing.
func TestATenantCannotSealWhatTheyCannotRead(t *testing.T) {
	victim := namespace(t, "victim")
	const theirs, his = "e2e-victims-db-password", "e2e-bobs-own-password"
	kubectlOK(t, admin, secretYAML(victim, "db", secretData(theirs)), "apply", "-f", "-")

	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	tn := newTenant(t, "")
	tn.mirror("", `  rules:
  - apiGroups: [""]
    resources: [configmaps, secrets]`)
	kubectlOK(t, bob, "", "patch", "gittarget", "-n", tn.ns, "site", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"encryption":{"sops":{"ageRecipients":[%q]}}}}`, id.Recipient().String()))
	out, err := tn.apply(bob, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: steal-secrets}
spec:
  gitTargetRef: {name: site}
  sourceNamespace: %s
  rules:
  - apiGroups: [""]
    resources: [secrets]
`, victim))
	require.Error(t, err, "bob may not list the other namespace's Secrets")
	assert.Contains(t, out, "forbidden")

	kubectlOK(t, bob, secretYAML(tn.ns, "mine", secretData(his)), "apply", "-f", "-")
	mine := filepath.Join(mirrorPath, tn.ns, "secrets", "mine.yaml")
	tn.waitFile(mine, func(s string) bool { return strings.Contains(s, id.Recipient().String()) }, "bob's Secret sealed to his key")
	commits := len(strings.Fields(git(t, tn.bare, "log", "--format=%H", "main", "--", mine)))
	kubectlOK(t, bob, "", "annotate", "secret", "-n", tn.ns, "mine", "reverser.dev/sops-digest=hmac-sha256:forged")
	tn.barrier()
	assert.Equal(t, commits, len(strings.Fields(git(t, tn.bare, "log", "--format=%H", "main", "--", mine))),
		"a forged digest on the live Secret is no change")
	tn.noFileContains(victim)
	noPlaintext(t, tn.mirrorFixture, theirs, his)
}

// credentialRule mirrors ConfigMaps, dropping data.password and encrypting
// data.token.
const credentialRule = `  - apiGroups: [""]
    resources: [configmaps]
    credentialFields:
    - {path: data.password}
    - {path: data.token, action: Encrypt}`

// TestCredentialFieldsOfOtherKinds (B6): a rule names the credentials a
// ConfigMap embeds: the one it drops never reaches Git, the one it
// encrypts is a SOPS field that sops --decrypt restores, the rest stays in
// clear; without spec.encryption a rule that encrypts is refused, naming
// the field to set.
func TestCredentialFieldsOfOtherKinds(t *testing.T) {
	f := newSealedMirrorWith(t, credentialRule)
	const password, token = "e2e-dropped-password", "e2e-encrypted-token"
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=color=blue",
		"--from-literal=password="+password, "--from-literal=token="+token)
	f.waitFile(f.cmPath("app"), func(s string) bool { return strings.Contains(s, "sops:") }, "the ConfigMap written sealed")
	doc := f.file(f.cmPath("app"))
	assert.Contains(t, doc, "color: blue", "other fields in clear")
	assert.Contains(t, doc, "encrypted_regex: ^(token)$")
	var o map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(f.decrypt(doc)), &o))
	assert.Equal(t, map[string]any{"color": "blue", "token": token}, o["data"], "decrypted: the token back, the password gone")
	assert.Equal(t, "alice <alice@users.reverser.invalid>", git(t, f.bare, "log", "-1", "--format=%an <%ae>", "main", "--", f.cmPath("app")),
		"a ConfigMap's write is audited in full: its author is known")

	// Unchanged across a restart.
	commits := f.commitsOf(f.cmPath("app"))
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))
	f.waitReady()
	f.barrier()
	assert.Equal(t, commits, f.commitsOf(f.cmPath("app")))
	noPlaintext(t, f.mirrorFixture, password, token)

	plain := newMirrorWith(t, mirrorOptions{rules: credentialRule})
	eventually(t, 60*time.Second, "the rule refused", func() (bool, error) {
		return strings.Contains(conditionMessage(plain.gitTarget().Status.Conditions, v1.ConditionStreamsRunning),
			`credential field "data.token" is to be encrypted, and GitTarget `+plain.ns+`/site has no spec.encryption`), nil
	})
}

// base64Forms are what any base64 text holding v holds, at each of the three
// offsets v may start at within the encoded bytes: the characters that
// depend on v's bytes alone.
func base64Forms(v string) []string {
	var forms []string
	for k := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), v...))
		// Characters holding bits of the k bytes before v, and the last
		// four, which hold bits of what follows, or padding.
		if start, end := (8*k+5)/6, len(enc)-4; end > start {
			forms = append(forms, enc[start:end])
		}
	}
	return forms
}

// noPlaintext fails when a value, or its base64, appears anywhere Reverser
// writes: any object of the branch's repository (unreachable ones too), of
// the controller's local repositories, the logs of every process of the
// control plane, events, the status of Reverser's objects, and metrics.
func noPlaintext(t *testing.T, f *mirrorFixture, values ...string) {
	t.Helper()
	var needles []string
	for _, v := range values {
		require.GreaterOrEqual(t, len(v), 12, "a needle %q this short could be found by chance", v)
		needles = append(append(needles, v), base64Forms(v)...)
	}
	check := func(where string, b []byte) {
		t.Helper()
		for _, n := range needles {
			assert.NotContains(t, string(b), n, "a Secret's value in %s", where)
		}
	}
	objects := func(gitDir string) []byte {
		out, err := exec.Command("git", "--git-dir", gitDir, "cat-file", "--batch-all-objects", "--batch").Output()
		if _, statErr := os.Stat(gitDir); errors.Is(statErr, fs.ErrNotExist) {
			return nil // a retired worker's repository, deleted meanwhile: it holds nothing now
		}
		require.NoError(t, err, "reading the objects of %s", gitDir)
		return out
	}
	check("the repository's objects", objects(f.bare))
	// Other tests' workers run, and retire, while this walks.
	require.NoError(t, filepath.WalkDir(env.ControllerDataDir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "objects" {
			check("the controller's local repository "+p, objects(filepath.Dir(p)))
			return filepath.SkipDir
		}
		return nil
	}))
	require.NoError(t, filepath.WalkDir(env.LogDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		check("log "+filepath.Base(p), b)
		return nil
	}))
	check("events", []byte(kubectlOK(t, admin, "", "get", "events", "-A", "-o", "yaml")))
	check("status", []byte(kubectlOK(t, admin, "", "get",
		"kubeproviders,gitproviders,gittargets,watchrules,clusterwatchrules,commitrequests,fluxclaims,argocdclaims", "-A", "-o", "yaml")))
	resp, err := http.Get(env.MetricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	metrics, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	check("metrics", metrics)
}

// TestACopiedDigestKeepsNoForgedSecret (#27, finding 8): whoever may push
// to the repository may encrypt to its recipients. mallory encrypts, with
// the real sops, Secret first with values of her own and the digest
// annotation copied from the document Reverser wrote, and pushes it in its
// place: a document Flux would decrypt and apply. At the next snapshot (a
// controller restart) Reverser finds the digest does not describe that
// ciphertext and writes first afresh, with its live values.
func TestACopiedDigestKeepsNoForgedSecret(t *testing.T) {
	f := newSealedMirror(t)
	const live, hers = "e2e-digest-live-value", "e2e-digest-mallory-value"
	kubectlOK(t, alice, secretYAML(f.ns, "first", secretData(live)), "apply", "-f", "-")
	f.waitFile(f.secretPath("first"), exists, "first written")

	var written struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(f.file(f.secretPath("first"))), &written))
	digest := written.Metadata.Annotations[v1.SOPSDigestAnnotation]
	require.NotEmpty(t, digest)
	plain := strings.Replace(secretYAML(f.ns, "first", secretData(hers)), "metadata: {",
		fmt.Sprintf("metadata: {annotations: {%s: %q}, ", v1.SOPSDigestAnnotation, digest), 1)
	in := filepath.Join(t.TempDir(), "first.yaml")
	require.NoError(t, os.WriteFile(in, []byte(plain), 0o600))
	cmd := exec.Command(filepath.Join(repoRoot, sopsPath), "encrypt", "--age", f.id.Recipient().String(),
		"--encrypted-regex", "^(data|stringData)$", in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	forged, err := cmd.Output()
	require.NoError(t, err, "sops encrypt: %s", stderr.String())
	data, obj := decoded(t, f.decrypt(string(forged)))
	require.Equal(t, secretData(hers), data, "the forged document decrypts, to mallory's values")
	require.Equal(t, digest, obj["metadata"].(map[string]any)["annotations"].(map[string]any)[v1.SOPSDigestAnnotation])
	pushByHand(t, f.url, f.secretPath("first"), "Rotate first, by hand", func(string) string { return string(forged) })

	require.NoError(t, controlplane.Restart(env, "reverser-controller"))
	f.waitReady()
	f.waitFile(f.secretPath("first"), func(s string) bool { return s != string(forged) }, "first written afresh")
	data, _ = decoded(t, f.decrypt(f.file(f.secretPath("first"))))
	assert.Equal(t, secretData(live), data, "the live values, not mallory's")
	noPlaintext(t, f.mirrorFixture, live, hers)
}
