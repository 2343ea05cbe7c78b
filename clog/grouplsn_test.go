package clog

import (
	"testing"

	"mvkv/vfs"
)

// TestStatusLSNGroups checks that StatusLSN reports the highest LSN set for
// any xid of the same group of 32, not for other groups, and 0 once the page
// has been evicted and read back (its commits are durable then).
func TestStatusLSNGroups(t *testing.T) {
	w := &fakeWAL{}
	fsys := vfs.NewMemFS()
	c := mustOpen(t, fsys, testDir(t), Options{Buffers: MinBuffers, FlushWAL: w.flush})
	defer c.Close()
	base := uint64(5 * XidsPerPage) // a group boundary: XidsPerPage is a multiple of 32
	if XidsPerPage%XidsPerLSNGroup != 0 {
		t.Fatalf("XidsPerPage %d is not a multiple of %d", XidsPerPage, XidsPerLSNGroup)
	}
	for _, s := range []struct {
		xid, lsn uint64
	}{{base, 100}, {base + 31, 50}, {base + 32, 70}, {base + 64, 0}} {
		if err := c.SetStatus(s.xid, StatusCommitted, s.lsn); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		xid, lsn uint64
	}{{base, 100}, {base + 5, 100}, {base + 31, 100}, {base + 32, 70}, {base + 63, 70}, {base + 64, 0}, {base + 96, 0}} {
		st, lsn, err := c.StatusLSN(want.xid)
		if err != nil {
			t.Fatal(err)
		}
		wantSt := StatusInProgress
		if want.xid == base || want.xid == base+31 || want.xid == base+32 || want.xid == base+64 {
			wantSt = StatusCommitted
		}
		if st != wantSt || lsn != want.lsn {
			t.Errorf("StatusLSN(base+%d) = %v, %d; want %v, %d", want.xid-base, st, lsn, wantSt, want.lsn)
		}
	}
	// Touch enough other pages of the same bank to evict page 5; it is not
	// the latest page once a later one was set.
	nb := uint64(MinBuffers / BankSize)
	for p := uint64(1); p <= 2*BankSize; p++ {
		if err := c.SetStatus((5+p*nb)*XidsPerPage, StatusAborted, 1000+p); err != nil {
			t.Fatal(err)
		}
	}
	st, lsn, err := c.StatusLSN(base)
	if err != nil {
		t.Fatal(err)
	}
	if st != StatusCommitted || lsn != 0 {
		t.Errorf("after eviction StatusLSN(base) = %v, %d; want committed, 0", st, lsn)
	}
	if flushed, _ := w.state(); flushed < 100 {
		t.Errorf("page with group LSN 100 written with the WAL flushed only to %d", flushed)
	}
}
