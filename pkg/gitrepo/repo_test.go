package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/gitserver"
)

// remote serves a fresh bare repository over smart HTTP.
func remote(t *testing.T) (url, bareDir string) { return gitserver.Serve(t, "repo") }

func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=Foreign", "GIT_AUTHOR_EMAIL=f@example.com",
		"GIT_COMMITTER_NAME=Foreign", "GIT_COMMITTER_EMAIL=f@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

var info = CommitInfo{Author: identity.Signature{Name: "Alice", Email: "alice@example.com"}, Committer: identity.Signature{Name: "Reverser", Email: "reverser@reverser.dev"}, Message: "msg"}

func TestCommitAndPush(t *testing.T) {
	url, bare := remote(t)
	ctx := context.Background()
	r, err := Open(t.TempDir(), url, "main", nil)
	require.NoError(t, err)
	head, err := r.Fetch(ctx)
	require.NoError(t, err)
	assert.True(t, head.IsZero(), "an empty remote has no head")

	c1, err := r.Commit(head, map[string][]byte{
		"clusters/dev/demo/configmaps/a.yaml": []byte("a: 1\n"),
		"clusters/dev/demo/configmaps/b.yaml": []byte("b: 1\n"),
		"README.md":                           []byte("hi\n"),
	}, info)
	require.NoError(t, err)
	c2, err := r.Commit(c1, map[string][]byte{
		"clusters/dev/demo/configmaps/a.yaml":      []byte("a: 2\n"),
		"clusters/dev/demo/configmaps/b.yaml":      nil,
		"clusters/dev/x/apps/deployments/web.yaml": []byte("w\n"),
	}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c2))

	// What git itself sees.
	assert.Equal(t, c2.String(), gitCLI(t, bare, "rev-parse", "main"))
	assert.Equal(t, "README.md\nclusters/dev/demo/configmaps/a.yaml\nclusters/dev/x/apps/deployments/web.yaml",
		gitCLI(t, bare, "ls-tree", "-r", "--name-only", "main"))
	assert.Equal(t, "a: 2", gitCLI(t, bare, "show", "main:clusters/dev/demo/configmaps/a.yaml"))
	assert.Equal(t, "Alice <alice@example.com> | Reverser <reverser@reverser.dev>", gitCLI(t, bare, "log", "-1", "--format=%an <%ae> | %cn <%ce>", "main"))
	gitCLI(t, bare, "fsck", "--strict") // trees are well-formed and sorted

	files, err := r.Files(c2)
	require.NoError(t, err)
	assert.Len(t, files, 3)
	assert.Equal(t, BlobHash([]byte("a: 2\n")), files["clusters/dev/demo/configmaps/a.yaml"])

	// Removing the last file of a folder removes the folder.
	c3, err := r.Commit(c2, map[string][]byte{"clusters/dev/x/apps/deployments/web.yaml": nil}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c3))
	assert.NotContains(t, gitCLI(t, bare, "ls-tree", "-r", "-d", "--name-only", "main"), "clusters/dev/x")
}

func TestPushRejectedWhenRemoteMoved(t *testing.T) {
	url, _ := remote(t)
	ctx := context.Background()
	r, err := Open(t.TempDir(), url, "main", nil)
	require.NoError(t, err)
	c1, err := r.Commit(plumbing.ZeroHash, map[string][]byte{"a.yaml": []byte("1\n")}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c1))

	// Somebody else pushes.
	work := filepath.Join(t.TempDir(), "w")
	gitCLI(t, filepath.Dir(work), "clone", "--quiet", url, work)
	require.NoError(t, os.WriteFile(filepath.Join(work, "foreign.txt"), []byte("x\n"), 0o644))
	gitCLI(t, work, "add", ".")
	gitCLI(t, work, "commit", "--quiet", "-m", "foreign")
	gitCLI(t, work, "push", "--quiet", "origin", "main")
	foreign := gitCLI(t, work, "rev-parse", "HEAD")

	c2, err := r.Commit(c1, map[string][]byte{"a.yaml": []byte("2\n")}, info)
	require.NoError(t, err)
	require.ErrorIs(t, r.Push(ctx, c2), ErrRejected)

	head, err := r.Fetch(ctx)
	require.NoError(t, err)
	assert.Equal(t, foreign, head.String())
	c3, err := r.Commit(head, map[string][]byte{"a.yaml": []byte("2\n")}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c3))
	files, err := r.Files(c3)
	require.NoError(t, err)
	assert.Contains(t, files, "foreign.txt", "the foreign commit is kept")
}

