// Package gitrepo is Reverser's Git plumbing: a bare local repository per
// branch worker, commits built from the previous tree plus the changed
// entries (never a worktree scan, so a commit costs what it changes, not
// what the repository holds), fetch, and push with rejection detection.
//
// A push sends the objects written since the remote head it builds on, when
// the repository wrote every commit since then itself; only otherwise (the
// first push after a start) does it walk what the remote holds to find
// them, which costs what the repository holds. Each repository's object
// cache is bounded (objectCacheSize), so many workers do not each hold
// go-git's default of 96 MiB.
//
// A commit's objects are written once it is built: as loose files when they
// are few, as one pack when there are many (packAt), since a loose object
// costs a file created, written and renamed, which made nearly all of a
// snapshot's commit time. Packs, local and pushed, are written without
// deltas at zlib's BestSpeed (writePack). Fresh objects stay in memory until
// the next push tries to send them, up to freshMemory, so it does not read
// back from disk what was just written; after that attempt they are read
// from disk.
//
// A Repo is used by one goroutine at a time (its branch worker's).
//
// Errors that may quote the remote's URL go through redact.Error, so that no
// credentials reach status messages or logs.
package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/redact"
)

// ErrRejected means the remote branch moved: fetch, rebuild, push again.
var ErrRejected = errors.New("push rejected: the remote branch has commits this worker does not have")

// ErrFenced means the push was not sent: the fence said this process may
// not write to the remote now (a replica that lost its leader election
// Lease).
var ErrFenced = errors.New("push not sent")

// Fence is asked right before a push is sent; an error stops the push.
// It is what keeps a paused leader that lost its Lease from pushing once it
// runs again, before it notices on its own.
type Fence func(context.Context) error

// Repo is a bare repository mirroring one branch of one remote.
type Repo struct {
	repo   *git.Repository
	url    string
	branch string
	auth   transport.AuthMethod

	// fresh holds every object written since the remote head since, when
	// tracked: a push on since sends them rather than walk the repository.
	// An object's value is its content while freshBytes allows, else nil.
	tracked    bool
	since      plumbing.Hash
	fresh      map[plumbing.Hash]plumbing.EncodedObject
	freshBytes int64
	// staged are the objects of the commit being built, written at its end.
	staged []plumbing.EncodedObject
	// walked counts pushes that had to walk the repository (for tests).
	walked int
	// fence, when set, is asked before every push is sent.
	fence Fence
}

// objectCacheSize bounds each repository's cache of decoded objects: the
// trees a commit rewrites are read from it.
const objectCacheSize = 8 * cache.MiByte

const (
	// packAt is how many objects a commit writes as a pack, not loose.
	packAt = 64
	// freshMemory bounds the content of fresh objects held for the push:
	// a snapshot of 10,000 small objects holds about 4 MiB.
	freshMemory = 8 << 20
)

const remoteName = "origin"

// Open opens the bare repository in dir, creating it when absent, with
// origin pointing at url. auth may be nil for anonymous remotes.
func Open(dir, url, branch string, auth transport.AuthMethod) (*Repo, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRU(objectCacheSize))
	r, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		r, err = git.Init(st, nil)
	}
	if err != nil {
		return nil, redact.Error(fmt.Errorf("opening local repository %s: %w", dir, err))
	}
	_ = r.DeleteRemote(remoteName)
	if _, err := r.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{url}}); err != nil {
		return nil, redact.Error(fmt.Errorf("configuring remote %s: %w", redact.URL(url), err))
	}
	return &Repo{repo: r, url: url, branch: branch, auth: auth, fresh: map[plumbing.Hash]plumbing.EncodedObject{}}, nil
}

// SetAuth replaces the credentials used for the remote.
func (r *Repo) SetAuth(auth transport.AuthMethod) { r.auth = auth }

// SetFence makes every push ask f first, as late as it can: after the
// remote's references were read, right before the update is sent.
func (r *Repo) SetFence(f Fence) { r.fence = f }

