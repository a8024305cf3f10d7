package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/testkeys"
)

const signingSpec = `  signing: {sshKeySecretRef: {name: signer, key: identity}}`

// signingKey is a fresh OpenSSH private key and its authorized_keys line.
func signingKey(t *testing.T) (private, public string) {
	t.Helper()
	key, pub := testkeys.SSH(t)
	return string(key), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// verifyCommits runs the real `git verify-commit` on every commit
// Reverser committed on the mirror's branch, with an allowed-signers file
// naming public for the committer, and returns how many there are.
func (f *mirrorFixture) verifyCommits(public string) int {
	f.t.Helper()
	signers := filepath.Join(f.t.TempDir(), "allowed_signers")
	require.NoError(f.t, os.WriteFile(signers, []byte("reverser@reverser.dev "+public+"\n"), 0o600))
	revs := strings.Fields(git(f.t, f.bare, "rev-list", "--committer=reverser@reverser.dev", "main"))
	if len(revs) == 0 {
		f.t.Logf("no commit of Reverser's on main:\n%s", git(f.t, f.bare, "log", "--format=%h %cn <%ce> | %an <%ae> | %s", "main"))
	}
	for _, rev := range revs {
		out, err := exec.Command("git", "-C", f.bare, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+signers,
			"verify-commit", rev).CombinedOutput()
		require.NoError(f.t, err, "commit %s: %s", rev, out)
	}
	return len(revs)
}

// TestSignedCommits (B1): with spec.signing every commit Reverser pushes
// is signed with the GitProvider's SSH key; without the key the mirror
// stops, saying so, and pushes nothing unsigned; once the key is there it
// goes on, signed.
func TestSignedCommits(t *testing.T) {
	private, public := signingKey(t)
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, providerSpec: signingSpec})
	eventually(t, 60*time.Second, "the GitTarget stalls on the missing key", func() (bool, error) {
		gt := f.gitTarget()
		c := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
		return c != nil && c.Reason == "SigningKeyNotFound" && meta.IsStatusConditionTrue(gt.Status.Conditions, v1.ConditionStalled), nil
	})
	assert.Contains(t, conditionMessage(f.gitTarget().Status.Conditions, v1.ConditionReady), "remove spec.signing to push unsigned commits")
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "early", "--from-literal=a=1")
	reconciled(t, f.ns, "site")
	_, reason, _ := condition(t, v1.ConditionReady, "gittarget", "-n", f.ns, "site")
	assert.Equal(t, "SigningKeyNotFound", reason, "still stalled after a reconcile")
	assert.False(t, len(f.authorsOf()) > 0 && f.authorsOf()[0] != "", "nothing is pushed unsigned")

	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "signer", "--from-literal=identity="+private)
	f.waitReady()
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "later", "--from-literal=a=1")
	f.waitFile(f.cmPath("early"), exists, "what was made while stalled is mirrored once the key is there")
	f.waitFile(f.cmPath("later"), exists, "a live edit after")
	assert.Positive(t, f.verifyCommits(public), "every commit verifies")
	noPlaintext(t, f, keyLine(private))
}

// keyLine is a line from the middle of a PEM private key's body: a needle
// for noPlaintext that any copy of the key holds.
func keyLine(pem string) string {
	lines := strings.Split(strings.TrimSpace(pem), "\n")
	return lines[len(lines)/2]
}

// exists is a waitFile condition: the file is on the branch.
func exists(content string) bool { return content != "" }

// TestOpenPGPSignedCommits (B1): spec.signing with an OpenPGP key signs
// every commit Reverser pushes; the real `git verify-commit`, with gpg
// holding the public key, passes for each.
func TestOpenPGPSignedCommits(t *testing.T) {
	private, public := testkeys.OpenPGP(t, "e2e-pgp-passphrase")
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly,
		providerSpec: "  signing: {openPGPKeySecretRef: {name: signer, key: private.asc}}",
		seed: func(f *mirrorFixture) {
			kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "signer", "--from-literal=private.asc="+string(private),
				"--from-literal=passphrase=e2e-pgp-passphrase")
		}})
	f.waitReady()
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "signed", "--from-literal=a=1")
	f.waitFile(f.cmPath("signed"), exists, "pushed")

	env := testkeys.GnuPG(t, public)
	revs := strings.Fields(git(t, f.bare, "rev-list", "--committer=reverser@reverser.dev", "main"))
	require.NotEmpty(t, revs)
	for _, rev := range revs {
		cmd := exec.Command("git", "verify-commit", rev)
		cmd.Dir, cmd.Env = f.bare, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "commit %s: %s", rev, out)
	}
	noPlaintext(t, f, keyLine(string(private)), "e2e-pgp-passphrase")
}
