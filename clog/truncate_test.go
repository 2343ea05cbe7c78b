package clog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// segXids is how many xids one segment file covers.
const segXids uint64 = PagesPerSegment * XidsPerPage

// segmentsOnDisk returns the segment numbers of the files in dir.
func segmentsOnDisk(t *testing.T, fsys vfs.FS, dir string) []uint64 {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var segs []uint64
	for _, n := range names {
		if s, ok := parseSegmentName(n); ok {
			segs = append(segs, s)
		}
	}
	return segs
}

// memDir returns a MemFS and DATA/clog in it, DATA's own entry durable (the
// CLOG makes its directory durable, not the directory above).
func memDir(t testing.TB) (*vfs.MemFS, string) {
	t.Helper()
	fsys := vfs.NewMemFS()
	if err := fsys.MkdirAll("/data"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return fsys, "/data/clog"
}

// fillSegments sets and checkpoints a few statuses in each of segments
// 0..n-1 and returns the xids set.
func fillSegments(t *testing.T, c *CLOG, n uint64) []uint64 {
	t.Helper()
	var xs []uint64
	for s := range n {
		for _, off := range []uint64{0, 1, XidsPerPage + 7, segXids - 1} {
			x := s*segXids + off
			if err := c.SetStatus(x, statusFor(x), 0); err != nil {
				t.Fatal(err)
			}
			xs = append(xs, x)
		}
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	return xs
}

func TestTruncate(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 16})
	xs := fillSegments(t, c, 5)
	if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("segments before truncation: %v", got)
	}
	oldest := 3*segXids + 5
	if err := c.Truncate(oldest); err != nil {
		t.Fatal(err)
	}
	check := func(c *CLOG, when string) {
		t.Helper()
		if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("%s: segments %v, want [3 4]", when, got)
		}
		if got := c.OldestXid(); got != oldest {
			t.Fatalf("%s: OldestXid = %d, want %d", when, got, oldest)
		}
		for _, x := range xs {
			st, err := c.Status(x)
			switch {
			case x < oldest && !errors.Is(err, ErrTruncated):
				t.Fatalf("%s: Status(%d) below the oldest xid = %v, %v; want ErrTruncated", when, x, st, err)
			case x < oldest:
				if _, _, err := c.StatusLSN(x); !errors.Is(err, ErrTruncated) {
					t.Fatalf("%s: StatusLSN(%d) below the oldest xid = %v; want ErrTruncated", when, x, err)
				}
			case x >= oldest && (err != nil || st != statusFor(x)):
				t.Fatalf("%s: Status(%d) = %v, %v; want %v", when, x, st, err, statusFor(x))
			}
		}
		if err := c.SetStatus(oldest-1, StatusCommitted, 0); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%s: SetStatus below the oldest xid = %v, want ErrTruncated", when, err)
		}
	}
	check(c, "after Truncate")
	st := c.Stats()
	if st.Truncations != 1 || st.SegmentsRemoved != 3 {
		t.Errorf("stats: %d truncations, %d segments removed; want 1, 3", st.Truncations, st.SegmentsRemoved)
	}
	// A lower point changes nothing.
	if err := c.Truncate(segXids); err != nil {
		t.Fatal(err)
	}
	check(c, "after a lower Truncate")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c = mustOpen(t, fsys, dir, Options{Buffers: 16})
	check(c, "after reopen")
	c.Close()

	// Every crash copy keeps the truncation: each step was synced.
	crashed := fsys.CrashCopy(vfs.DropUnsynced, nil)
	fsys = crashed
	c = mustOpen(t, fsys, dir, Options{Buffers: 16})
	check(c, "after a crash")

	// In recovery, a status set below the point is redo of a record older
	// than the truncation: it is skipped, not an error.
	c.Close()
	c = mustOpen(t, fsys, dir, Options{Buffers: 16, Recovery: true})
	if err := c.SetStatus(oldest-1, StatusCommitted, 0); err != nil {
		t.Fatalf("SetStatus below the oldest xid in recovery: %v", err)
	}
	c.EndRecovery()
	check(c, "after redo below the point")
	c.Close()
}

