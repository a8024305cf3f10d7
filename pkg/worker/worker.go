// Package worker runs branch workers: one goroutine per (GitProvider,
// branch) that owns the local repository and every write to that branch.
// Changes collect in a commit window per GitTarget, each window becomes one
// commit, and commits are pushed in batches. A rejected push fetches the
// remote, starts again from its head and replays the cluster's state.
package worker

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/watch"
)

// Target is a GitTarget as the worker needs it.
type Target struct {
	// Key is namespace/name of the GitTarget.
	Key    string
	Path   string
	Window Window
	// PruneAlways sweeps documents the cluster does not hold after each
	// stream's initial state; otherwise only observed deletes remove files.
	PruneAlways bool
}

// Window says when a target's open changes become a commit.
type Window struct {
	Silence, MaxAge time.Duration
}

// Reporter hears what a worker did, for status and logs. Calls come from
// the worker's goroutine and must not block.
type Reporter interface {
	Committed(target, sha string, at time.Time)
	Pushed(targets []string, sha string, at time.Time)
	Failed(targets []string, err error)
}

// Worker owns one branch of one repository.
type Worker struct {
	repo      *gitrepo.Repo
	committer gitrepo.Signature
	reporter  Reporter
	in        chan func()
	clock     func() time.Time

	ready    bool
	head     plumbing.Hash
	pushed   plumbing.Hash
	index    map[string]plumbing.Hash // files of head
	targets  map[string]*target
	unpushed []time.Time // when the changes in unpushed commits were observed
	// unpushedPaths are the paths unpushed commits changed, per target: a
	// replay after a rejected push must redo their deletes too.
	unpushedPaths map[string]map[string]string
	retryAt       time.Time
	backoff       time.Duration
}

type target struct {
	cfg     Target
	desired map[string]doc
	window  *window
	// synced are the scopes whose initial state is complete; sweep says
	// they must be swept against the current head.
	synced []watch.Scope
	sweep  bool
}

type doc struct {
	content []byte
	desc    string // "ConfigMap demo/app"
}

type window struct {
	opened, last, firstSeen time.Time
	paths                   map[string]string // path → description
}

// New returns a worker for repo, committing as committer. Run starts it.
func New(repo *gitrepo.Repo, committer gitrepo.Signature, reporter Reporter) *Worker {
	return &Worker{
		repo: repo, committer: committer, reporter: reporter,
		in:            make(chan func(), 4096),
		clock:         time.Now,
		index:         map[string]plumbing.Hash{},
		targets:       map[string]*target{},
		unpushedPaths: map[string]map[string]string{},
	}
}

// do hands f to the worker's goroutine; it blocks when the queue is full,
// which slows the streams rather than growing memory without bound.
func (w *Worker) do(ctx context.Context, f func()) {
	metrics.QueueDepth.Inc()
	select {
	case w.in <- f:
	case <-ctx.Done():
		metrics.QueueDepth.Dec()
	}
}

// SetTarget adds or updates a target.
func (w *Worker) SetTarget(ctx context.Context, t Target) {
	w.do(ctx, func() {
		if cur, ok := w.targets[t.Key]; ok {
			cur.cfg = t
			return
		}
		w.targets[t.Key] = &target{cfg: t, desired: map[string]doc{}}
	})
}

// SetAuth replaces the credentials of the remote, after a Secret rotation.
func (w *Worker) SetAuth(ctx context.Context, auth transport.AuthMethod) {
	w.do(ctx, func() {
		w.repo.SetAuth(auth)
		w.retryAt = time.Time{} // try the new credentials at once
	})
}

// RemoveTarget forgets a target; its files stay in Git.
func (w *Worker) RemoveTarget(ctx context.Context, key string) {
	w.do(ctx, func() { delete(w.targets, key) })
}

// Upsert records the current document of an object.
func (w *Worker) Upsert(ctx context.Context, key, p string, content []byte, desc string, seen time.Time) {
	w.do(ctx, func() {
		t, ok := w.targets[key]
		if !ok {
			return
		}
		t.desired[p] = doc{content: content, desc: desc}
		w.touch(t, p, desc, seen)
	})
}

// Delete records that an object is gone.
func (w *Worker) Delete(ctx context.Context, key, p, desc string, seen time.Time) {
	w.do(ctx, func() {
		t, ok := w.targets[key]
		if !ok {
			return
		}
		delete(t.desired, p)
		w.touch(t, p, desc, seen)
	})
}

