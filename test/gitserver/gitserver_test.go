package gitserver

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// TestPushAndClone pushes a commit over smart HTTP and clones it back.
func TestPushAndClone(t *testing.T) {
	root := t.TempDir()
	_, err := CreateRepo(root, "demo")
	require.NoError(t, err)
	_, err = CreateRepo(root, "demo")
	require.Error(t, err, "a repository is created once")

	h, err := Handler(root)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	url := srv.URL + PathPrefix + "/demo.git"

	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	require.NoError(t, os.WriteFile(filepath.Join(work, "a.yaml"), []byte("a: 1\n"), 0o644))
	git(t, work, "add", "a.yaml")
	git(t, work, "commit", "--quiet", "-m", "first")
	sha := git(t, work, "rev-parse", "HEAD")
	git(t, work, "push", "--quiet", url, "main")

	assert.Contains(t, git(t, work, "ls-remote", url), sha+"\trefs/heads/main")
	clone := filepath.Join(t.TempDir(), "clone")
	git(t, work, "clone", "--quiet", url, clone)
	data, err := os.ReadFile(filepath.Join(clone, "a.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))
}

// serveDemo serves a new repository "demo" and returns the server's root,
// the repository's folder and its URL.
func serveDemo(t *testing.T) (root, dir, url string) {
	t.Helper()
	root = t.TempDir()
	dir, err := CreateRepo(root, "demo")
	require.NoError(t, err)
	h, err := Handler(root)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return root, dir, srv.URL + PathPrefix + "/demo.git"
}

// TestRecordPushesLogsEachPushInOrder: RecordPushes names every push the
// server took, with the head before and after, and none it refused.
func TestRecordPushesLogsEachPushInOrder(t *testing.T) {
	_, dir, url := serveDemo(t)
	require.NoError(t, RecordPushes(dir))

	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	var shas []string
	for _, m := range []string{"first", "second"} {
		git(t, work, "commit", "--quiet", "--allow-empty", "-m", m)
		shas = append(shas, git(t, work, "rev-parse", "HEAD"))
		git(t, work, "push", "--quiet", url, "main")
	}
	git(t, work, "reset", "--quiet", "--hard", "HEAD~1")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "diverged")
	cmd := exec.Command("git", "push", "--quiet", url, "main")
	cmd.Dir = work
	require.Error(t, cmd.Run(), "a push that is not a fast-forward is refused")

	pushes, err := Pushes(dir)
	require.NoError(t, err)
	zero := strings.Repeat("0", 40)
	assert.Equal(t, []Push{{Old: zero, New: shas[0], Ref: "refs/heads/main"}, {Old: shas[0], New: shas[1], Ref: "refs/heads/main"}}, pushes)
}

// TestAHeldPushNamesItsHeadAndCanBeDropped: a push held by HoldPushes is
// named in HeldFile by the head it pushes; DropHeld refuses it unreceived.
func TestAHeldPushNamesItsHeadAndCanBeDropped(t *testing.T) {
	root, dir, url := serveDemo(t)
	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "first")
	head := git(t, work, "rev-parse", "HEAD")

	fault := filepath.Join(root, FaultFile)
	require.NoError(t, os.WriteFile(fault, []byte(HoldPushes), 0o644))
	pushed := make(chan error, 1)
	go func() {
		cmd := exec.Command("git", "push", "--quiet", url, "main")
		cmd.Dir = work
		pushed <- cmd.Run()
	}()
	require.Eventually(t, func() bool {
		held, err := os.ReadFile(filepath.Join(root, HeldFile))
		return err == nil && string(held) == head
	}, 30*time.Second, 20*time.Millisecond, "the push held, naming its head")
	require.NoError(t, os.WriteFile(fault, []byte(DropHeld), 0o644))
	require.Error(t, <-pushed, "the held push is refused")
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--verify", "-q", "main").CombinedOutput()
	assert.Error(t, err, "nothing was received: %s", out)
}