// TestTruncateKeepsLatest checks that the segment holding the latest page
// survives even an oldest xid beyond it.
func TestTruncateKeepsLatest(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 16})
	defer c.Close()
	xs := fillSegments(t, c, 3) // latest page is in segment 2
	if err := c.Truncate(5 * segXids); err != nil {
		t.Fatal(err)
	}
	if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("segments %v, want [2]", got)
	}
	// The point itself is taken as given: the xids below it are gone
	// for lookups even where their file stays.
	if _, err := c.Status(xs[len(xs)-1]); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Status below the point = %v, want ErrTruncated", err)
	}
}

// TestTruncateDropsDirtyBuffers checks that a dirty page below the cut is
// dropped from the pool and never written back into a removed segment.
func TestTruncateDropsDirtyBuffers(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 64})
	fillSegments(t, c, 3)
	// Dirty pages in segments 0 and 1 without checkpointing.
	for _, x := range []uint64{2, segXids + 2} {
		if err := c.SetStatus(x, StatusAborted, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Truncate(2 * segXids); err != nil {
		t.Fatal(err)
	}
	checkPool(t, c)
	for bi := range c.banks {
		for pageno := range c.banks[bi].index {
			if pageno < 2*PagesPerSegment {
				t.Errorf("page %d below the cut still cached", pageno)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{2}) {
		t.Fatalf("segments after Close %v, want [2]: a dropped page was written back", got)
	}
}

// TestTruncateCrashPoints takes a crash copy after every file operation of
// a Truncate, in every crash mode, and checks each: the CLOG opens, every
// xid at or above the new point keeps its status (no needed page lost),
// the point is the old or the new one, and a repeated Truncate (redo)
// leaves exactly the segments from the cut on.
func TestTruncateCrashPoints(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 16})
	xs := fillSegments(t, c, 4)
	oldest := 2*segXids + 3
	var copies []*vfs.MemFS
	rng := rand.New(rand.NewPCG(5, 6))
	fsys.SetOpHook(func(p vfs.CrashPoint) {
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.KeepRandom, vfs.TearLast} {
			copies = append(copies, p.CrashCopy(mode, rng))
		}
	})
	if err := c.Truncate(oldest); err != nil {
		t.Fatal(err)
	}
	fsys.SetOpHook(nil)
	c.Close()
	if len(copies) < 3*4 {
		t.Fatalf("only %d crash copies: Truncate did fewer file operations than expected", len(copies))
	}
	for i, cp := range copies {
		c, err := Open(cp, dir, Options{Buffers: 16, Recovery: true, FlushWAL: func(uint64) error { return nil }})
		if err != nil {
			t.Fatalf("copy %d: Open: %v", i, err)
		}
		if got := c.OldestXid(); got != 0 && got != oldest {
			t.Fatalf("copy %d: OldestXid = %d, want 0 or %d", i, got, oldest)
		}
		for _, x := range xs {
			if x < oldest {
				continue
			}
			if st, err := c.Status(x); err != nil || st != statusFor(x) {
				t.Fatalf("copy %d: Status(%d) = %v, %v; want %v", i, x, st, err, statusFor(x))
			}
		}
		if err := c.Truncate(oldest); err != nil {
			t.Fatalf("copy %d: redo Truncate: %v", i, err)
		}
		if got := segmentsOnDisk(t, cp, dir); !slices.Equal(got, []uint64{2, 3}) {
			t.Fatalf("copy %d: segments after redo %v, want [2 3]", i, got)
		}
		c.Close()
	}
}

