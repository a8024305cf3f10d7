// Package ledger proves the mirror invariant per write, not per final
// state: every write a load generator makes carries a value nobody else
// writes (its writer and a sequence number) and is recorded with the
// resourceVersion the API server answered; the branch's history, walked
// commit by commit, must hold each write once, by its writer, in the order
// the API server took them. It reads Git with the git CLI and needs nothing
// of the product, so a bug there cannot hide itself.
package ledger

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// Write is one write of the load.
type Write struct {
	Object, Writer string
	// Value is the write's data.v; "" for a delete.
	Value string
	// RV is the resourceVersion the API server answered: 0 for a delete
	// (answered with a Status) and for a write marked Uncertain.
	RV int64
	// Uncertain: the request failed in a way that leaves open whether it
	// happened (a server going away mid-request): it may be in Git or not.
	Uncertain bool
	// At is when the answer came: a fault may excuse what happened to the
	// writes of a span of time.
	At time.Time
}

func (e Write) deleted() bool { return e.Value == "" }

func (e Write) String() string {
	what := "sets " + e.Value
	if e.deleted() {
		what = "deletes it"
	}
	return fmt.Sprintf("%s: %s %s (rv %d)", e.Object, e.Writer, what, e.RV)
}

// Ledger records a load's writes, safe for its goroutines.
type Ledger struct {
	mu      sync.Mutex
	entries []Write
}

// Add records a write.
func (l *Ledger) Add(e Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

// Made counts the writes the API server took.
func (l *Ledger) Made() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if !e.Uncertain {
			n++
		}
	}
	return n
}

// ByObject is each object's writes in the order they were made: one
// goroutine writes an object, so that is the API server's order too.
func (l *Ledger) ByObject() map[string][]Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]Write{}
	for _, e := range l.entries {
		out[e.Object] = append(out[e.Object], e)
	}
	return out
}

// Commit is one commit of the branch and the states it gives the
// documents it changes.
type Commit struct {
	SHA, Author string
	// States maps an object's name to the value its document holds after
	// the commit: data.v, "" when the document is gone, or Foreign
	// when it holds no value a writer could have made.
	States map[string]string
}

// Foreign is the state of a document that holds no value (data.v).
const Foreign = "\x00foreign"

// History lists the commits of the bare repository's main after base,
// oldest first (first parents), with the states of the documents under
// folder they change, each named by its file name less ".yaml".
func History(bare, base, folder string) ([]Commit, error) {
	out, err := exec.Command("git", "-C", bare, "log", "--reverse", "--first-parent", "--raw", "--no-renames", "--no-abbrev",
		"--format=%x00%H%x1f%an", base+"..main").Output()
	if err != nil {
		return nil, fmt.Errorf("git log: %w", err)
	}
	var commits []Commit
	var want []string
	for _, rec := range strings.Split(string(out), "\x00") {
		head, raw, _ := strings.Cut(strings.TrimSpace(rec), "\n")
		sha, author, ok := strings.Cut(head, "\x1f")
		if !ok {
			continue
		}
		c := Commit{SHA: sha, Author: author, States: map[string]string{}}
		for _, line := range strings.Split(raw, "\n") {
			// :100644 100644 <old> <new> M\t<path>
			meta, p, ok := strings.Cut(line, "\t")
			f := strings.Fields(meta)
			if !ok || len(f) < 5 || !strings.HasPrefix(p, folder+"/") {
				continue
			}
			name := strings.TrimSuffix(path.Base(p), ".yaml")
			if f[4] == "D" {
				c.States[name] = ""
				continue
			}
			c.States[name] = "blob:" + f[3]
			want = append(want, f[3])
		}
		commits = append(commits, c)
	}
	values, err := blobValues(bare, want)
	if err != nil {
		return nil, err
	}
	for _, c := range commits {
		for name, s := range c.States {
			if blob, ok := strings.CutPrefix(s, "blob:"); ok {
				c.States[name] = values[blob]
			}
		}
	}
	return commits, nil
}

// blobValues reads the blobs with one git process and returns each one's
// data.v (Foreign when it has none).
func blobValues(bare string, blobs []string) (map[string]string, error) {
	out := map[string]string{}
	if len(blobs) == 0 {
		return out, nil
	}
	cmd := exec.Command("git", "-C", bare, "cat-file", "--batch")
	cmd.Stdin = strings.NewReader(strings.Join(blobs, "\n") + "\n")
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	r := bufio.NewReader(bytes.NewReader(data))
	for range blobs {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("git cat-file: %w", err)
		}
		f := strings.Fields(header)
		if len(f) != 3 {
			return nil, fmt.Errorf("git cat-file: %q", header)
		}
		size, _ := strconv.Atoi(f[2])
		content := make([]byte, size+1) // and its newline
		if _, err := io.ReadFull(r, content); err != nil {
			return nil, err
		}
		var doc struct {
			Data map[string]string `json:"data"`
		}
		out[f[0]] = Foreign
		if yaml.Unmarshal(content[:size], &doc) == nil && doc.Data["v"] != "" {
			out[f[0]] = doc.Data["v"]
		}
	}
	return out, nil
}

// Verdict is the ledger's finding, per write.
type Verdict struct {
	// Committed counts writes whose state a commit holds, by their writer.
	Committed int
	// Lost: writes neither committed nor superseded by a later write of
	// the same writer in the same window, and states no writer made.
	Lost []string
	// Duplicated: a write committed again without a foreign commit having
	// changed its document in between, and commits that change nothing.
	Duplicated []string
	// Misattributed: a write committed by another person.
	Misattributed []string
	// Unresolved: a write committed by the committer or the unresolved
	// author, the documented fallback when no fact names the writer.
	Unresolved []string
	// UnresolvedWrites are the writes of Unresolved, in the same order.
	UnresolvedWrites []Write
	// Reordered: a write committed after a later one of the same object.
	Reordered []string
}

