package vfs

import (
	"bytes"
	"slices"
	"sync/atomic"
)

// chunkSize is the unit in bytes in which MemFS keeps file contents. A file,
// its durable state, its clones and its crash copies share chunks, and a
// chunk is copied only when one of them writes to it (copy on write), so that
// a crash copy costs a pointer per chunk rather than a copy of every byte.
const chunkSize = 4096

// chunk is a piece of a file's contents. A frozen chunk may be shared and is
// never modified again; an unfrozen one belongs to a single content.
type chunk struct {
	frozen atomic.Bool
	b      [chunkSize]byte
}

var zeroChunk [chunkSize]byte

// isZero reports whether b holds only zero bytes.
func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), chunkSize)
		if !bytes.Equal(b[:n], zeroChunk[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// content is a file's bytes, in chunks of chunkSize; a nil chunk reads as
// zeros. The bytes of the last chunk past size are zero, so that growing the
// file shows zeros there. A content is guarded by its MemFS's lock.
type content struct {
	size   int64
	chunks []*chunk
}

// share returns a copy of c that shares its chunks, freezing them: from now
// on each side copies a chunk before writing to it.
func (c *content) share() content {
	for _, ch := range c.chunks {
		if ch != nil && !ch.frozen.Load() {
			ch.frozen.Store(true)
		}
	}
	return content{size: c.size, chunks: slices.Clone(c.chunks)}
}

// writable returns chunk i ready to be modified: allocated if it was zeros,
// copied if it was frozen.
func (c *content) writable(i int64) *chunk {
	ch := c.chunks[i]
	switch {
	case ch == nil:
		ch = new(chunk)
	case ch.frozen.Load():
		nc := new(chunk)
		nc.b = ch.b
		ch = nc
	default:
		return ch
	}
	c.chunks[i] = ch
	return ch
}

// grow extends c to n bytes (n >= size); the new bytes read as zeros.
func (c *content) grow(n int64) {
	if need := (n + chunkSize - 1) / chunkSize; need > int64(len(c.chunks)) {
		c.chunks = append(c.chunks, make([]*chunk, need-int64(len(c.chunks)))...)
	}
	c.size = n
}

// truncate cuts or zero-extends c to n bytes.
func (c *content) truncate(n int64) {
	if n >= c.size {
		c.grow(n)
		return
	}
	keep := (n + chunkSize - 1) / chunkSize
	clear(c.chunks[keep:])
	c.chunks = c.chunks[:keep]
	if o := n % chunkSize; o != 0 && c.chunks[keep-1] != nil {
		clear(c.writable(keep - 1).b[o:])
	}
	c.size = n
}

// write stores p at off, growing c as needed. zeros says that p is known to
// be all zeros (p may then be nil and n gives the length).
func (c *content) write(off int64, p []byte, n int64, zeros bool) {
	if n <= 0 {
		return
	}
	if end := off + n; end > c.size {
		c.grow(end)
	}
	for n > 0 {
		i, o := off/chunkSize, off%chunkSize
		k := min(n, chunkSize-o)
		ch := c.chunks[i]
		switch {
		case zeros && k == chunkSize:
			c.chunks[i] = nil
		case zeros && ch == nil:
			// Already zeros.
		case zeros:
			clear(c.writable(i).b[o : o+k])
		case k == chunkSize && (ch == nil || ch.frozen.Load()):
			// The whole chunk is replaced: no need to copy the old one.
			nc := new(chunk)
			copy(nc.b[:], p[:k])
			c.chunks[i] = nc
		default:
			copy(c.writable(i).b[o:o+k], p[:k])
		}
		if !zeros {
			p = p[k:]
		}
		off += k
		n -= k
	}
}

// readAt copies the bytes of c from off into p and returns how many it
// copied (fewer than len(p) only at the end of the file).
func (c *content) readAt(p []byte, off int64) int {
	if off >= c.size {
		return 0
	}
	p = p[:min(int64(len(p)), c.size-off)]
	done := 0
	for done < len(p) {
		i, o := off/chunkSize, off%chunkSize
		k := min(int64(len(p)-done), chunkSize-o)
		if ch := c.chunks[i]; ch != nil {
			copy(p[done:done+int(k)], ch.b[o:o+k])
		} else {
			clear(p[done : done+int(k)])
		}
		done += int(k)
		off += k
	}
	return done
}