// TestTruncateConcurrent runs committers that each set and read back
// statuses of fresh xids spread over many segments (a 16-slot pool, so
// pages are evicted), checkpoints, and a truncator that keeps cutting at the
// oldest xid any committer may still touch. No committer may ever see
// ErrTruncated or a wrong status, and at the end every xid at or above the
// final point reads back right.
func TestTruncateConcurrent(t *testing.T) {
	for _, v := range variants {
		t.Run(v.String(), func(t *testing.T) {
			const (
				committers = 32
				perWorker  = 120
				stride     = XidsPerPage/4 + 1 // about 4 xids a page, 128 a segment
			)
			fsys, dir := memDir(t)
			c := mustOpen(t, fsys, dir, v.opts(16))
			var (
				next     atomic.Uint64
				inFlight [committers]atomic.Uint64 // xid being worked on; MaxUint64 when idle
				done     atomic.Bool
				set      sync.Map // xid -> Status
				wg       sync.WaitGroup
			)
			for i := range inFlight {
				inFlight[i].Store(^uint64(0))
			}
			for w := range committers {
				wg.Go(func() {
					for range perWorker {
						// Publish a lower bound before taking the xid, so
						// the truncator never cuts above it.
						inFlight[w].Store(next.Load() * stride)
						x := next.Add(1) * stride
						st := statusFor(x)
						if err := c.SetStatus(x, st, lsnFor(x)); err != nil {
							t.Error(err)
							return
						}
						if got, err := c.Status(x); err != nil || got != st {
							t.Errorf("Status(%d) = %v, %v; want %v", x, got, err, st)
							return
						}
						set.Store(x, st)
					}
					inFlight[w].Store(^uint64(0))
				})
			}
			var bg sync.WaitGroup
			bg.Go(func() {
				for !done.Load() {
					if err := c.Checkpoint(); err != nil {
						t.Error(err)
						return
					}
				}
			})
			var truncations int
			bg.Go(func() {
				for !done.Load() {
					low := next.Load() * stride
					for i := range inFlight {
						low = min(low, inFlight[i].Load())
					}
					if err := c.Truncate(low); err != nil {
						t.Error(err)
						return
					}
					truncations++
				}
			})
			wg.Wait()
			done.Store(true)
			bg.Wait()
			if t.Failed() {
				return
			}
			oldest := c.OldestXid()
			checkAll := func(c *CLOG, when string) {
				t.Helper()
				n := 0
				set.Range(func(k, val any) bool {
					x := k.(uint64)
					got, err := c.Status(x)
					switch {
					case x < oldest && !errors.Is(err, ErrTruncated):
						t.Errorf("%s: Status(%d) below the point %d = %v, %v", when, x, oldest, got, err)
					case x >= oldest && (err != nil || got != val.(Status)):
						t.Errorf("%s: Status(%d) = %v, %v; want %v", when, x, got, err, val)
					}
					n++
					return !t.Failed()
				})
				if n != committers*perWorker {
					t.Fatalf("%s: %d statuses recorded, want %d", when, n, committers*perWorker)
				}
			}
			checkAll(c, "end")
			checkPool(t, c)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			cut, _ := pageSegment(xidPage(oldest))
			for _, s := range segmentsOnDisk(t, fsys, dir) {
				if s < cut {
					t.Errorf("segment %d below the cut %d left on disk", s, cut)
				}
			}
			c = mustOpen(t, fsys, dir, v.opts(16))
			defer c.Close()
			checkAll(c, "after reopen")
			t.Logf("%d truncations, oldest xid %d (segment %d)", truncations, oldest, cut)
		})
	}
}

func TestOldestFile(t *testing.T) {
	b := encodeOldest(0x0102030405060708)
	if got, err := decodeOldest(b); err != nil || got != 0x0102030405060708 {
		t.Fatalf("round trip: %#x, %v", got, err)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x10
		if _, err := decodeOldest(bad); err == nil {
			t.Errorf("flipped byte %d accepted", i)
		}
	}
	if _, err := decodeOldest(b[:15]); err == nil {
		t.Error("short file accepted")
	}

	// A damaged file is ErrCorrupt naming the file at Open.
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{})
	if err := c.Truncate(7); err != nil {
		t.Fatal(err)
	}
	c.Close()
	f, err := fsys.Open(dir + "/" + oldestName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Open(fsys, dir, Options{FlushWAL: func(uint64) error { return nil }})
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(oldestName)) {
		t.Fatalf("Open with a damaged %s: %v", oldestName, err)
	}
}

func FuzzDecodeOldest(f *testing.F) {
	f.Add(encodeOldest(42))
	f.Add([]byte{})
	f.Add(make([]byte, oldestSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := decodeOldest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeOldest(x), b) {
			t.Fatalf("accepted %x, which does not re-encode the same", b)
		}
	})
}

