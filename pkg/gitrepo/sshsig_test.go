package gitrepo

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"reverser.dev/reverser/test/testkeys"
)

// sshKey is a fresh private key in OpenSSH form: ed25519, or RSA.
func sshKey(t *testing.T, rsaKey bool) []byte {
	t.Helper()
	if !rsaKey {
		key, _ := testkeys.SSH(t)
		return key
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(key, "")
	require.NoError(t, err)
	return pem.EncodeToMemory(block)
}

// verifyCommit runs the real `git verify-commit` with an allowed-signers
// file naming publicKey for the committer, and returns whether it passed.
func verifyCommit(t *testing.T, bare, rev, publicKey string) (string, bool) {
	t.Helper()
	home := t.TempDir()
	signers := filepath.Join(home, "allowed_signers")
	require.NoError(t, os.WriteFile(signers, []byte("reverser@reverser.dev "+publicKey+"\n"), 0o600))
	cmd := exec.Command("git", "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", "--raw", rev)
	cmd.Dir = bare
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+home)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestSignedCommitsVerify: a commit signed with an SSH key (ed25519 and
// RSA) passes `git verify-commit` against that key, and fails against
// another; an unsigned one fails.
func TestSignedCommitsVerify(t *testing.T) {
	for _, tc := range []struct {
		name string
		rsa  bool
	}{{"ed25519", false}, {"rsa", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url, bare := remote(t)
			ctx := context.Background()
			r, err := Open(t.TempDir(), url, "main", nil)
			require.NoError(t, err)
			signer, err := NewSSHSigner(sshKey(t, tc.rsa), nil)
			require.NoError(t, err)
			signed := info
			signed.Signer = signer
			c1, err := r.Commit(plumbing.ZeroHash, map[string][]byte{"a.yaml": []byte("a: 1\n")}, signed)
			require.NoError(t, err)
			c2, err := r.Commit(c1, map[string][]byte{"a.yaml": []byte("a: 2\n")}, info)
			require.NoError(t, err)
			require.NoError(t, r.Push(ctx, c2))

			out, ok := verifyCommit(t, bare, c1.String(), signer.PublicKey())
			assert.True(t, ok, "git verify-commit: %s", out)
			assert.Contains(t, out, `Good "git" signature for reverser@reverser.dev`)
			other, err := NewSSHSigner(sshKey(t, false), nil)
			require.NoError(t, err)
			_, ok = verifyCommit(t, bare, c1.String(), other.PublicKey())
			assert.False(t, ok, "another key does not verify it")
			_, ok = verifyCommit(t, bare, c2.String(), signer.PublicKey())
			assert.False(t, ok, "an unsigned commit does not verify")
			assert.True(t, strings.HasPrefix(gitCLI(t, bare, "cat-file", "-p", c1.String()), "tree "))
		})
	}
}

func TestNewSSHSignerRefusesWhatIsNotAKey(t *testing.T) {
	_, err := NewSSHSigner([]byte("not a key"), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading the SSH signing key")
}

// verifyOpenPGP runs the real `git verify-commit` with gpg holding public.
func verifyOpenPGP(t *testing.T, bare, rev string, public []byte) (string, bool) {
	t.Helper()
	cmd := exec.Command("git", "verify-commit", "--raw", rev)
	cmd.Dir, cmd.Env = bare, testkeys.GnuPG(t, public)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestOpenPGPSignedCommitsVerify: a commit signed with an OpenPGP key (and
// one protected by a passphrase) passes `git verify-commit` with gpg
// holding that key, and fails with another.
func TestOpenPGPSignedCommitsVerify(t *testing.T) {
	for _, passphrase := range []string{"", "correct horse"} {
		t.Run("passphrase="+passphrase, func(t *testing.T) {
			url, bare := remote(t)
			r, err := Open(t.TempDir(), url, "main", nil)
			require.NoError(t, err)
			private, public := testkeys.OpenPGP(t, passphrase)
			if passphrase != "" {
				_, err := NewOpenPGPSigner(private, nil)
				assert.ErrorContains(t, err, "protected by a passphrase")
			}
			signer, err := NewOpenPGPSigner(private, []byte(passphrase))
			require.NoError(t, err)
			signed := info
			signed.Signer = signer
			c1, err := r.Commit(plumbing.ZeroHash, map[string][]byte{"a.yaml": []byte("a: 1\n")}, signed)
			require.NoError(t, err)
			require.NoError(t, r.Push(context.Background(), c1))

			out, ok := verifyOpenPGP(t, bare, c1.String(), public)
			assert.True(t, ok, "git verify-commit: %s", out)
			assert.Contains(t, out, "GOODSIG")
			_, other := testkeys.OpenPGP(t, "")
			_, ok = verifyOpenPGP(t, bare, c1.String(), other)
			assert.False(t, ok, "another key does not verify it")
		})
	}
	_, err := NewOpenPGPSigner([]byte("not a key"), nil)
	assert.ErrorContains(t, err, "reading the OpenPGP signing key")
	_, public := testkeys.OpenPGP(t, "")
	_, err = NewOpenPGPSigner(public, nil)
	assert.ErrorContains(t, err, "no private key that can sign")
}
