package ledger

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repo is a bare repository and a clone that commits documents to it.
type repo struct {
	t          *testing.T
	bare, work string
	base       string
}

func newRepo(t *testing.T) *repo {
	r := &repo{t: t, bare: filepath.Join(t.TempDir(), "r.git"), work: filepath.Join(t.TempDir(), "w")}
	r.git("", "init", "--quiet", "--bare", "--initial-branch=main", r.bare)
	r.git("", "clone", "--quiet", r.bare, r.work)
	r.commit("Reverser", map[string]string{"seed": "seed"})
	r.base = r.git(r.work, "rev-parse", "HEAD")
	return r
}

func (r *repo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// commit writes each object's document (a value, "" to delete it, or any
// text starting with "!" as a document without a value) as author, and
// pushes.
func (r *repo) commit(author string, states map[string]string) {
	r.t.Helper()
	for name, v := range states {
		p := filepath.Join(r.work, "mirror", name+".yaml")
		require.NoError(r.t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case v == "":
			require.NoError(r.t, os.Remove(p))
		case strings.HasPrefix(v, "!"):
			require.NoError(r.t, os.WriteFile(p, []byte(v[1:]+"\n"), 0o644))
		default:
			require.NoError(r.t, os.WriteFile(p, []byte("apiVersion: v1\nkind: ConfigMap\ndata:\n  v: "+v+"\n"), 0o644))
		}
	}
	r.git(r.work, "add", "-A")
	r.git(r.work, "-c", "user.name="+author, "-c", "user.email=x@example.com", "commit", "--quiet", "--allow-empty", "-m", "c")
	r.git(r.work, "push", "--quiet", "origin", "main")
}

var names = Names{Committer: "Reverser", Unresolved: "unknown", Foreign: "Somebody"}

// check runs the ledger over what r holds after its base.
func (r *repo) check(writes []Write, final map[string]string) Verdict {
	r.t.Helper()
	commits, err := History(r.bare, r.base, "mirror")
	require.NoError(r.t, err)
	l := &Ledger{}
	for _, w := range writes {
		l.Add(w)
	}
	return Check(l.ByObject(), commits, final, names, func(o string) bool { return strings.HasPrefix(o, "cm-") })
}

var rv int64

func set(obj, writer, value string) Write {
	rv++
	return Write{Object: obj, Writer: writer, Value: value, RV: rv}
}

func del(obj, writer string) Write { return Write{Object: obj, Writer: writer} }

func TestAFaithfulHistoryPasses(t *testing.T) {
	r := newRepo(t)
	writes := []Write{set("cm-a", "alice", "alice-1"), set("cm-a", "alice", "alice-2"), set("cm-b", "bob", "bob-1"),
		set("cm-c", "bob", "bob-2"), del("cm-c", "bob"), // a create and a delete in one window: nothing in Git
		set("cm-b", "bob", "bob-3"), del("cm-b", "bob")}
	r.commit("alice", map[string]string{"cm-a": "alice-2"})
	r.commit("bob", map[string]string{"cm-b": "bob-1"})
	r.commit("bob", map[string]string{"cm-b": ""})
	v := r.check(writes, map[string]string{"cm-a": "alice-2"})
	assert.Equal(t, Verdict{Committed: 3}, v)
}

func TestTheLedgerBites(t *testing.T) {
	t.Run("a write committed again after the history moved on is DUPLICATED", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-1"})
		r.commit("alice", map[string]string{"cm-a": ""})
		r.commit("alice", map[string]string{"cm-a": "alice-1"}) // a replay committing the create again
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), del("cm-a", "alice")}, map[string]string{"cm-a": "alice-1"})
		assert.Len(t, v.Duplicated, 1, "%+v", v)
		assert.NotEmpty(t, v.Lost, "and the delete is lost: Git ends with the object")
	})
	t.Run("a commit that changes nothing is DUPLICATED", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-1"})
		r.commit("alice", nil)
		v := r.check([]Write{set("cm-a", "alice", "alice-1")}, map[string]string{"cm-a": "alice-1"})
		assert.Len(t, v.Duplicated, 1, "%+v", v)
	})
	t.Run("two authors swapped are MISATTRIBUTED", func(t *testing.T) {
		r := newRepo(t)
		r.commit("bob", map[string]string{"cm-a": "alice-1"})
		r.commit("alice", map[string]string{"cm-b": "bob-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), set("cm-b", "bob", "bob-1")},
			map[string]string{"cm-a": "alice-1", "cm-b": "bob-1"})
		assert.Len(t, v.Misattributed, 2, "%+v", v)
		assert.Zero(t, v.Committed)
	})
	t.Run("the last change of a window dropped is LOST", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), set("cm-a", "alice", "alice-2")}, map[string]string{"cm-a": "alice-1"})
		assert.Len(t, v.Lost, 1, "%+v", v)
	})
	t.Run("another author's change overwritten before it was committed is LOST", func(t *testing.T) {
		r := newRepo(t)
		r.commit("bob", map[string]string{"cm-a": "bob-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), set("cm-a", "bob", "bob-1")}, map[string]string{"cm-a": "bob-1"})
		assert.Len(t, v.Lost, 1, "%+v", v)
	})
	t.Run("a state nobody wrote is LOST", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-9", "cm-z": "bob-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1")}, map[string]string{"cm-a": "alice-9", "cm-z": "bob-1"})
		assert.Len(t, v.Lost, 3, "alice-9 nobody wrote, alice-1 never committed, cm-z nobody wrote: %+v", v)
	})
	t.Run("an older write committed after a newer one is REORDERED", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-2"})
		r.commit("alice", map[string]string{"cm-a": "alice-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), set("cm-a", "alice", "alice-2")}, map[string]string{"cm-a": "alice-1"})
		assert.Len(t, v.Reordered, 1, "%+v", v)
	})
	t.Run("writes recorded out of the API server's order are REORDERED", func(t *testing.T) {
		r := newRepo(t)
		r.commit("alice", map[string]string{"cm-a": "alice-2"})
		v := r.check([]Write{{Object: "cm-a", Writer: "alice", Value: "alice-1", RV: 9}, {Object: "cm-a", Writer: "alice", Value: "alice-2", RV: 8}},
			map[string]string{"cm-a": "alice-2"})
		assert.Len(t, v.Reordered, 1, "%+v", v)
	})
	t.Run("a write committed by the committer is UNRESOLVED-AUTHOR, not misattributed", func(t *testing.T) {
		r := newRepo(t)
		r.commit("Reverser", map[string]string{"cm-a": "alice-1"})
		r.commit("unknown", map[string]string{"cm-b": "bob-1"})
		v := r.check([]Write{set("cm-a", "alice", "alice-1"), set("cm-b", "bob", "bob-1")},
			map[string]string{"cm-a": "alice-1", "cm-b": "bob-1"})
		assert.Len(t, v.Unresolved, 2, "%+v", v)
		assert.Equal(t, []string{"alice-1", "bob-1"}, []string{v.UnresolvedWrites[0].Value, v.UnresolvedWrites[1].Value})
		assert.Empty(t, v.Misattributed)
	})
}

func TestAForeignCommitMayBePutBackOnce(t *testing.T) {
	r := newRepo(t)
	r.commit("alice", map[string]string{"cm-a": "alice-1", "cm-b": "alice-2"})
	r.commit("Somebody", map[string]string{"cm-a": "!edited: by hand", "cm-b": ""})
	r.commit("Reverser", map[string]string{"cm-a": "alice-1", "cm-b": "alice-2"}) // put back as the cluster holds them
	r.commit("alice", map[string]string{"cm-a": "alice-3"})
	writes := []Write{set("cm-a", "alice", "alice-1"), set("cm-b", "alice", "alice-2"), set("cm-a", "alice", "alice-3")}
	final := map[string]string{"cm-a": "alice-3", "cm-b": "alice-2"}
	assert.Equal(t, Verdict{Committed: 3}, r.check(writes, final))

	r.commit("Reverser", map[string]string{"cm-b": ""})
	r.commit("Reverser", map[string]string{"cm-b": "alice-2"}) // put back twice: once too many
	v := r.check(writes, final)
	assert.NotEmpty(t, v.Lost, "a delete nobody made: %+v", v)
	assert.Len(t, v.Duplicated, 1, "%+v", v)
}

func TestAWriteWhoseAnswerWasLostMayBeInGitOrNot(t *testing.T) {
	r := newRepo(t)
	r.commit("alice", map[string]string{"cm-a": "alice-2"})
	writes := []Write{set("cm-a", "alice", "alice-1"), {Object: "cm-a", Writer: "alice", Value: "alice-2", Uncertain: true},
		{Object: "cm-a", Writer: "alice", Value: "alice-3", Uncertain: true}}
	assert.Equal(t, Verdict{Committed: 1}, r.check(writes, map[string]string{"cm-a": "alice-2"}))
}
