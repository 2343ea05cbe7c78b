package clog

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"mvkv/vfs"
)

func TestGeometry(t *testing.T) {
	if XidsPerPage != 32704 {
		t.Fatalf("XidsPerPage = %d, want 32704", XidsPerPage)
	}
	for _, tc := range []struct {
		segno uint64
		name  string
	}{
		{0, "000000000000"},
		{0x1f, "00000000001F"},
		{math.MaxUint64 / XidsPerPage / PagesPerSegment, "100804020100"},
	} {
		if got := segmentName(tc.segno); got != tc.name {
			t.Errorf("segmentName(%d) = %q, want %q", tc.segno, got, tc.name)
		}
	}
	if s, off := pageSegment(33); s != 1 || off != PageSize {
		t.Errorf("pageSegment(33) = %d, %d; want 1, %d", s, off, PageSize)
	}
}

// boundaryXids are xids at the edges of bytes, pages and segments, near
// multiples of 32768 (where a page without header would end), and huge.
func boundaryXids() []uint64 {
	var xs []uint64
	add := func(center uint64) {
		for d := -5; d <= 5; d++ {
			x := center + uint64(d)
			if (d < 0 && x > center) || (d > 0 && x < center) {
				continue // wrapped
			}
			xs = append(xs, x)
		}
	}
	add(0)
	for k := uint64(1); k <= 3; k++ {
		add(k * XidsPerPage)
		add(k * 32768)
		add(k * XidsPerPage * PagesPerSegment)
	}
	add(1 << 40)
	add(1<<40 + XidsPerPage*PagesPerSegment)
	add(1 << 63)
	add(math.MaxUint64)
	return xs
}

func TestBoundaries(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16})
	model := make(map[uint64]Status)
	// Set every other boundary xid, so each set one has unset neighbours
	// sharing its byte that must stay in progress.
	for i, x := range boundaryXids() {
		if i%2 == 0 {
			if err := c.SetStatus(x, statusFor(x), 0); err != nil {
				t.Fatalf("SetStatus(%d): %v", x, err)
			}
			model[x] = statusFor(x)
		}
	}
	check := func(c *CLOG, when string) {
		t.Helper()
		for _, x := range boundaryXids() {
			got, err := c.Status(x)
			if err != nil {
				t.Fatalf("%s: Status(%d): %v", when, x, err)
			}
			if got != model[x] {
				t.Errorf("%s: Status(%d) = %v, want %v", when, x, got, model[x])
			}
		}
	}
	check(c, "before close")
	// Overwrite a few, including a change back to in progress.
	for _, x := range []uint64{0, XidsPerPage, 1 << 40, math.MaxUint64} {
		s := (model[x] + 1) & statusMask
		if err := c.SetStatus(x, s, 0); err != nil {
			t.Fatal(err)
		}
		model[x] = s
	}
	check(c, "after overwrite")
	checkPool(t, c)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16})
	check(c, "after reopen")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := vfs.OS{}.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := segmentName(xidPage(1<<40) / PagesPerSegment)
	found := false
	for _, n := range names {
		if n == want {
			found = true
		}
		if len(n) != segmentNameLen {
			t.Errorf("unexpected file %q in %s", n, dir)
		}
	}
	if !found {
		t.Errorf("segment file %s for xid 1<<40 missing; have %v", want, names)
	}
}

func TestUnwrittenReadsInProgress(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{})
	defer c.Close()
	for _, x := range []uint64{0, 12345, 1 << 40, math.MaxUint64} {
		if s, err := c.Status(x); err != nil || s != StatusInProgress {
			t.Errorf("Status(%d) = %v, %v; want in progress", x, s, err)
		}
	}
	if names, _ := (vfs.OS{}).ReadDir(dir); len(names) != 0 {
		t.Errorf("reads created files: %v", names)
	}
}