// looseObjects counts the loose object files of a local repository.
func looseObjects(t *testing.T, dir string) int {
	n := 0
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(dir, "objects"), p)
		if !d.IsDir() && len(filepath.Dir(rel)) == 2 { // objects/ab/cdef...
			n++
		}
		return nil
	}))
	return n
}

// TestRepackLeavesNoLooseObjects (issue 10, finding 4): every commit writes
// loose objects; a repack after a push packs them, drops what nothing
// reaches, and the repository goes on working.
func TestRepackLeavesNoLooseObjects(t *testing.T) {
	url, bare := remote(t)
	ctx := context.Background()
	dir := t.TempDir()
	r, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	head, err := r.Fetch(ctx)
	require.NoError(t, err)
	for i := range 30 {
		head, err = r.Commit(head, map[string][]byte{"clusters/dev/a.yaml": []byte(strings.Repeat("a", i+1) + "\n")}, info)
		require.NoError(t, err)
	}
	// An abandoned commit, as a replay leaves behind: nothing reaches it.
	_, err = r.Commit(head, map[string][]byte{"abandoned.yaml": []byte("gone\n")}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, head))
	require.Greater(t, looseObjects(t, dir), 90)

	require.NoError(t, r.Repack())
	assert.Equal(t, 0, looseObjects(t, dir), "packed, or pruned when nothing reaches them")
	files, err := r.Files(head)
	require.NoError(t, err)
	content, err := r.ReadBlob(files["clusters/dev/a.yaml"])
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("a", 30)+"\n", string(content))

	next, err := r.Commit(head, map[string][]byte{"clusters/dev/b.yaml": []byte("b\n")}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, next))
	assert.Equal(t, "b", gitCLI(t, bare, "show", "main:clusters/dev/b.yaml"))
	gitCLI(t, dir, "fsck", "--strict")
}

// TestPushSendsWhatItWrote: once a fetch or push told the remote's head, a
// push sends the objects written since, without walking the repository, and
// git finds the remote whole: objects another commit replaced before it
// was pushed, and blobs the remote held already, are no harm. A Repo opened
// on a repository with unpushed commits it did not write walks once.
func TestPushSendsWhatItWrote(t *testing.T) {
	url, bare := remote(t)
	ctx := context.Background()
	dir := t.TempDir()
	r, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	head, err := r.Fetch(ctx)
	require.NoError(t, err)
	files := map[string][]byte{}
	for i := range 50 {
		files[fmt.Sprintf("ns/configmaps/cm-%02d.yaml", i)] = fmt.Appendf(nil, "i: %d\n", i)
	}
	c1, err := r.Commit(head, files, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c1))
	// Replaced before it was pushed: its objects go along, unreferenced.
	_, err = r.Commit(c1, map[string][]byte{"ns/configmaps/cm-00.yaml": []byte("dropped\n")}, info)
	require.NoError(t, err)
	c2, err := r.Commit(c1, map[string][]byte{"ns/configmaps/cm-01.yaml": []byte("i: 2\n"), "other/x.yaml": []byte("x\n")}, info)
	require.NoError(t, err)
	c3, err := r.Commit(c2, map[string][]byte{"ns/configmaps/cm-02.yaml": nil}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c3))
	assert.Zero(t, r.walked, "no push walked the repository")
	assert.Equal(t, c3.String(), gitCLI(t, bare, "rev-parse", "main"))
	assert.Equal(t, "i: 2", gitCLI(t, bare, "show", "main:ns/configmaps/cm-01.yaml"))
	gitCLI(t, bare, "fsck", "--strict", "--connectivity-only")
	gitCLI(t, bare, "fsck", "--strict")

	// A new Repo on the same directory, holding a commit it did not write.
	c4, err := r.Commit(c3, map[string][]byte{"ns/configmaps/cm-03.yaml": []byte("after restart\n")}, info)
	require.NoError(t, err)
	again, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	_, err = again.Fetch(ctx)
	require.NoError(t, err)
	require.NoError(t, again.Push(ctx, c4))
	assert.Equal(t, 1, again.walked, "a commit it did not write is found by walking")
	c5, err := again.Commit(c4, map[string][]byte{"ns/configmaps/cm-04.yaml": []byte("then fresh\n")}, info)
	require.NoError(t, err)
	require.NoError(t, again.Push(ctx, c5))
	assert.Equal(t, 1, again.walked, "after that, pushes send what it wrote")
	assert.Equal(t, "then fresh", gitCLI(t, bare, "show", "main:ns/configmaps/cm-04.yaml"))
	gitCLI(t, bare, "fsck", "--strict")
}