// fenced is nil when no fence is set or the fence lets a push through.
func (r *Repo) fenced(ctx context.Context) error {
	if r.fence == nil {
		return nil
	}
	if err := r.fence(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return nil
}

// URL is the remote's address as redact.URL shows it, for logs and messages.
func (r *Repo) URL() string { return redact.URL(r.url) }

// Branch is the branch this repository mirrors.
func (r *Repo) Branch() string { return r.branch }

func (r *Repo) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(remoteName, r.branch)
}

// Fetch brings the remote branch in and returns its head, or ZeroHash when
// the branch does not exist yet (an empty repository, or a new branch).
func (r *Repo) Fetch(ctx context.Context) (plumbing.Hash, error) {
	spec := config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", r.branch, r.remoteRef()))
	err := r.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Auth: r.auth, Tags: git.NoTags})
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, transport.ErrEmptyRemoteRepository), isMissingRef(err):
		r.track(plumbing.ZeroHash)
		return plumbing.ZeroHash, nil
	default:
		return plumbing.ZeroHash, redact.Error(fmt.Errorf("fetching %s from %s: %w", r.branch, redact.URL(r.url), err))
	}
	ref, err := r.repo.Reference(r.remoteRef(), true)
	if err != nil {
		return plumbing.ZeroHash, redact.Error(fmt.Errorf("reading fetched %s: %w", r.branch, err))
	}
	r.track(ref.Hash())
	return ref.Hash(), nil
}

// track records that the remote head is head: objects written from now on
// are what a push on it sends. Those written since an earlier head stay
// fresh while the head is the same.
func (r *Repo) track(head plumbing.Hash) {
	if !r.tracked || r.since != head {
		r.tracked, r.since, r.fresh, r.freshBytes = true, head, map[plumbing.Hash]plumbing.EncodedObject{}, 0
	}
}

func isMissingRef(err error) bool {
	var noMatch git.NoMatchingRefSpecError
	return errors.As(err, &noMatch) || strings.Contains(err.Error(), "couldn't find remote ref")
}

// Push makes the remote branch head. It fails with ErrRejected when the
// remote moved since the last fetch.
func (r *Repo) Push(ctx context.Context, head plumbing.Hash) error {
	local := plumbing.NewBranchReferenceName(r.branch)
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(local, head)); err != nil {
		return err
	}
	var err error
	if r.wroteSince(head) {
		err = r.pushFresh(ctx, head)
		r.dropHeld() // whatever the outcome: an outage must not pile them up
	} else {
		r.walked++
		spec := config.RefSpec(fmt.Sprintf("%s:refs/heads/%s", local, r.branch))
		if err := r.fenced(ctx); err != nil {
			return err
		}
		err = r.repo.PushContext(ctx, &git.PushOptions{RemoteName: remoteName, RefSpecs: []config.RefSpec{spec}, Auth: r.auth})
	}
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
	case errors.Is(err, ErrFenced):
		return err
	case errors.Is(err, ErrRejected), errors.Is(err, git.ErrNonFastForwardUpdate), strings.Contains(err.Error(), "non-fast-forward"),
		strings.Contains(err.Error(), "fetch first"):
		return ErrRejected
	default:
		return redact.Error(fmt.Errorf("pushing %s to %s: %w", r.branch, redact.URL(r.url), err))
	}
	// Record what the remote now holds, as a fetch would.
	r.track(head)
	return r.repo.Storer.SetReference(plumbing.NewHashReference(r.remoteRef(), head))
}

// wroteSince says whether this Repo wrote every commit from head back to
// the remote head it tracks: then the objects a push must send are fresh.
func (r *Repo) wroteSince(head plumbing.Hash) bool {
	if !r.tracked {
		return false
	}
	for h := head; h != r.since; {
		if _, ok := r.fresh[h]; !ok {
			return false
		}
		c, err := r.repo.CommitObject(h)
		if err != nil || len(c.ParentHashes) > 1 {
			return false
		}
		if len(c.ParentHashes) == 0 {
			return r.since.IsZero()
		}
		h = c.ParentHashes[0]
	}
	return true
}