// TestConcurrentEviction sets statuses from hundreds of goroutines on xids
// spread over 100 pages through a 16-slot pool, so nearly every call evicts a
// dirty page, then checks every status, also after Close and re-Open.
func TestConcurrentEviction(t *testing.T) {
	const (
		goroutines = 300
		pages      = 100
		perG       = 100 // one xid per page per goroutine
	)
	dir := testDir(t)
	wal := &fakeWAL{}
	c := mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16, FlushWAL: wal.flush})
	xidOf := func(g, j int) uint64 {
		page := uint64((g + j*37) % pages) // 37 is prime to 100: every page once
		return page*XidsPerPage + uint64(g)*3
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perG {
				x := xidOf(g, j)
				if err := c.SetStatus(x, statusFor(x), lsnFor(x)); err != nil {
					errs <- fmt.Errorf("SetStatus(%d): %w", x, err)
					return
				}
				if j%3 == 0 {
					prev := xidOf(g, j/2)
					if s, err := c.Status(prev); err != nil || s != statusFor(prev) {
						errs <- fmt.Errorf("Status(%d) = %v, %v; want %v", prev, s, err, statusFor(prev))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkPool(t, c)
	st := c.Stats()
	if st.PageWrites == 0 || st.Misses == 0 {
		t.Errorf("no eviction happened: %+v", st)
	}
	checkAll := func(c *CLOG, when string) {
		t.Helper()
		for g := range goroutines {
			for j := range perG {
				x := xidOf(g, j)
				if s, err := c.Status(x); err != nil || s != statusFor(x) {
					t.Fatalf("%s: Status(%d) = %v, %v; want %v", when, x, s, err, statusFor(x))
				}
				// The neighbour after x is never set.
				if s, err := c.Status(x + 1); err != nil || s != StatusInProgress {
					t.Fatalf("%s: Status(%d) = %v, %v; want in progress", when, x+1, s, err)
				}
			}
		}
	}
	checkAll(c, "before close")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16})
	checkAll(c, "after reopen")
	checkPool(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWALBeforeData checks, at every page write, that FlushWAL has already
// covered the commit LSN of every status in the image being written.
func TestWALBeforeData(t *testing.T) {
	dir := testDir(t)
	wal := &fakeWAL{}
	var (
		mu      sync.Mutex
		writes  int
		badSeen []string
	)
	hfs := &hookFS{FS: vfs.OS{}}
	hfs.onWrite = func(name string, p []byte, off int64) error {
		segno := uint64(0)
		if _, err := fmt.Sscanf(filepath.Base(name), "%X", &segno); err != nil {
			return err
		}
		pageno := segno*PagesPerSegment + uint64(off/PageSize)
		if err := decodePage(p, pageno); err != nil {
			return fmt.Errorf("writing an undecodable page: %v", err)
		}
		flushed, _ := wal.state()
		var need uint64
		for i := range uint64(XidsPerPage) {
			x := pageno*XidsPerPage + i
			if getStatus(p, x) != StatusInProgress {
				need = max(need, lsnFor(x))
			}
		}
		mu.Lock()
		defer mu.Unlock()
		writes++
		if need > flushed {
			badSeen = append(badSeen, fmt.Sprintf("page %d written needing LSN %d, WAL flushed to %d", pageno, need, flushed))
		}
		return nil
	}
	c := mustOpen(t, hfs, dir, Options{Buffers: 16, FlushWAL: wal.flush})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 400 {
				x := uint64((g*7+j*13)%60)*XidsPerPage + uint64(g*400+j)
				if err := c.SetStatus(x, statusFor(x), lsnFor(x)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range badSeen {
		t.Error(b)
	}
	if writes < 60 {
		t.Errorf("only %d page writes for 60 pages", writes)
	}
	if _, calls := wal.state(); calls == 0 {
		t.Error("FlushWAL never called")
	}
}

// TestZeroLSNNeedsNoFlush: statuses set with LSN 0 (synchronous commits,
// already durable) never make the CLOG call FlushWAL.
func TestZeroLSNNeedsNoFlush(t *testing.T) {
	wal := &fakeWAL{}
	c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: 16, FlushWAL: wal.flush})
	for p := range uint64(40) {
		if err := c.SetStatus(p*XidsPerPage, StatusCommitted, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, calls := wal.state(); calls != 0 {
		t.Errorf("FlushWAL called %d times", calls)
	}
}

// TestSingleLoad: a goroutine that misses a page another goroutine is
// reading waits for that read instead of reading the page into a second slot.
func TestSingleLoad(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{})
	x := uint64(5*XidsPerPage + 17)
	if err := c.SetStatus(x, StatusAborted, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	var reads sync.WaitGroup
	reads.Add(1)
	release := make(chan struct{})
	var mu sync.Mutex
	nreads := 0
	hfs := &hookFS{FS: vfs.OS{}}
	hfs.onRead = func(string, int64) error {
		mu.Lock()
		nreads++
		first := nreads == 1
		mu.Unlock()
		if first {
			reads.Done()
			<-release
		}
		return nil
	}
	c = mustOpen(t, hfs, dir, Options{})
	defer c.Close()
	results := make(chan error, 2)
	get := func() {
		s, err := c.Status(x)
		if err == nil && s != StatusAborted {
			err = fmt.Errorf("status %v", s)
		}
		results <- err
	}
	go get()
	reads.Wait() // the first reader is inside ReadAt
	go get()
	for c.stats.ioWaits.Load() == 0 {
		// The second reader has not yet found the slot being read. The
		// first cannot finish until released, so the second either waits
		// for it (and this loop ends) or wrongly reads the page itself.
		select {
		case err := <-results:
			close(release)
			t.Fatalf("second reader returned (%v) while the first was still reading the page", err)
		default:
			runtime.Gosched()
		}
	}
	close(release)
	for range 2 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if nreads != 1 {
		t.Errorf("page read %d times", nreads)
	}
	checkPool(t, c)
}

func TestCorruptPage(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{})
	for p := range uint64(3) {
		for i := range uint64(100) {
			x := p*XidsPerPage + i
			if err := c.SetStatus(x, statusFor(x), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, segmentName(0))
	flip := func(off int64) {
		f, err := os.OpenFile(seg, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x40
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	flip(PageSize + 200) // a status byte of page 1

	c = mustOpen(t, vfs.OS{}, dir, Options{})
	if s, err := c.Status(3); err != nil || s != statusFor(3) {
		t.Errorf("page 0: Status = %v, %v", s, err)
	}
	_, err := c.Status(XidsPerPage + 1)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Status on corrupt page: %v, want ErrCorrupt", err)
	}
	for _, want := range []string{seg, "offset 8192", "checksum"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := c.SetStatus(XidsPerPage+2, StatusCommitted, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("SetStatus on corrupt page: %v, want ErrCorrupt", err)
	}
	checkPool(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// Recovery rebuilds a damaged page holding only xids at or above
	// RedoXid: its bits are discarded (redo sets them again) and it is
	// rewritten at the next Checkpoint. A damaged page holding xids below
	// RedoXid is taken to be torn: its bits are kept, and it is rewritten
	// too. Page 2 is read only after EndRecovery, which ends the leniency.
	flip(100)
	flip(2*PageSize + 200)
	c = mustOpen(t, vfs.OS{}, dir, Options{Recovery: true, RedoXid: XidsPerPage})
	if s, err := c.Status(XidsPerPage + 1); err != nil || s != StatusInProgress {
		t.Errorf("recovery: Status on a rebuilt page = %v, %v; want in progress", s, err)
	}
	for i := range uint64(100) {
		x := XidsPerPage + i
		if err := c.SetStatus(x, statusFor(x), 0); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := c.Status(3); err != nil || s != statusFor(3) {
		t.Errorf("recovery, torn page below RedoXid: Status = %v, %v; want its bits kept", s, err)
	}
	c.EndRecovery()
	if _, err := c.Status(2 * XidsPerPage); !errors.Is(err, ErrCorrupt) {
		t.Errorf("after EndRecovery: %v, want ErrCorrupt", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	flip(2*PageSize + 200)
	c = mustOpen(t, vfs.OS{}, dir, Options{})
	if _, err := c.Status(XidsPerPage + 1); err != nil {
		t.Errorf("after recovery rewrote the page: %v", err)
	}
	if s, err := c.Status(3); err != nil || s != statusFor(3) {
		t.Errorf("after recovery rewrote the torn page: Status = %v, %v", s, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// A valid page at the wrong place: copy page 0 over page 2.
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	copy(raw[2*PageSize:3*PageSize], raw[:PageSize])
	if err := os.WriteFile(seg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{})
	defer c.Close()
	_, err = c.Status(2 * XidsPerPage)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset 16384") || !strings.Contains(err.Error(), "page number") {
		t.Errorf("misplaced page: %v", err)
	}
}

func TestShortFile(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{})
	for p := range uint64(3) {
		// The first and last xid of each page, so both halves hold bits.
		for _, x := range []uint64{p * XidsPerPage, p*XidsPerPage + XidsPerPage - 1} {
			if err := c.SetStatus(x, StatusCommitted, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, segmentName(0))
	// A file ending at a page boundary: the pages beyond read as never
	// written.
	if err := os.Truncate(seg, PageSize); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{})
	if s, err := c.Status(XidsPerPage); err != nil || s != StatusInProgress {
		t.Errorf("page beyond end of file: %v, %v", s, err)
	}
	if s, err := c.Status(0); err != nil || s != StatusCommitted {
		t.Errorf("page 0: %v, %v", s, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A file ending inside a written page (a torn extension) pads it with
	// zeros, which its checksum catches.
	if err := os.Truncate(seg, PageSize/2); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{})
	defer c.Close()
	if _, err := c.Status(0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("half a page: %v, want ErrCorrupt", err)
	}
}

func TestFlushWALError(t *testing.T) {
	dir := testDir(t)
	wal := &fakeWAL{}
	c := mustOpen(t, vfs.OS{}, dir, Options{FlushWAL: wal.flush})
	if err := c.SetStatus(10, StatusCommitted, 500); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("wal down")
	wal.setErr(boom)
	if err := c.Checkpoint(); !errors.Is(err, boom) {
		t.Fatalf("Checkpoint = %v, want %v", err, boom)
	}
	if _, err := os.Stat(filepath.Join(dir, segmentName(0))); err == nil {
		t.Error("page written although FlushWAL failed")
	}
	wal.setErr(nil)
	if err := c.Close(); err != nil {
		t.Fatalf("Close after WAL recovered: %v", err)
	}
	if flushed, _ := wal.state(); flushed < 500 {
		t.Errorf("WAL flushed to %d before the page was written", flushed)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{})
	defer c.Close()
	if s, err := c.Status(10); err != nil || s != StatusCommitted {
		t.Errorf("Status = %v, %v", s, err)
	}
}

func TestSyncErrorIsSticky(t *testing.T) {
	boom := errors.New("EIO")
	var mu sync.Mutex
	failing := true
	hfs := &hookFS{FS: vfs.OS{}}
	hfs.onSync = func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return boom
		}
		return nil
	}
	c := mustOpen(t, hfs, testDir(t), Options{})
	if err := c.SetStatus(1, StatusCommitted, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Checkpoint(); !errors.Is(err, boom) {
		t.Fatalf("Checkpoint = %v, want %v", err, boom)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	if err := c.Checkpoint(); !errors.Is(err, boom) {
		t.Errorf("second Checkpoint = %v; a failed fsync must not be forgotten", err)
	}
	if s, err := c.Status(1); err != nil || s != StatusCommitted {
		t.Errorf("reads must continue: %v, %v", s, err)
	}
	if err := c.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v", err)
	}
}

func TestErrors(t *testing.T) {
	if _, err := Open(vfs.OS{}, testDir(t), Options{}); err == nil {
		t.Error("Open without FlushWAL succeeded")
	}
	c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: 1})
	if n := len(c.banks[0].slots); n != MinBuffers {
		t.Errorf("Buffers 1 gave %d slots, want %d", n, MinBuffers)
	}
	if err := c.SetStatus(1, 4, 0); !errors.Is(err, ErrInvalidStatus) {
		t.Errorf("SetStatus(4) = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.SetStatus(1, StatusCommitted, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetStatus after Close = %v", err)
	}
	if _, err := c.Status(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Status after Close = %v", err)
	}
	if err := c.Checkpoint(); !errors.Is(err, ErrClosed) {
		t.Errorf("Checkpoint after Close = %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
}

func TestStats(t *testing.T) {
	c := mustOpen(t, vfs.OS{}, testDir(t), Options{})
	defer c.Close()
	before := c.Stats()
	c.SetStatus(1, StatusCommitted, 0) // miss
	c.Status(1)                        // hit
	c.Status(2)                        // hit
	d := c.Stats().Sub(before)
	if d.Lookups != 3 || d.Hits != 2 || d.Misses != 1 || d.PageReads != 1 {
		t.Errorf("stats delta %+v", d)
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if d := c.Stats().Sub(before); d.PageWrites != 1 || d.FileSyncs != 2 {
		t.Errorf("after checkpoint: %+v (want 1 write, directory and file sync)", d)
	}
}

func TestStatusString(t *testing.T) {
	if StatusSubCommitted.String() != "sub-committed" || Status(9).String() != "Status(9)" {
		t.Error(StatusSubCommitted.String(), Status(9).String())
	}
}

// TestLatestPageStays: the page new xids go to is never the eviction victim,
// however long ago it was last used.
func TestLatestPageStays(t *testing.T) {
	c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: MinBuffers})
	defer c.Close()
	latest := uint64(1000)
	if err := c.SetStatus(latest*XidsPerPage, StatusCommitted, 0); err != nil {
		t.Fatal(err)
	}
	for p := range uint64(5 * MinBuffers) {
		if _, err := c.Status(p * XidsPerPage); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats()
	if s, err := c.Status(latest*XidsPerPage + 1); err != nil || s != StatusInProgress {
		t.Fatal(s, err)
	}
	if d := c.Stats().Sub(before); d.Hits != 1 {
		t.Errorf("latest page was evicted: %+v", d)
	}
	checkPool(t, c)
}

// TestCheckpointDuringWrites runs Checkpoint in a loop while statuses are
// set and pages evicted, then checks every status after re-Open.
func TestCheckpointDuringWrites(t *testing.T) {
	dir := testDir(t)
	wal := &fakeWAL{}
	c := mustOpen(t, vfs.OS{}, dir, Options{Buffers: MinBuffers, FlushWAL: wal.flush})
	const writers, perW, pages = 8, 600, 40
	xidOf := func(w, j int) uint64 { return uint64(j%pages)*XidsPerPage + uint64(w*perW+j) }
	stop := make(chan struct{})
	ckptDone := make(chan error, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				if n == 0 {
					ckptDone <- errors.New("no checkpoint ran")
					return
				}
				ckptDone <- nil
				return
			default:
			}
			if err := c.Checkpoint(); err != nil {
				ckptDone <- err
				return
			}
			n++
		}
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perW {
				x := xidOf(w, j)
				if err := c.SetStatus(x, statusFor(x), lsnFor(x)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-ckptDone; err != nil {
		t.Fatal(err)
	}
	checkPool(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{Buffers: MinBuffers})
	defer c.Close()
	for w := range writers {
		for j := range perW {
			x := xidOf(w, j)
			if s, err := c.Status(x); err != nil || s != statusFor(x) {
				t.Fatalf("Status(%d) = %v, %v; want %v", x, s, err, statusFor(x))
			}
		}
	}
}

// TestOpenSegmentsBounded: touching many segments does not keep a file open
// for each of them.
func TestOpenSegmentsBounded(t *testing.T) {
	const segs = maxOpenSegments + 36
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{Buffers: MinBuffers})
	xidOf := func(s uint64) uint64 { return s*XidsPerPage*PagesPerSegment + s }
	for s := range uint64(segs) {
		if err := c.SetStatus(xidOf(s), statusFor(xidOf(s)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for s := range uint64(segs) {
			if st, err := c.Status(xidOf(s)); err != nil || st != statusFor(xidOf(s)) {
				t.Fatalf("round %d: Status(%d) = %v, %v", round, xidOf(s), st, err)
			}
		}
	}
	c.files.mu.Lock()
	n := len(c.files.open)
	c.files.mu.Unlock()
	if n > maxOpenSegments {
		t.Errorf("%d segment files open, limit %d", n, maxOpenSegments)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := vfs.OS{}.ReadDir(dir)
	if err != nil || len(names) != segs {
		t.Errorf("%d segment files (%v), want %d", len(names), err, segs)
	}
}

// TestAbandonWritesNothing: statuses set in the buffers are not written by
// Abandon (a failed database Open leaves the files as it found them), and
// the CLOG is closed after it.
func TestAbandonWritesNothing(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16})
	if err := c.SetStatus(5, StatusCommitted, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.ExtendTo(3 * XidsPerPage); err != nil {
		t.Fatal(err)
	}
	if err := c.Abandon(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("Close after Abandon: %v, want ErrClosed", err)
	}
	if names, _ := (vfs.OS{}).ReadDir(dir); len(names) != 0 {
		for _, n := range names {
			if size, err := (vfs.OS{}).Stat(filepath.Join(dir, n)); err == nil && size > 0 {
				t.Errorf("Abandon wrote %s (%d bytes)", n, size)
			}
		}
	}
	c = mustOpen(t, vfs.OS{}, dir, Options{Buffers: 16})
	defer c.Close()
	if s, err := c.Status(5); err != nil || s != StatusInProgress {
		t.Errorf("after Abandon and a reopen: Status(5) = %v, %v; want in progress (never written)", s, err)
	}
}

// TestExtendReplacesUnreadBytes: bytes where no xid has been assigned yet
// (here a page of garbage appended to the segment) fail a Status read of
// that page, but Extend at the page's first xid starts it as zeros without
// reading it, and its next write replaces the garbage. Extend of any other
// xid does nothing, and a cached page is zeroed in place.
func TestExtendReplacesUnreadBytes(t *testing.T) {
	dir := testDir(t)
	c := mustOpen(t, vfs.OS{}, dir, Options{})
	for i := range uint64(100) {
		if err := c.SetStatus(i, StatusCommitted, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, segmentName(0))
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{0x5a}, PageSize)
	if _, err := f.WriteAt(garbage, PageSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	c = mustOpen(t, vfs.OS{}, dir, Options{})
	if _, err := c.Status(XidsPerPage + 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Status on the garbage page before Extend: %v, want ErrCorrupt", err)
	}
	// Not the first xid of a page: nothing happens (page 0 keeps its bits).
	if err := c.Extend(100); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Status(5); err != nil || s != StatusCommitted {
		t.Fatalf("Extend(100) touched page 0: %v, %v", s, err)
	}
	reads := c.Stats().PageReads
	if err := c.Extend(XidsPerPage); err != nil {
		t.Fatalf("Extend over a garbage page: %v", err)
	}
	if got := c.Stats(); got.PageReads != reads || got.PagesZeroed != 1 {
		t.Errorf("Extend: %d page reads, %d pages zeroed; want no read and one zeroed", got.PageReads-reads, got.PagesZeroed)
	}
	for _, x := range []uint64{XidsPerPage, XidsPerPage + 1, 2*XidsPerPage - 1} {
		if s, err := c.Status(x); err != nil || s != StatusInProgress {
			t.Errorf("Status(%d) after Extend = %v, %v; want in progress", x, s, err)
		}
	}
	if err := c.SetStatus(XidsPerPage+1, StatusCommitted, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c = mustOpen(t, vfs.OS{}, dir, Options{})
	if s, err := c.Status(XidsPerPage + 1); err != nil || s != StatusCommitted {
		t.Errorf("after reopen: Status = %v, %v; want committed from the rewritten page", s, err)
	}
	if s, err := c.Status(XidsPerPage + 2); err != nil || s != StatusInProgress {
		t.Errorf("after reopen: Status = %v, %v; want in progress", s, err)
	}
	// A cached page is zeroed in place (the caller assigns the page's
	// first xid only once, so this happens only to a page a lookup of a
	// future xid brought in).
	if err := c.Extend(XidsPerPage); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Status(XidsPerPage + 1); err != nil || s != StatusInProgress {
		t.Errorf("Extend of a cached page: Status = %v, %v; want in progress", s, err)
	}
	checkPool(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