// Synced marks the end of a stream's initial state: with PruneAlways, the
// documents in the stream's scope that the cluster does not hold are removed.
func (w *Worker) Synced(ctx context.Context, key string, scope watch.Scope) {
	w.do(ctx, func() {
		t, ok := w.targets[key]
		if !ok || slices.Contains(t.synced, scope) {
			return
		}
		t.synced = append(t.synced, scope)
		t.sweep = true
	})
}

// sweepTarget removes, with PruneAlways, the documents in synced scopes that
// the cluster does not hold. It needs the head's files, so it runs once the
// worker has fetched, and again after every reset.
func (w *Worker) sweepTarget(t *target) {
	t.sweep = false
	if !t.cfg.PruneAlways {
		return
	}
	for p := range w.index {
		if _, held := t.desired[p]; held {
			continue
		}
		for _, scope := range t.synced {
			if watch.InScope(p, t.cfg.Path, scope.GVR, scope.Namespace) {
				w.touch(t, p, "document "+path.Base(p)+" the cluster does not hold", w.clock())
				break
			}
		}
	}
}

func (w *Worker) touch(t *target, p, desc string, seen time.Time) {
	now := w.clock()
	if t.window == nil {
		t.window = &window{opened: now, firstSeen: seen, paths: map[string]string{}}
	}
	t.window.last = now
	t.window.paths[p] = desc
}

// Run processes changes until ctx is done.
func (w *Worker) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("repository", w.repo.URL(), "branch", w.repo.Branch())
	ctx = klog.NewContext(ctx, log)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-w.in:
			metrics.QueueDepth.Dec()
			f()
			w.drain()
		case <-timer.C:
		}
		w.step(ctx)
		timer.Reset(w.nextWake())
	}
}

// drain handles what is already queued, so a burst shares its commits.
func (w *Worker) drain() {
	for {
		select {
		case f := <-w.in:
			metrics.QueueDepth.Dec()
			f()
		default:
			return
		}
	}
}

func (w *Worker) step(ctx context.Context) {
	now := w.clock()
	if !w.ready {
		if now.Before(w.retryAt) {
			return
		}
		if err := w.reset(ctx); err != nil {
			w.fail(err)
			return
		}
	}
	for _, key := range w.sortedTargets() {
		t := w.targets[key]
		if t.sweep {
			w.sweepTarget(t)
		}
		if t.window == nil {
			continue
		}
		reason := ""
		switch {
		case now.Sub(t.window.last) >= t.cfg.Window.Silence:
			reason = "silence"
		case now.Sub(t.window.opened) >= t.cfg.Window.MaxAge:
			reason = "max_age"
		default:
			continue
		}
		if err := w.commitWindow(t, reason); err != nil {
			w.fail(fmt.Errorf("committing for %s: %w", key, err))
			return
		}
	}
	if w.head != w.pushed && !now.Before(w.retryAt) {
		w.push(ctx)
	}
}

func (w *Worker) nextWake() time.Duration {
	next := time.Hour
	now := w.clock()
	consider := func(at time.Time) {
		if d := at.Sub(now); d < next {
			next = max(d, 0)
		}
	}
	for _, t := range w.targets {
		if t.window != nil {
			consider(t.window.last.Add(t.cfg.Window.Silence))
			consider(t.window.opened.Add(t.cfg.Window.MaxAge))
		}
	}
	if !w.ready || w.head != w.pushed {
		consider(w.retryAt)
	}
	return next
}

