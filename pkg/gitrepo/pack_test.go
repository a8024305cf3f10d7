package gitrepo

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAPackIsReadByGit: git itself indexes a pack writePack wrote, and
// finds every object with its type and content, at sizes on each side of
// the entry header's byte boundaries.
func TestAPackIsReadByGit(t *testing.T) {
	src := memory.NewStorage()
	var hashes []plumbing.Hash
	want := map[plumbing.Hash]string{}
	add := func(typ plumbing.ObjectType, content []byte) {
		o := &plumbing.MemoryObject{}
		o.SetType(typ)
		_, err := o.Write(content)
		require.NoError(t, err)
		h, err := src.SetEncodedObject(o)
		require.NoError(t, err)
		hashes = append(hashes, h)
		want[h] = typ.String()
	}
	for _, n := range []int{0, 1, 15, 16, 2047, 2048, 262143, 262144, 1 << 21} {
		add(plumbing.BlobObject, bytes.Repeat([]byte{byte('a' + n%26)}, n))
	}
	tree := append([]byte("100644 empty\x00"), hashes[0][:]...)
	add(plumbing.TreeObject, tree)
	add(plumbing.CommitObject, []byte("tree "+hashes[len(hashes)-1].String()+
		"\nauthor A <a@example.com> 0 +0000\ncommitter A <a@example.com> 0 +0000\n\nm\n"))

	var pack bytes.Buffer
	require.NoError(t, writePack(&pack, src, hashes))
	dir := t.TempDir()
	gitCLI(t, dir, "init", "--quiet", "--bare", ".")
	file := filepath.Join(dir, "objects", "pack", "pack-test.pack")
	require.NoError(t, os.WriteFile(file, pack.Bytes(), 0o600))
	gitCLI(t, dir, "index-pack", "--strict", file)
	// index-pack names each object by the hash of what it decompressed:
	// an object found under its own hash has its type and content.
	for h, typ := range want {
		o, err := src.EncodedObject(plumbing.AnyObject, h)
		require.NoError(t, err)
		got := gitCLI(t, dir, "cat-file", "-t", h.String()) + " " + gitCLI(t, dir, "cat-file", "-s", h.String())
		assert.Equal(t, typ+" "+strconv.FormatInt(o.Size(), 10), got, "object %s", h)
	}
}
