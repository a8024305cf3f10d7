package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/gitserver"
)

// sshCredentials writes (or rewrites) the GitProvider's Secret for SSH:
// the private key and the known_hosts to check the server against.
func sshCredentials(t *testing.T, ns, identity, knownHosts string) {
	t.Helper()
	secret := kubectlOK(t, admin, "", "create", "secret", "generic", "-n", ns, "repo-ssh", "--from-literal=identity="+identity,
		"--from-literal=known_hosts="+knownHosts, "--dry-run=client", "-o", "yaml")
	kubectlOK(t, admin, secret, "apply", "-f", "-")
}

// pushTriedAfterCommitting waits until the controller has committed p in
// its own clone (status.lastCommit names a commit that holds it) and has
// then tried a push that failed. A push runs on the worker's goroutine
// between commits, so a failure counted after the commit was reported came
// from a push that carried it: the remote lacking p afterwards is a refusal,
// not a controller that had not got to it yet.
func (f *mirrorFixture) pushTriedAfterCommitting(p string) {
	f.t.Helper()
	eventually(f.t, 60*time.Second, p+" committed in the controller's clone", func() (bool, error) {
		c := f.gitTarget().Status.LastCommit
		return c != nil && inControllerClone(c.SHA, p), nil
	})
	const failed = `reverser_pushes_total{result="error"}`
	before := metric(f.t, failed)
	eventually(f.t, 60*time.Second, "a failed push after that commit", func() (bool, error) {
		return metric(f.t, failed) > before, nil
	})
}

// inControllerClone says whether commit sha, in one of the controller's
// local repositories, holds path p.
func inControllerClone(sha, p string) bool {
	dirs, _ := filepath.Glob(filepath.Join(env.ControllerDataDir, "repos", "*"))
	return slices.ContainsFunc(dirs, func(dir string) bool {
		return exec.Command("git", "-C", dir, "cat-file", "-e", sha+":"+p).Run() == nil
	})
}

// TestMirrorOverSSHWithSignedCommits (B1): a GitProvider reaching its
// repository over SSH, with a private key and strict known_hosts, pushes
// signed commits and fetches what others pushed; a host key it does not know
// is refused, saying so, and nothing is pushed; a rotated key pushes on.
func TestMirrorOverSSHWithSignedCommits(t *testing.T) {
	identity, public := signingKey(t)
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(public))
	require.NoError(t, err)
	srv, err := gitserver.ServeSSH(env.GitRoot, pub)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	signing, signingPublic := signingKey(t)

	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, remote: srv.URL,
		providerSpec: "  secretRef: {name: repo-ssh}\n" + signingSpec,
		seed: func(f *mirrorFixture) {
			sshCredentials(t, f.ns, identity, srv.KnownHosts)
			kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "signer", "--from-literal=identity="+signing)
		}})
	f.waitReady()
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "one", "--from-literal=a=1")
	f.waitFile(f.cmPath("one"), exists, "pushed over SSH")

	// A commit someone else pushed (over HTTP, to the same repository) is
	// fetched over SSH and kept.
	pushByHand(t, f.url, "README.md", "Add a README", func(string) string { return "hello\n" })
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "two", "--from-literal=a=2")
	f.waitFile(f.cmPath("two"), exists, "pushed after fetching the foreign commit")
	assert.Contains(t, f.files(), "README.md", "the foreign commit is kept")

	// A host key that is not the server's: refused, nothing pushed. The
	// controller reads a rotated Secret on its next reconcile (--resync), so
	// alice keeps editing until a push meets the new known_hosts.
	_, otherHost := signingKey(t)
	host, _, _ := strings.Cut(srv.KnownHosts, " ")
	sshCredentials(t, f.ns, identity, host+" "+otherHost)
	edits := 0
	eventually(t, 60*time.Second, "GitReachable=False on the host key", func() (bool, error) {
		edits++
		kubectlOK(t, alice, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: three, namespace: %s}\ndata: {edit: %q}\n",
			f.ns, fmt.Sprint(edits)), "apply", "-f", "-")
		c := meta.FindStatusCondition(f.gitTarget().Status.Conditions, v1.ConditionGitReachable)
		if c == nil {
			return false, nil
		}
		return c.Status == "False" && strings.Contains(c.Message, "key mismatch"), fmt.Errorf("%s: %s", c.Reason, c.Message)
	})
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "four", "--from-literal=a=4")
	f.pushTriedAfterCommitting(f.cmPath("four"))
	assert.NotContains(t, f.files(), f.cmPath("four"), "nothing pushed to a host that is not the one known")

	// The right host again, and a rotated client key: the old one is
	// revoked on the server, so only the new one can push.
	newIdentity, newPublic := signingKey(t)
	newPub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(newPublic))
	require.NoError(t, err)
	srv.Authorize(newPub)
	srv.Revoke(pub)
	sshCredentials(t, f.ns, newIdentity, srv.KnownHosts)
	f.waitFile(f.cmPath("four"), exists, "pushed with the rotated key")
	assert.Positive(t, f.verifyCommits(signingPublic), "every commit Reverser made is signed")
	noPlaintext(t, f, keyLine(identity), keyLine(newIdentity), keyLine(signing))
}