func (w *Worker) sortedTargets() []string {
	keys := make([]string, 0, len(w.targets))
	for k := range w.targets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// commitWindow turns a closed window into a commit of what actually changed.
func (w *Worker) commitWindow(t *target, reason string) error {
	win := t.window
	t.window = nil
	changes := map[string][]byte{}
	var lines []string
	for _, p := range sortedKeys(win.paths) {
		verb := ""
		d, held := t.desired[p]
		switch cur, inGit := w.index[p]; {
		case held && !inGit:
			verb = "create"
		case held && cur != gitrepo.BlobHash(d.content):
			verb = "update"
		case !held && inGit:
			verb = "delete"
		default:
			continue // the document in Git is already right
		}
		if held {
			changes[p] = d.content
		} else {
			changes[p] = nil
		}
		lines = append(lines, fmt.Sprintf("- %s %s", verb, win.paths[p]))
	}
	if len(changes) == 0 {
		metrics.Windows.WithLabelValues("empty").Inc()
		return nil
	}
	metrics.Windows.WithLabelValues(reason).Inc()
	if err := w.commit(t, changes, commitMessage(t.cfg.Path, lines), win.firstSeen); err != nil {
		return err
	}
	if w.unpushedPaths[t.cfg.Key] == nil {
		w.unpushedPaths[t.cfg.Key] = map[string]string{}
	}
	for p := range changes {
		w.unpushedPaths[t.cfg.Key][p] = win.paths[p]
	}
	return nil
}

func commitMessage(base string, lines []string) string {
	where := base
	if where == "" {
		where = "the repository root"
	}
	subject := fmt.Sprintf("Reverser: %s", strings.TrimPrefix(lines[0], "- "))
	if len(lines) > 1 {
		subject = fmt.Sprintf("Reverser: %d changes in %s", len(lines), where)
	}
	return subject + "\n\n" + strings.Join(lines, "\n") + "\n"
}

func (w *Worker) commit(t *target, changes map[string][]byte, message string, seen time.Time) error {
	start := w.clock()
	sha, err := w.repo.Commit(w.head, changes, gitrepo.CommitInfo{Author: w.committer, Committer: w.committer, Message: message, When: start})
	if err != nil {
		return err
	}
	metrics.CommitSeconds.Observe(w.clock().Sub(start).Seconds())
	metrics.Commits.Inc()
	w.head = sha
	for p, c := range changes {
		if c == nil {
			delete(w.index, p)
		} else {
			w.index[p] = gitrepo.BlobHash(c)
		}
	}
	w.unpushed = append(w.unpushed, seen)
	w.reporter.Committed(t.cfg.Key, sha.String(), start)
	return nil
}

func (w *Worker) push(ctx context.Context) {
	start := w.clock()
	err := w.repo.Push(ctx, w.head)
	metrics.PushSeconds.Observe(w.clock().Sub(start).Seconds())
	switch {
	case err == nil:
		metrics.Pushes.WithLabelValues("ok").Inc()
		now := w.clock()
		for _, seen := range w.unpushed {
			metrics.EditToPush.Observe(now.Sub(seen).Seconds())
		}
		w.unpushed, w.unpushedPaths = nil, map[string]map[string]string{}
		w.pushed, w.backoff = w.head, 0
		w.reporter.Pushed(w.sortedTargets(), w.head.String(), now)
	case errors.Is(err, gitrepo.ErrRejected):
		metrics.Pushes.WithLabelValues("rejected").Inc()
		klog.FromContext(ctx).Info("Remote branch moved; fetching and replaying the cluster's state")
		if err := w.reset(ctx); err != nil {
			w.fail(err)
			return
		}
		w.replay()
	default:
		metrics.Pushes.WithLabelValues("error").Inc()
		w.fail(err)
	}
}

// reset makes the remote head ours again: after start and after a rejection.
func (w *Worker) reset(ctx context.Context) error {
	head, err := w.repo.Fetch(ctx)
	if err != nil {
		return err
	}
	index, err := w.repo.Files(head)
	if err != nil {
		return err
	}
	w.head, w.pushed, w.index, w.ready = head, head, index, true
	for _, t := range w.targets {
		t.sweep = len(t.synced) > 0
	}
	return nil
}

// replay re-asserts every target's state on the fetched head: one commit
// per target, for whatever differs.
func (w *Worker) replay() {
	seen := w.clock()
	if len(w.unpushed) > 0 {
		seen = w.unpushed[0]
	}
	w.unpushed = nil
	for _, key := range w.sortedTargets() {
		t := w.targets[key]
		for p, d := range t.desired {
			w.touch(t, p, d.desc, seen)
		}
		for p, desc := range w.unpushedPaths[key] {
			w.touch(t, p, desc, seen)
		}
	}
	w.unpushedPaths = map[string]map[string]string{}
	// Windows now close on their own schedule; the pending window of each
	// target carries both the replay and whatever was unpushed.
}

func (w *Worker) fail(err error) {
	if w.backoff == 0 {
		w.backoff = 500 * time.Millisecond
	} else {
		w.backoff = min(2*w.backoff, 30*time.Second)
	}
	w.retryAt = w.clock().Add(w.backoff)
	w.reporter.Failed(w.sortedTargets(), err)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