// pushFresh updates the remote branch from since to head, sending the
// objects written since: at most a few more than the commits need (those of
// commits replaced before they were pushed), never a walk of the
// repository.
func (r *Repo) pushFresh(ctx context.Context, head plumbing.Hash) error {
	ep, err := transport.NewEndpoint(r.url)
	if err != nil {
		return err
	}
	c, err := client.NewClient(ep)
	if err != nil {
		return err
	}
	sess, err := c.NewReceivePackSession(ep, r.auth)
	if err != nil {
		return err
	}
	defer sess.Close()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil && !errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return err
	}
	ref := plumbing.NewBranchReferenceName(r.branch)
	var remote plumbing.Hash
	if adv != nil {
		if refs, err := adv.AllReferences(); err == nil {
			if h, ok := refs[ref]; ok {
				remote = h.Hash()
			}
		}
	}
	switch remote {
	case head:
		return nil // an earlier push got there, its answer lost
	case r.since:
	default:
		return ErrRejected // the remote moved since it was fetched
	}
	caps := capability.NewList()
	if adv != nil {
		caps = adv.Capabilities
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	req.Commands = []*packp.Command{{Name: ref, Old: remote, New: head}}
	if err := r.fenced(ctx); err != nil {
		return err
	}
	hashes := make([]plumbing.Hash, 0, len(r.fresh))
	for h := range r.fresh {
		hashes = append(hashes, h)
	}
	pr, pw := io.Pipe()
	req.Packfile = pr
	encoded := make(chan error, 1)
	go func() {
		err := writePack(pw, held{EncodedObjectStorer: r.repo.Storer, mem: r.fresh}, hashes)
		_ = pw.CloseWithError(err) // nil: the pack ends
		encoded <- err
	}()
	status, err := sess.ReceivePack(ctx, req)
	if err != nil {
		_ = pr.Close() // unblocks the encoder
		<-encoded
		return err
	}
	if err := <-encoded; err != nil {
		return err
	}
	if status != nil {
		return status.Error()
	}
	return nil
}

// Repack packs the objects the branch and the fetched remote branch reach
// into one pack and deletes the loose objects they replace, and those
// nothing reaches: without it, every commit leaves loose files behind for
// good. Only call it when every commit worth keeping is reachable, i.e.
// right after a push.
func (r *Repo) Repack() error {
	err := r.repo.RepackObjects(&git.RepackConfig{})
	// go-git deletes the packs it replaced but keeps looking objects up in
	// their indexes: forget them all, so they are read again from disk.
	if ri, ok := r.repo.Storer.(interface{ Reindex() }); ok {
		ri.Reindex()
	}
	if err != nil {
		return fmt.Errorf("repacking the local repository: %w", err)
	}
	if err := r.repo.Prune(git.PruneOptions{Handler: r.repo.DeleteObject}); err != nil {
		return fmt.Errorf("pruning the local repository: %w", err)
	}
	return nil
}

// Files lists every file of a commit's tree with its blob hash. It reads the
// whole tree: for start-up and recovery, not for each commit.
func (r *Repo) Files(commit plumbing.Hash) (map[string]plumbing.Hash, error) {
	files := map[string]plumbing.Hash{}
	if commit.IsZero() {
		return files, nil
	}
	c, err := r.repo.CommitObject(commit)
	if err != nil {
		return nil, fmt.Errorf("reading commit %s: %w", commit, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		files[f.Name] = f.Hash
		return nil
	})
	return files, err
}

