package gitrepo

import (
	"bufio"
	"compress/zlib"
	"crypto/sha1" // the pack checksum is SHA-1 by Git's format
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// writePack writes the objects hashes names, read from src, as a pack
// (version 2) without deltas, each compressed at zlib's BestSpeed.
//
// go-git's encoder resets a default-level compressor for every object,
// which clears over half a megabyte each time: for a snapshot of small
// documents that was the largest single cost of a commit and of its push.
// BestSpeed's reset is nearly free. Deltas are left out: a commit's objects
// seldom resemble each other (the versions they replace are not in the
// pack), and the pack is read once, by the local index or the remote.
func writePack(w io.Writer, src storer.EncodedObjectStorer, hashes []plumbing.Hash) error {
	sum := sha1.New()
	out := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	head := make([]byte, 12, 16)
	copy(head, "PACK")
	binary.BigEndian.PutUint32(head[4:], 2)
	binary.BigEndian.PutUint32(head[8:], uint32(len(hashes)))
	if _, err := out.Write(head); err != nil {
		return err
	}
	zw, err := zlib.NewWriterLevel(out, zlib.BestSpeed)
	if err != nil {
		return err
	}
	for _, h := range hashes {
		o, err := src.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("reading object %s: %w", h, err)
		}
		if _, err := out.Write(entryHeader(head[:0], o.Type(), o.Size())); err != nil {
			return err
		}
		if err := compress(zw, out, o); err != nil {
			return fmt.Errorf("packing object %s: %w", h, err)
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

func compress(zw *zlib.Writer, out io.Writer, o plumbing.EncodedObject) error {
	r, err := o.Reader()
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	zw.Reset(out)
	if _, err := io.Copy(zw, r); err != nil {
		return err
	}
	return zw.Close()
}

// entryHeader appends a pack entry's header to b: the type and the size's
// low four bits, then the rest of the size seven bits at a time, each byte
// but the last with its high bit set.
func entryHeader(b []byte, t plumbing.ObjectType, size int64) []byte {
	c := byte(t)<<4 | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		b = append(b, c|0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	return append(b, c)
}
