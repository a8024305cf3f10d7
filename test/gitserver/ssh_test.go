package gitserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"reverser.dev/reverser/test/testkeys"
)

// clientKey writes a fresh private key for OpenSSH and returns its path
// and public key.
func clientKey(t *testing.T) (string, ssh.PublicKey) {
	t.Helper()
	key, pub := testkeys.SSH(t)
	path := filepath.Join(t.TempDir(), "id")
	require.NoError(t, os.WriteFile(path, key, 0o600))
	return path, pub
}

// gitSSH runs git with OpenSSH's client, checking host keys strictly.
func gitSSH(dir, key, knownHosts string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir,
		"GIT_SSH_COMMAND=ssh -F /dev/null -i "+key+" -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="+knownHosts)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestSSHPushAndClone: the real git and ssh push to and clone from the SSH
// server with an authorized key; an unknown key and an unknown repository
// are refused.
func TestSSHPushAndClone(t *testing.T) {
	root := t.TempDir()
	_, err := CreateRepo(root, "demo")
	require.NoError(t, err)
	key, pub := clientKey(t)
	srv, err := ServeSSH(root, pub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	require.NoError(t, os.WriteFile(knownHosts, []byte(srv.KnownHosts+"\n"), 0o600))

	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	require.NoError(t, os.WriteFile(filepath.Join(work, "a.yaml"), []byte("a: 1\n"), 0o644))
	git(t, work, "add", "a.yaml")
	git(t, work, "commit", "--quiet", "-m", "first")
	out, err := gitSSH(work, key, knownHosts, "push", "--quiet", srv.URL("demo"), "main")
	require.NoError(t, err, out)
	clone := filepath.Join(t.TempDir(), "clone")
	out, err = gitSSH(work, key, knownHosts, "clone", "--quiet", srv.URL("demo"), clone)
	require.NoError(t, err, out)
	data, err := os.ReadFile(filepath.Join(clone, "a.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))

	other, _ := clientKey(t)
	out, err = gitSSH(work, other, knownHosts, "ls-remote", srv.URL("demo"))
	require.Error(t, err, "an unauthorized key is refused")
	assert.Contains(t, out, "Permission denied")
	out, err = gitSSH(work, key, knownHosts, "ls-remote", strings.Replace(srv.URL("demo"), "/demo.git", "/../etc.git", 1))
	require.Error(t, err, out)
}