func TestParseSegmentName(t *testing.T) {
	for _, c := range []struct {
		name string
		seg  uint64
		ok   bool
	}{
		{segmentName(0), 0, true},
		{segmentName(0xABC), 0xABC, true},
		{"00000000000a", 0, false},
		{"0000000000000", 0, false},
		{oldestName, 0, false},
		{oldestTmpName, 0, false},
		{"+0000000000F", 0, false},
	} {
		seg, ok := parseSegmentName(c.name)
		if seg != c.seg || ok != c.ok {
			t.Errorf("parseSegmentName(%q) = %d, %v; want %d, %v", c.name, seg, ok, c.seg, c.ok)
		}
	}
}

func TestAutotuneBuffers(t *testing.T) {
	for _, c := range []struct{ pages, want int }{
		{0, 16}, {16, 16}, {16384, 32}, {16384 + 511, 32}, {3 * 8192, 48}, {524288, 1024}, {1 << 30, 1024},
	} {
		if got := AutotuneBuffers(c.pages); got != c.want {
			t.Errorf("AutotuneBuffers(%d) = %d, want %d", c.pages, got, c.want)
		}
	}
}

func ExampleCLOG_Truncate() {
	fsys := vfs.NewMemFS()
	c, _ := Open(fsys, "/data/clog", Options{FlushWAL: func(uint64) error { return nil }})
	defer c.Close()
	c.SetStatus(3, StatusCommitted, 0)
	c.SetStatus(segXids+3, StatusCommitted, 0)
	c.Checkpoint()
	c.Truncate(segXids)
	_, err := c.Status(3)
	fmt.Println(errors.Is(err, ErrTruncated))
	st, _ := c.Status(segXids + 3)
	fmt.Println(st)
	// Output:
	// true
	// committed
}

// TestRemoveSegmentsPast checks that RemoveSegmentsPast removes the files
// and the buffered pages of the segments after the one holding the xid
// given, and nothing at or below it: a dirty page of a removed segment is
// never written back, and a status set there later starts on a new page.
func TestRemoveSegmentsPast(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 64})
	defer c.Close()
	xs := fillSegments(t, c, 4)
	// A dirty page of segment 3, left in the buffers.
	dirty := 3*segXids + 2*XidsPerPage + 1
	if err := c.SetStatus(dirty, StatusCommitted, 0); err != nil {
		t.Fatal(err)
	}
	last := segXids + 17 // in segment 1
	removed, err := c.RemoveSegmentsPast(last)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{dir + "/000000000002", dir + "/000000000003"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("segments %v, want [0 1]", got)
	}
	for _, x := range xs {
		if x >= 2*segXids {
			continue
		}
		if st, err := c.Status(x); err != nil || st != statusFor(x) {
			t.Fatalf("Status(%d) = %v, %v; want %v", x, st, err, statusFor(x))
		}
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := segmentsOnDisk(t, fsys, dir); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("segments after a checkpoint %v, want [0 1]: a dropped page was written back", got)
	}
	if st, err := c.Status(dirty); err != nil || st != StatusInProgress {
		t.Fatalf("Status(%d) of a removed segment = %v, %v; want in progress", dirty, st, err)
	}
	if removed, err := c.RemoveSegmentsPast(last); err != nil || len(removed) != 0 {
		t.Fatalf("a second call removed %v, %v; want nothing", removed, err)
	}
}

// TestClearPast checks that ClearPast sets the statuses from the xid given
// to the end of its page back to in progress, durably at the next
// checkpoint, and leaves the xids below it and the other pages alone.
func TestClearPast(t *testing.T) {
	fsys, dir := memDir(t)
	c := mustOpen(t, fsys, dir, Options{Buffers: 64})
	from := uint64(XidsPerPage + 40)
	for x := uint64(XidsPerPage); x < 3*XidsPerPage; x++ {
		if err := c.SetStatus(x, StatusAborted, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearPast(from); err != nil {
		t.Fatal(err)
	}
	if err := c.ClearPast(2 * XidsPerPage); err != nil { // a page's first xid: nothing
		t.Fatal(err)
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c = mustOpen(t, fsys, dir, Options{Buffers: 64})
	defer c.Close()
	for x := uint64(XidsPerPage); x < 3*XidsPerPage; x++ {
		want := StatusAborted
		if x >= from && x < 2*XidsPerPage {
			want = StatusInProgress
		}
		if st, err := c.Status(x); err != nil || st != want {
			t.Fatalf("Status(%d) = %v, %v; want %v", x, st, err, want)
		}
	}
}