// TestAPushWhoseAnswerWasLost: the remote already holds the head a push
// sends (an earlier push got there, its answer lost): the push succeeds,
// rather than be taken for the remote having moved.
func TestAPushWhoseAnswerWasLost(t *testing.T) {
	url, bare := remote(t)
	ctx := context.Background()
	dir := t.TempDir()
	r, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	head, err := r.Fetch(ctx)
	require.NoError(t, err)
	c1, err := r.Commit(head, map[string][]byte{"a.yaml": []byte("1\n")}, info)
	require.NoError(t, err)
	require.NoError(t, r.Push(ctx, c1))
	c2, err := r.Commit(c1, map[string][]byte{"a.yaml": []byte("2\n")}, info)
	require.NoError(t, err)
	// The same push, made by another Repo on the same objects.
	other, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	require.NoError(t, other.Push(ctx, c2))
	require.NoError(t, r.Push(ctx, c2))
	assert.Equal(t, c2.String(), gitCLI(t, bare, "rev-parse", "main"))
}

// fetched opens a Repo in a new folder on a new remote, fetched: its folder,
// the remote's bare repository and head.
func fetched(t *testing.T) (r *Repo, dir, bare string, head plumbing.Hash) {
	t.Helper()
	url, bare := remote(t)
	dir = t.TempDir()
	r, err := Open(dir, url, "main", nil)
	require.NoError(t, err)
	head, err = r.Fetch(context.Background())
	require.NoError(t, err)
	return r, dir, bare, head
}

// packs counts the packs of a local repository.
func packs(t *testing.T, dir string) int {
	m, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	require.NoError(t, err)
	return len(m)
}

