package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/worker"
)

// workers is the registry of branch workers: one per GitProvider and
// branch (workerKey), counted by the mirrors that use it. The last release
// closes a worker; its successor on the same key starts once it has
// stopped, and a worker nothing succeeds removes its local repository.
//
// workers.mu guards both maps and each worker's counts and fingerprints.
// A local repository is opened under it, so none opens a folder being
// removed; it is never held while calling a worker. The mirror may take
// it while holding Controller.mu, never the other way round.
type workers struct {
	dataDir  string
	facts    *attribution.Index
	reporter worker.Reporter
	// fence is every repository's push fence; nil pushes unasked.
	fence gitrepo.Fence

	mu      sync.Mutex
	ctx     context.Context           // the workers run until it ends
	running map[string]*runningWorker // by workerKey
	retired map[string]*runningWorker // closed, by workerKey, until they have stopped
}

type runningWorker struct {
	*worker.Worker
	authFP    string
	committer identity.Signature
	signFP    string // the signing key's fingerprint; empty when unsigned
	// refs counts the mirrors (and reconciles setting one up) using it.
	refs int
	// stopped is closed once Run has returned.
	stopped chan struct{}
}

// workerSetup is what a worker pushes, commits and signs with.
type workerSetup struct {
	url, branch string
	auth        transport.AuthMethod
	authFP      string
	committer   identity.Signature
	signer      gitrepo.Signer
	signFP      string
}

func newWorkers(dataDir string, facts *attribution.Index, reporter worker.Reporter, fence gitrepo.Fence) *workers {
	return &workers{dataDir: dataDir, facts: facts, reporter: reporter, fence: fence, ctx: context.Background(),
		running: map[string]*runningWorker{}, retired: map[string]*runningWorker{}}
}

// run makes workers started from now on run until ctx ends.
func (ws *workers) run(ctx context.Context) {
	ws.mu.Lock()
	ws.ctx = ctx
	ws.mu.Unlock()
}

// get returns the running worker of key, or nil.
func (ws *workers) get(key string) *runningWorker {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.running[key]
}

// acquire returns the worker of key, started when none runs, and counts one
// more use of it; a running one takes rotated credentials, committer and
// signing key.
func (ws *workers) acquire(ctx context.Context, key string, s workerSetup) (*worker.Worker, error) {
	ws.mu.Lock()
	w, ok := ws.running[key]
	rotated := ok && w.authFP != s.authFP
	recommitted := ok && w.committer != s.committer
	resigned := ok && w.signFP != s.signFP
	if ok {
		w.refs++
		w.authFP, w.committer, w.signFP = s.authFP, s.committer, s.signFP
	}
	ws.mu.Unlock()
	if ok {
		if rotated {
			w.SetAuth(ctx, s.auth)
		}
		if recommitted {
			w.SetCommitter(s.committer)
		}
		if resigned {
			w.SetSigner(s.signer)
		}
		return w.Worker, nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if existing, ok := ws.running[key]; ok {
		existing.refs++
		return existing.Worker, nil
	}
	dir := ws.repoDir(key)
	repo, err := gitrepo.Open(dir, s.url, s.branch, s.auth)
	if err != nil {
		return nil, err
	}
	if ws.fence != nil {
		repo.SetFence(ws.fence)
	}
	var wake <-chan struct{}
	if ws.facts != nil {
		wake = ws.facts.Subscribe()
	}
	w = &runningWorker{Worker: worker.New(repo, s.committer, ws.reporter, wake), authFP: s.authFP, committer: s.committer, signFP: s.signFP,
		refs: 1, stopped: make(chan struct{})}
	if s.signer != nil {
		w.SetSigner(s.signer) // before any target, so every commit is signed
	}
	ws.running[key] = w
	go ws.serve(key, dir, w, ws.retired[key], wake)
	return w.Worker, nil
}

// serve runs w after its predecessor on the same local repository has
// stopped, then forgets it, removing the repository when nothing succeeds
// it.
func (ws *workers) serve(key, dir string, w, prev *runningWorker, wake <-chan struct{}) {
	defer close(w.stopped)
	if prev != nil {
		<-prev.stopped // the same local repository: one worker at a time
	}
	ws.mu.Lock()
	ctx := ws.ctx
	ws.mu.Unlock()
	w.Run(ctx)
	if ws.facts != nil {
		ws.facts.Unsubscribe(wake)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.retired[key] == w {
		delete(ws.retired, key)
	}
	if _, successor := ws.running[key]; !successor && ctx.Err() == nil {
		// Nothing mirrors this branch with this provider any more: its
		// clone would only take disk. A restart keeps clones.
		if err := os.RemoveAll(dir); err != nil {
			klog.FromContext(ctx).Error(err, "Removing an unused local repository", "dir", dir)
		}
	}
}

// repoDir is where the worker of key keeps its local repository.
func (ws *workers) repoDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(ws.dataDir, "repos", hex.EncodeToString(sum[:8]))
}

// release drops a use of the worker of key; the last one closes it, and
// says so.
func (ws *workers) release(key string) (closed bool) {
	ws.mu.Lock()
	w, ok := ws.running[key]
	last := ok && w.refs <= 1
	switch {
	case last:
		delete(ws.running, key)
		ws.retired[key] = w
	case ok:
		w.refs--
	}
	ws.mu.Unlock()
	if last {
		w.Close()
	}
	return last
}

// retiring says how many closed workers have not stopped yet.
func (ws *workers) retiring() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.retired)
}
