package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// createRepo creates a bare repository on the control plane's Git server
// and returns its URL.
func createRepo(t *testing.T, prefix string) string {
	t.Helper()
	name := uniqueName(prefix)
	_, err := gitserver.CreateRepo(env.GitRoot, name)
	require.NoError(t, err)
	return env.GitBaseURL + "/" + name + ".git"
}

// git runs the git CLI in dir as the suite, with no user config.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return harness.GitAs(t, harness.Identity{Name: "E2E", Email: "e2e@example.com"}, dir, args...)
}

// remoteCommit is one commit on a remote branch, newest first.
type remoteCommit struct {
	Author, Subject string
	Files           []string
}

// remoteLog clones url and lists the commits of branch with the files each touched.
func remoteLog(t *testing.T, url, branch string) []remoteCommit {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	git(t, filepath.Dir(dir), "clone", "--quiet", "--branch", branch, url, dir)
	out := git(t, dir, "log", "--name-only", "--format=%x00%an <%ae>%x1f%s")
	var commits []remoteCommit
	for _, rec := range strings.Split(out, "\x00")[1:] {
		head, files, _ := strings.Cut(rec, "\n")
		author, subject, _ := strings.Cut(head, "\x1f")
		commits = append(commits, remoteCommit{Author: author, Subject: subject, Files: strings.Fields(files)})
	}
	return commits
}

// TestGitServerTakesPushes: the control plane's Git server accepts pushes
// over smart HTTP and serves them back.
func TestGitServerTakesPushes(t *testing.T) {
	url := createRepo(t, "push")
	work := t.TempDir()
	git(t, work, "init", "--quiet", "--initial-branch=main")
	require.NoError(t, os.MkdirAll(filepath.Join(work, "clusters", "dev"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "clusters", "dev", "cm.yaml"), []byte("kind: ConfigMap\n"), 0o644))
	git(t, work, "add", ".")
	git(t, work, "commit", "--quiet", "-m", "Add a ConfigMap")
	git(t, work, "push", "--quiet", url, "main")

	log := remoteLog(t, url, "main")
	require.Len(t, log, 1)
	assert.Equal(t, remoteCommit{Author: "E2E <e2e@example.com>", Subject: "Add a ConfigMap", Files: []string{"clusters/dev/cm.yaml"}}, log[0])
}