// serveWithRobot serves the repository name, whose pushers and (behind
// PrivatePrefix) readers are robot:s3cret, and returns the server's host.
func serveWithRobot(t *testing.T, name string) string {
	t.Helper()
	root := t.TempDir()
	_, err := CreateRepo(root, name)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, CredentialsFile), []byte("robot:s3cret\n"), 0o600))
	h, err := Handler(root)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestPrivateNeedsCredentials(t *testing.T) {
	host := serveWithRobot(t, "secret")

	work := t.TempDir()
	cmd := exec.Command("git", "ls-remote", "http://robot:wrong@"+host+PrivatePrefix+"/secret.git")
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "HOME="+work)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a wrong password is refused: %s", out)
	git(t, work, "ls-remote", "http://robot:s3cret@"+host+PrivatePrefix+"/secret.git")
}

// TestPublicNeedsCredentialsToPush: PublicPrefix lets anyone fetch, as a
// public repository on a host does, and only a listed user push.
func TestPublicNeedsCredentialsToPush(t *testing.T) {
	host := serveWithRobot(t, "open")

	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "one")
	push := exec.Command("git", "-C", work, "push", "http://"+host+PublicPrefix+"/open.git", "HEAD:main")
	push.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "HOME="+work)
	out, err := push.CombinedOutput()
	require.Error(t, err, "an anonymous push is refused: %s", out)
	git(t, work, "push", "-q", "http://robot:s3cret@"+host+PublicPrefix+"/open.git", "HEAD:main")
	git(t, work, "ls-remote", "http://"+host+PublicPrefix+"/open.git")
}

// TestAttemptsNameEveryPushSentAndWhoSentIt: every push the server was
// sent is logged with its client's User-Agent, a failed one too; a fetch is
// not.
func TestAttemptsNameEveryPushSentAndWhoSentIt(t *testing.T) {
	root, _, url := serveDemo(t)
	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "first")
	git(t, work, "-c", "http.userAgent=replica-a", "push", "--quiet", url, "main")
	git(t, work, "fetch", "--quiet", url, "main")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "second")
	fault := filepath.Join(root, FaultFile)
	require.NoError(t, os.WriteFile(fault, []byte(HoldPushes), 0o644))
	pushed := make(chan error, 1)
	go func() {
		cmd := exec.Command("git", "-c", "http.userAgent=replica-b", "push", "--quiet", url, "main")
		cmd.Dir = work
		pushed <- cmd.Run()
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(root, HeldFile))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the push held")
	require.NoError(t, os.WriteFile(fault, []byte(DropHeld), 0o644))
	require.Error(t, <-pushed, "the held push is dropped")

	attempts, err := Attempts(root)
	require.NoError(t, err)
	require.Len(t, attempts, 2)
	assert.Equal(t, []string{"replica-a", "replica-b"}, []string{attempts[0].Agent, attempts[1].Agent})
	assert.Equal(t, PathPrefix+"/demo.git/git-receive-pack", attempts[0].Path)
	assert.False(t, attempts[1].At.Before(attempts[0].At), "in the order they came")
}

// TestASlowServerAnswersEveryRequestLate: with "slow 300ms" in FaultFile,
// a clone (two requests at least) takes that long twice, and still works.
func TestASlowServerAnswersEveryRequestLate(t *testing.T) {
	root, _, url := serveDemo(t)
	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	git(t, work, "commit", "--quiet", "--allow-empty", "-m", "first")
	git(t, work, "push", "--quiet", url, "main")
	require.NoError(t, os.WriteFile(filepath.Join(root, FaultFile), []byte(Slow+"300ms"), 0o644))
	start := time.Now()
	git(t, t.TempDir(), "clone", "--quiet", url, "c")
	assert.GreaterOrEqual(t, time.Since(start), 600*time.Millisecond)
}
