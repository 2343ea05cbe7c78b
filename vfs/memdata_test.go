package vfs

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestContentMatchesSlice runs random writes (zeros and data, across chunk
// boundaries), truncations and shares against a plain byte slice, and
// checks that a shared copy never changes when either side is written.
func TestContentMatchesSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var c content
	var want []byte
	type snap struct {
		c    content
		want []byte
	}
	var snaps []snap
	for i := range 3000 {
		switch op := r.IntN(10); {
		case op < 5:
			off := r.Int64N(5 * chunkSize)
			n := 1 + r.Int64N(3*chunkSize)
			p := make([]byte, n)
			zeros := r.IntN(3) == 0
			if !zeros {
				for j := range p {
					p[j] = byte(1 + r.IntN(255))
				}
			}
			if zeros && r.IntN(2) == 0 {
				c.write(off, nil, n, true)
			} else {
				c.write(off, p, n, zeros)
			}
			if end := off + n; end > int64(len(want)) {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[off:], p)
		case op < 7:
			n := r.Int64N(6 * chunkSize)
			c.truncate(n)
			if n <= int64(len(want)) {
				want = want[:n]
			} else {
				want = append(want, make([]byte, n-int64(len(want)))...)
			}
		case op < 8:
			snaps = append(snaps, snap{c.share(), bytes.Clone(want)})
		default:
			// Write to a copy: neither the original nor other copies change.
			if len(snaps) > 0 {
				s := &snaps[r.IntN(len(snaps))]
				off := r.Int64N(4 * chunkSize)
				p := bytes.Repeat([]byte{byte(i)}, 1+r.IntN(2*chunkSize))
				s.c.write(off, p, int64(len(p)), false)
				if end := off + int64(len(p)); end > int64(len(s.want)) {
					s.want = append(s.want, make([]byte, end-int64(len(s.want)))...)
				}
				copy(s.want[off:], p)
			}
		}
		if c.size != int64(len(want)) {
			t.Fatalf("step %d: size %d, want %d", i, c.size, len(want))
		}
		got := make([]byte, c.size+10)
		if n := c.readAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("step %d: contents differ (read %d of %d bytes)", i, n, len(want))
		}
		if len(want) > 0 {
			off := r.IntN(len(want))
			p := make([]byte, 1+r.IntN(2*chunkSize))
			n := c.readAt(p, int64(off))
			if n != min(len(p), len(want)-off) || !bytes.Equal(p[:n], want[off:off+n]) {
				t.Fatalf("step %d: read at %d differs", i, off)
			}
		}
	}
	for k, s := range snaps {
		got := make([]byte, s.c.size)
		if n := s.c.readAt(got, 0); n != len(s.want) || !bytes.Equal(got, s.want) {
			t.Fatalf("shared copy %d changed", k)
		}
	}
}