// ReadBlob returns a blob's content.
func (r *Repo) ReadBlob(h plumbing.Hash) ([]byte, error) {
	b, err := r.repo.BlobObject(h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// BlobHash is the hash content would have as a blob, to skip writes that
// change nothing.
func BlobHash(content []byte) plumbing.Hash {
	return plumbing.ComputeHash(plumbing.BlobObject, content)
}

// CommitInfo describes a commit to write.
type CommitInfo struct {
	Author, Committer identity.Signature
	Message           string
	When              time.Time
	// Signer, when set, signs the commit.
	Signer Signer
}

// Commit writes a commit on parent (ZeroHash for the first) whose tree is
// parent's tree with changes applied: a path mapped to content is written, to
// nil is removed. Only the trees on changed paths are rewritten.
func (r *Repo) Commit(parent plumbing.Hash, changes map[string][]byte, info CommitInfo) (plumbing.Hash, error) {
	defer func() { r.staged = nil }() // written, or dropped with the commit that failed
	var base plumbing.Hash
	var parents []plumbing.Hash
	if !parent.IsZero() {
		c, err := r.repo.CommitObject(parent)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("reading parent %s: %w", parent, err)
		}
		base, parents = c.TreeHash, []plumbing.Hash{parent}
	}
	root, err := r.updateTree(base, splitChanges(changes))
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if root.IsZero() {
		if root, err = r.store(&object.Tree{}); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	when := info.When
	if when.IsZero() {
		when = time.Now()
	}
	c := &object.Commit{
		Author:       object.Signature{Name: info.Author.Name, Email: info.Author.Email, When: when},
		Committer:    object.Signature{Name: info.Committer.Name, Email: info.Committer.Email, When: when},
		Message:      info.Message,
		TreeHash:     root,
		ParentHashes: parents,
	}
	if info.Signer != nil {
		if err := sign(c, info.Signer); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	h, err := r.store(c)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := r.write(r.staged); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("writing commit %s: %w", h, err)
	}
	return h, nil
}

// sign sets the commit's gpgsig header to the signature of its content
// without it, as Git signs.
func sign(c *object.Commit, signer Signer) error {
	unsigned := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(unsigned); err != nil {
		return err
	}
	rd, err := unsigned.Reader()
	if err != nil {
		return err
	}
	content, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	sig, err := signer.Sign(content)
	if err != nil {
		return err
	}
	c.PGPSignature = string(sig)
	return nil
}

// treeChanges are the changes below one folder: files directly in it, and
// sub-folders with their own changes.
type treeChanges struct {
	files map[string][]byte
	dirs  map[string]*treeChanges
}

func splitChanges(changes map[string][]byte) *treeChanges {
	root := &treeChanges{files: map[string][]byte{}, dirs: map[string]*treeChanges{}}
	for p, content := range changes {
		node := root
		parts := strings.Split(path.Clean(p), "/")
		for _, dir := range parts[:len(parts)-1] {
			next, ok := node.dirs[dir]
			if !ok {
				next = &treeChanges{files: map[string][]byte{}, dirs: map[string]*treeChanges{}}
				node.dirs[dir] = next
			}
			node = next
		}
		node.files[parts[len(parts)-1]] = content
	}
	return root
}

// updateTree applies ch to the tree base (ZeroHash for none) and returns the
// new tree, or ZeroHash when it is left empty.
func (r *Repo) updateTree(base plumbing.Hash, ch *treeChanges) (plumbing.Hash, error) {
	entries := map[string]object.TreeEntry{}
	if !base.IsZero() {
		t, err := r.repo.TreeObject(base)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("reading tree %s: %w", base, err)
		}
		for _, e := range t.Entries {
			entries[e.Name] = e
		}
	}
	for name, content := range ch.files {
		if content == nil {
			delete(entries, name)
			continue
		}
		h, err := r.storeBlob(content)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}
	}
	for name, sub := range ch.dirs {
		var subBase plumbing.Hash
		if e, ok := entries[name]; ok && e.Mode == filemode.Dir {
			subBase = e.Hash
		}
		h, err := r.updateTree(subBase, sub)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h.IsZero() {
			delete(entries, name)
		} else {
			entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h}
		}
	}
	if len(entries) == 0 {
		return plumbing.ZeroHash, nil
	}
	tree := &object.Tree{}
	for _, e := range entries {
		tree.Entries = append(tree.Entries, e)
	}
	// Git orders entries by name, a folder's name compared as if it ended in '/'.
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(tree.Entries, func(i, j int) bool { return key(tree.Entries[i]) < key(tree.Entries[j]) })
	return r.store(tree)
}

type encodable interface {
	Encode(plumbing.EncodedObject) error
}

// store stages o for the commit being built.
func (r *Repo) store(o encodable) (plumbing.Hash, error) {
	obj := &plumbing.MemoryObject{}
	if err := o.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	r.staged = append(r.staged, obj)
	return obj.Hash(), nil
}

func (r *Repo) storeBlob(content []byte) (plumbing.Hash, error) {
	obj := &plumbing.MemoryObject{}
	obj.SetType(plumbing.BlobObject)
	if _, err := obj.Write(content); err != nil {
		return plumbing.ZeroHash, err
	}
	r.staged = append(r.staged, obj)
	return obj.Hash(), nil
}