// Names are the authors that are not writers.
type Names struct {
	// Committer re-asserts the cluster's state; Unresolved is the author of
	// a change no fact named; Foreign pushes the commits a fault makes.
	Committer, Unresolved, Foreign string
}

// Check walks each object's commits against its writes. final is the
// state each object's document ends with in Git ("" when it has none);
// mine says which documents' objects belong to the load, so a commit of
// one that has no writes is found too.
func Check(writes map[string][]Write, commits []Commit, final map[string]string, names Names, mine func(object string) bool) Verdict {
	var v Verdict
	events := map[string][]int{} // object → indexes of the commits changing it
	for i, c := range commits {
		for name := range c.States {
			events[name] = append(events[name], i)
		}
		if len(c.States) == 0 && c.Author != names.Foreign {
			v.Duplicated = append(v.Duplicated, fmt.Sprintf("commit %s changes nothing", c.SHA[:7]))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(writes)) {
		walkObject(&v, writes[name], commits, events[name], final[name], names)
	}
	for _, name := range slices.Sorted(maps.Keys(events)) {
		if _, ok := writes[name]; !ok && mine(name) {
			v.Lost = append(v.Lost, fmt.Sprintf("%s: commit %s writes an object nobody wrote", name, commits[events[name][0]].SHA[:7]))
		}
	}
	return v
}

// walkObject checks one object: each commit's state must be a write after
// the last committed one (or, after a foreign commit, the last committed
// one again, re-asserted), and the writes it passes over are superseded
// only by the same writer.
func walkObject(v *Verdict, w []Write, commits []Commit, idx []int, final string, names Names) {
	// The writes' order is the API server's: their resourceVersions rise.
	var rv int64
	for _, e := range w {
		if e.RV != 0 && e.RV <= rv {
			v.Reordered = append(v.Reordered, fmt.Sprintf("%s recorded after a write at rv %d", e, rv))
		}
		rv = max(rv, e.RV)
	}
	last, dirty := -1, false
	committed := map[int]bool{}
	for _, i := range idx {
		c := commits[i]
		state := c.States[w[0].Object]
		if c.Author == names.Foreign {
			dirty = true
			continue
		}
		j := matchWrite(w, last, state)
		switch {
		case j < 0:
			v.Lost = append(v.Lost, fmt.Sprintf("%s: commit %s writes a state nobody made (%q)", w[0].Object, c.SHA[:7], state))
			continue
		case j == last && dirty:
			dirty = false // putting back what a foreign commit changed
			continue
		case committed[j]:
			v.Duplicated = append(v.Duplicated, fmt.Sprintf("%s committed again in %s", w[j], c.SHA[:7]))
			continue
		case j < last:
			v.Reordered = append(v.Reordered, fmt.Sprintf("%s committed in %s after the later %s", w[j], c.SHA[:7], w[last]))
			continue
		}
		superseded(v, w, last+1, j)
		committed[j], last, dirty = true, j, false
		switch c.Author {
		case w[j].Writer:
			v.Committed++
		case names.Committer, names.Unresolved:
			v.Unresolved = append(v.Unresolved, fmt.Sprintf("%s committed by %s in %s", w[j], c.Author, c.SHA[:7]))
			v.UnresolvedWrites = append(v.UnresolvedWrites, w[j])
		default:
			v.Misattributed = append(v.Misattributed, fmt.Sprintf("%s committed by %s in %s", w[j], c.Author, c.SHA[:7]))
		}
	}
	// The history must end with the last write, unless that write left the
	// document as Git has it (a create and a delete in one window).
	end := len(w) - 1
	for end > last && w[end].Uncertain {
		end--
	}
	if end <= last {
		if last >= 0 && final != w[last].Value {
			v.Lost = append(v.Lost, fmt.Sprintf("%s: Git ends at %q, not at its last write, %s", w[last].Object, final, w[last]))
		}
		return
	}
	if w[end].deleted() && final == "" {
		superseded(v, w, last+1, end)
		return
	}
	for k := last + 1; k <= end; k++ {
		if !w[k].Uncertain {
			v.Lost = append(v.Lost, fmt.Sprintf("%s never committed (Git ends at %q)", w[k], final))
		}
	}
}

// matchWrite finds the write a state stands for: the one that wrote its
// value, or for a deleted document the first delete after last (or last
// itself when it is one). -1: no write made that state.
func matchWrite(w []Write, last int, state string) int {
	if state == "" {
		if last >= 0 && w[last].deleted() {
			return last
		}
		for k := last + 1; k < len(w); k++ {
			if w[k].deleted() {
				return k
			}
		}
		return -1
	}
	return slices.IndexFunc(w, func(e Write) bool { return e.Value == state })
}

// superseded checks the writes from..to-1, which no commit holds: each must
// be overwritten by the write at to, in the same window, so by the same
// writer. Writes that may not have happened are passed over.
func superseded(v *Verdict, w []Write, from, to int) {
	for k := from; k < to; k++ {
		if !w[k].Uncertain && w[k].Writer != w[to].Writer {
			v.Lost = append(v.Lost, fmt.Sprintf("%s never committed: overwritten by %s", w[k], w[to]))
		}
	}
}