// TestACommitOfManyObjectsIsOnePack: a commit writing packAt objects or more
// writes them as one pack, not as loose files; a small one stays loose. Both
// read back, push whole (also when the content is no longer held in memory
// and is read from disk), survive reopening, and repack into one pack.
func TestACommitOfManyObjectsIsOnePack(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held in memory %t", held), func(t *testing.T) {
			ctx := context.Background()
			r, dir, bare, head := fetched(t)
			if !held {
				r.freshBytes = freshMemory // the budget is spent: the push reads from disk
			}
			files := map[string][]byte{}
			for i := range 2 * packAt {
				files[fmt.Sprintf("ns-%d/configmaps/cm-%03d.yaml", i%3, i)] = fmt.Appendf(nil, "i: %d\n", i)
			}
			c1, err := r.Commit(head, files, info)
			require.NoError(t, err)
			assert.Zero(t, looseObjects(t, dir), "no loose object")
			assert.Equal(t, 1, packs(t, dir))
			content, err := r.ReadBlob(BlobHash([]byte("i: 7\n")))
			require.NoError(t, err)
			assert.Equal(t, "i: 7\n", string(content))

			c2, err := r.Commit(c1, map[string][]byte{"ns-0/configmaps/cm-000.yaml": []byte("i: changed\n")}, info)
			require.NoError(t, err)
			assert.Equal(t, 5, looseObjects(t, dir), "a small commit stays loose: blob, three trees, commit")
			if held {
				assert.Positive(t, r.freshBytes)
			}
			require.NoError(t, r.Push(ctx, c2))
			assert.Zero(t, r.freshBytes, "nothing held once pushed")
			assert.Zero(t, r.walked)
			assert.Equal(t, c2.String(), gitCLI(t, bare, "rev-parse", "main"))
			assert.Equal(t, "i: 100", gitCLI(t, bare, "show", "main:ns-1/configmaps/cm-100.yaml"))
			gitCLI(t, bare, "fsck", "--strict")
			gitCLI(t, dir, "fsck", "--strict")

			again, err := Open(dir, r.url, "main", nil)
			require.NoError(t, err)
			got, err := again.Files(c2)
			require.NoError(t, err)
			assert.Len(t, got, 2*packAt)
			require.NoError(t, again.Repack())
			assert.Equal(t, 1, packs(t, dir), "repacked into one")
			assert.Zero(t, looseObjects(t, dir))
			gitCLI(t, dir, "fsck", "--strict")
		})
	}
}

// TestRepackingAgain: a second repack deletes the pack the first made; the
// repository must stop looking for objects in it.
func TestRepackingAgain(t *testing.T) {
	ctx := context.Background()
	r, _, _, head := fetched(t)
	var err error
	for round := range 3 {
		for i := range 5 {
			head, err = r.Commit(head, map[string][]byte{fmt.Sprintf("r%d/%d.yaml", round, i): []byte("x\n")}, info)
			require.NoError(t, err)
		}
		require.NoError(t, r.Push(ctx, head))
		require.NoError(t, r.Repack(), "round %d", round)
		files, err := r.Files(head)
		require.NoError(t, err, "round %d", round)
		assert.Len(t, files, 5*(round+1))
	}
}

// TestAFenceStopsThePushBeforeItIsSent: a fence that refuses keeps the
// remote where it was, on both ways a push goes (sending what this Repo
// wrote, and walking the repository), and the push goes once it allows.
func TestAFenceStopsThePushBeforeItIsSent(t *testing.T) {
	for _, walk := range []bool{false, true} {
		t.Run(fmt.Sprintf("walk=%v", walk), func(t *testing.T) {
			url, bare := remote(t)
			require.NoError(t, gitserver.RecordPushes(bare))
			ctx := context.Background()
			dir := t.TempDir()
			r, err := Open(dir, url, "main", nil)
			require.NoError(t, err)
			_, err = r.Fetch(ctx)
			require.NoError(t, err)
			c1, err := r.Commit(plumbing.ZeroHash, map[string][]byte{"a.yaml": []byte("1\n")}, info)
			require.NoError(t, err)
			if walk { // a Repo that did not write c1 walks to find what to send
				r, err = Open(dir, url, "main", nil)
				require.NoError(t, err)
			}
			refusal := errors.New("the Lease is held by another replica")
			asked := 0
			r.SetFence(func(context.Context) error { asked++; return refusal })
			err = r.Push(ctx, c1)
			require.ErrorIs(t, err, ErrFenced)
			require.ErrorIs(t, err, refusal)
			assert.Equal(t, 1, asked)
			pushes, err := gitserver.Pushes(bare)
			require.NoError(t, err)
			assert.Empty(t, pushes, "a fenced push reached the remote")

			r.SetFence(func(context.Context) error { asked++; return nil })
			require.NoError(t, r.Push(ctx, c1))
			assert.Equal(t, 2, asked)
			assert.Equal(t, c1.String(), gitCLI(t, bare, "rev-parse", "main"))
			assert.Equal(t, walk, r.walked > 0)
		})
	}
}