// write stores objs, as one pack when there are packAt or more, and counts
// each fresh, even one the repository held already: the remote may lack it.
func (r *Repo) write(objs []plumbing.EncodedObject) error {
	uniq := make(map[plumbing.Hash]plumbing.EncodedObject, len(objs))
	hashes := make([]plumbing.Hash, 0, len(objs))
	for _, o := range objs {
		if _, dup := uniq[o.Hash()]; !dup {
			uniq[o.Hash()] = o
			hashes = append(hashes, o.Hash())
		}
	}
	pw, packs := r.repo.Storer.(storer.PackfileWriter)
	if packs && len(hashes) >= packAt {
		w, err := pw.PackfileWriter()
		if err != nil {
			return err
		}
		if err := writePack(w, held{EncodedObjectStorer: r.repo.Storer, mem: uniq}, hashes); err != nil {
			_ = w.Close()
			return fmt.Errorf("writing a pack of %d objects: %w", len(hashes), err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("indexing a pack of %d objects: %w", len(hashes), err)
		}
	} else {
		for _, h := range hashes {
			if _, err := r.repo.Storer.SetEncodedObject(uniq[h]); err != nil {
				return err
			}
		}
	}
	for _, h := range hashes {
		if r.fresh[h] != nil {
			continue // held already
		}
		o := uniq[h]
		if r.freshBytes+o.Size() <= freshMemory {
			r.freshBytes += o.Size()
		} else {
			o = nil // read back from the repository when pushed
		}
		r.fresh[h] = o
	}
	return nil
}

// dropHeld forgets the content of fresh objects: they stay fresh, and are
// read from the repository when a push sends them.
func (r *Repo) dropHeld() {
	for h := range r.fresh {
		r.fresh[h] = nil
	}
	r.freshBytes = 0
}

// held serves the objects of mem from memory and the others from the
// repository.
type held struct {
	storer.EncodedObjectStorer
	mem map[plumbing.Hash]plumbing.EncodedObject
}

func (s held) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o := s.mem[h]; o != nil && (t == plumbing.AnyObject || o.Type() == t) {
		return o, nil
	}
	return s.EncodedObjectStorer.EncodedObject(t, h)
}

// FindTrailer returns the newest of the last limit commits from head whose
// message has the line trailer, or "" when none has.
func (r *Repo) FindTrailer(head plumbing.Hash, trailer string, limit int) (string, error) {
	for h, n := head, 0; !h.IsZero() && n < limit; n++ {
		c, err := r.repo.CommitObject(h)
		if err != nil {
			return "", fmt.Errorf("reading commit %s: %w", h, err)
		}
		for _, line := range strings.Split(c.Message, "\n") {
			if strings.TrimSpace(line) == trailer {
				return h.String(), nil
			}
		}
		if len(c.ParentHashes) == 0 {
			break
		}
		h = c.ParentHashes[0]
	}
	return "", nil
}

// ErrUnknownCommit: a commit the local repository does not hold.
var ErrUnknownCommit = errors.New("commit not in the local repository")

// Holds says whether commit is head or one of its ancestors within limit
// commits of head. It fails with ErrUnknownCommit when head is not in the
// local repository (a revision fetched by someone else).
func (r *Repo) Holds(head, commit plumbing.Hash, limit int) (bool, error) {
	if head == commit {
		return true, nil
	}
	seen := map[plumbing.Hash]bool{head: true}
	queue := []plumbing.Hash{head}
	for n := 0; len(queue) > 0 && n < limit; n++ {
		h := queue[0]
		queue = queue[1:]
		c, err := r.repo.CommitObject(h)
		if errors.Is(err, plumbing.ErrObjectNotFound) && h == head {
			return false, fmt.Errorf("%w: %s", ErrUnknownCommit, h)
		}
		if err != nil {
			return false, fmt.Errorf("reading commit %s: %w", h, err)
		}
		for _, p := range c.ParentHashes {
			if p == commit {
				return true, nil
			}
			if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	return false, nil
}
