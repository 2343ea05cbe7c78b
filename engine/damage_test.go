package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// fillDurable commits n single-key transactions with 1,900-byte values,
// enough to span several 1 MiB WAL segments, and leaves the database open
// (a crash leaves it so); it returns the directory's copy.
func fillAndCrash(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	db := openTest(t, dir, Options{CheckpointTimeout: -1})
	for i := 0; i < n; i++ {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 1900))
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	db.Close()
	return crash
}

func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, walDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, filepath.Join(dir, walDir, e.Name()))
		}
	}
	return out
}

// Damage inside the durable WAL, in an older segment or in the middle of
// the last one, fails Open with ErrCorruption naming the segment, and
// deletes nothing.
func TestDamagedDurableWALIsCorruption(t *testing.T) {
	base := fillAndCrash(t, 1200)
	segs := walSegments(t, base)
	if len(segs) < 3 {
		t.Fatalf("want at least 3 WAL segments, have %d", len(segs))
	}
	for _, c := range []struct {
		name string
		seg  int
		off  int64
	}{{"older segment", 0, 500000}, {"older segment end", 0, 1<<20 - 3000}, {"middle of the last", len(segs) - 2, 4096}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, base, dir)
			seg := walSegments(t, dir)[c.seg]
			b, _ := os.ReadFile(seg)
			b[c.off] ^= 0x20
			os.WriteFile(seg, b, 0o644)
			before := len(walSegments(t, dir))
			_, err := Open(dir, Options{SharedBuffers: 4 << 20})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("Open: %v; want ErrCorruption naming %s", err, filepath.Base(seg))
			}
			if after := len(walSegments(t, dir)); after != before {
				t.Fatalf("a failed Open removed WAL segments: %d -> %d", before, after)
			}
		})
	}
}

// filledAndClosed returns a directory holding n committed keys with
// 200-byte values, closed cleanly (so checkpointed).
func filledAndClosed(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	for i := 0; i < n; i++ {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 200))
	}
	db.Close()
	return dir
}

func TestShortHeapOrMissingControlIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 500)

	short := t.TempDir()
	copyDir(t, dir, short)
	os.Truncate(filepath.Join(short, heapDir, "00000000"), 8192)
	if _, err := Open(short, Options{}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("truncated heap: %v, want ErrCorruption", err)
	}

	noctl := t.TempDir()
	copyDir(t, dir, noctl)
	os.Remove(filepath.Join(noctl, controlName))
	for _, s := range walSegments(t, noctl) {
		os.Remove(s)
	}
	if _, err := Open(noctl, Options{}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("no control file and no WAL, but heap data: %v, want ErrCorruption", err)
	}
}

// TestMissingControlWithWholeWAL: a control file removed from a database
// whose WAL still starts at its first record is recovered from by
// replaying the whole WAL, with every key intact, and said with a warning
// and in RecoveryInfo: no database loses its control file by itself.
func TestMissingControlWithWholeWAL(t *testing.T) {
	dir := filledAndClosed(t, 500)
	if err := os.Remove(filepath.Join(dir, controlName)); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	db, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open without the control file, whole WAL: %v", err)
	}
	defer db.Close()
	if !db.Recovery().ControlFileMissing {
		t.Errorf("RecoveryInfo.ControlFileMissing is false")
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "control file is missing") {
		t.Errorf("no warning about the missing control file in the log:\n%s", logged.String())
	}
	for _, i := range []int{0, 250, 499} {
		if v, ok := get(t, db, fmt.Sprintf("key-%05d", i)); !ok || len(v) != 200 {
			t.Errorf("key-%05d: %d bytes, found %v", i, len(v), ok)
		}
	}
}

// TestStraySegmentIsCorruption: a heap segment file past the heap's end
// that no WAL record since the last checkpoint created (left from another
// copy of the directory, say) is refused, naming the file and offset, and
// so is an all-zeros one after a clean shutdown: nothing extended the heap
// since the checkpoint, so nothing of this database's lies past segment 0
// (segments_test.go has the crash case, where it is accepted).
func TestStraySegmentIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 500)

	stray := t.TempDir()
	copyDir(t, dir, stray)
	junk := make([]byte, 2*8192)
	for i := range junk {
		junk[i] = byte(i*7 + 1)
	}
	if err := os.WriteFile(filepath.Join(stray, heapDir, "00000001"), junk, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(stray, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), filepath.Join(heapDir, "00000001")+" at offset 0 (block 131072)") || !strings.Contains(err.Error(), "not this database's") {
		t.Fatalf("stray heap segment: %v, want ErrCorruption naming the file and offset", err)
	}

	// A page appended to the heap's own first file: past the checkpoint's
	// length and written by nothing in the WAL, but not a stray file.
	appended := t.TempDir()
	copyDir(t, dir, appended)
	first := filepath.Join(appended, heapDir, "00000000")
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(first, append(b, junk[:8192]...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(appended, Options{})
	at := fmt.Sprintf("%s at offset %d (block %d)", first, len(b), len(b)/8192)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), at) || !strings.Contains(err.Error(), "no WAL record since that checkpoint writes that page") ||
		strings.Contains(err.Error(), "segment file") || strings.Contains(err.Error(), "not this database's") {
		t.Fatalf("a page appended to the heap's first file: %v, want ErrCorruption naming %q without calling the file foreign", err, at)
	}

	zeros := t.TempDir()
	copyDir(t, dir, zeros)
	if err := os.WriteFile(filepath.Join(zeros, heapDir, "00000001"), make([]byte, 2*8192), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(zeros, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), filepath.Join(heapDir, "00000001")) || !strings.Contains(err.Error(), "not this database's") {
		t.Fatalf("a segment of zeros past the end after a clean shutdown: %v, want ErrCorruption naming the file", err)
	}
}

// A transaction waiting for a row lock held by a transaction that is never
// ended returns ErrClosed when the database closes, instead of waiting
// forever.
func TestCloseWakesLockWaiters(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	ctx := context.Background()
	t1, _ := db.Begin(ctx, TxnOptions{})
	if err := t1.Put([]byte("k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	t2, _ := db.Begin(ctx, TxnOptions{})
	errc := make(chan error, 1)
	go func() { errc <- t2.Put([]byte("k"), []byte("2")) }()
	waitUntilWaiting(t, db)
	db.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lock waiter still waits after Close")
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{{SharedBuffers: -1}, {CLOGBuffers: -5}, {MaxWALSize: -1}, {CommitDelay: 100001}, {CommitSiblings: 1001}, {SharedBuffers: 1 << 62}, {SharedBuffers: 99999 << 40}} {
		if _, err := Open(t.TempDir(), o); err == nil {
			t.Errorf("Open accepted %+v", o)
		}
	}
	db := openTest(t, t.TempDir(), Options{CommitSiblings: NoCommitSiblings})
	db.Close()
	if err := db.SetCommitDelay(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetCommitDelay after Close: %v", err)
	}
}

// A WAL that ends before the last checkpoint record (here cut at that
// record) fails Open with ErrCorruption naming the segment file and the
// offset where the valid log ends.
func TestWALEndingBeforeCheckpointIsCorruption(t *testing.T) {
	dir := filledAndClosed(t, 200)
	ctrl, found, err := readControl(vfs.OS{}, dir)
	if err != nil || !found || ctrl.CheckpointLSN == 0 {
		t.Fatalf("control file: %+v found %v err %v", ctrl, found, err)
	}
	segs := walSegments(t, dir)
	fi, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	name, off := wal.SegmentFile(ctrl.CheckpointLSN, fi.Size())
	if err := os.Truncate(filepath.Join(dir, walDir, name), off); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	want := fmt.Sprintf("%s is %d bytes, cut short", name, off)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v; want ErrCorruption naming %q", err, want)
	}
}

// TestControlFileNotThisWALs: a control file copied from another database,
// or an older copy of this one's, is refused, naming the control file,
// instead of being taken at its word (its redo point and next xid) or
// blamed on the heap.
func TestControlFileNotThisWALs(t *testing.T) {
	small := filledAndClosed(t, 5)
	big := filledAndClosed(t, 500)

	// An older control file of the big database: its checkpoint LSN
	// lies inside the WAL, at a record that is not that checkpoint.
	older := t.TempDir()
	copyDir(t, big, older)
	ctlPath := filepath.Join(older, controlName)
	if err := os.Remove(ctlPath); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(small, controlName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctlPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(older, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), ctlPath+" names a checkpoint record at") || !strings.Contains(err.Error(), "does not belong with this WAL") {
		t.Fatalf("the small database's control file over the big one's WAL: %v", err)
	}

	// The big database's control file over the small one's WAL: its
	// checkpoint lies past the WAL's end.
	newer := t.TempDir()
	copyDir(t, small, newer)
	b, err = os.ReadFile(filepath.Join(big, controlName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(newer, controlName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(newer, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "or the control file is not this WAL's") {
		t.Fatalf("the big database's control file over the small one's WAL: %v", err)
	}
	// A redo point inside a record, and one in a segment this WAL never
	// had: the errors say the control file may be the wrong one.
	ctrl, _, err := readControl(vfs.OS{}, small)
	if err != nil {
		t.Fatal(err)
	}
	for _, redo := range []wal.LSN{ctrl.RedoLSN + 8, ctrl.RedoLSN + 64<<20} {
		d := t.TempDir()
		copyDir(t, small, d)
		c := ctrl
		c.RedoLSN = redo
		if redo > c.CheckpointLSN {
			c.CheckpointLSN = redo
		}
		if err := writeControl(vfs.OS{}, d, c); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(d, Options{}); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "not this WAL's") {
			t.Fatalf("redo point %s: %v, want ErrCorruption that names the control file as a suspect", redo, err)
		}
	}
}

// TestControlAndWALOfAnotherDatabase: two databases that ran the same
// work have the same LSNs, so the other's control file, or the other's
// WAL, names a checkpoint record with the same redo point and next xid at
// the same place. Only the system identifier in the record tells them
// apart, and Open refuses the pair instead of serving the other database's
// writes.
func TestControlAndWALOfAnotherDatabase(t *testing.T) {
	x, y := filledAndClosed(t, 20), filledAndClosed(t, 20)
	cx, _, err := readControl(vfs.OS{}, x)
	if err != nil {
		t.Fatal(err)
	}
	cy, _, err := readControl(vfs.OS{}, y)
	if err != nil {
		t.Fatal(err)
	}
	if cx.CheckpointLSN != cy.CheckpointLSN || cx.RedoLSN != cy.RedoLSN || cx.NextXid != cy.NextXid || cx.SystemID == cy.SystemID {
		t.Fatalf("the two databases differ in more than their identity: %+v, %+v", cx, cy)
	}
	want := fmt.Sprintf("written by the database with system identifier %d, and the control file is that of %d", cy.SystemID, cx.SystemID)

	otherWAL := t.TempDir()
	copyDir(t, x, otherWAL)
	for _, s := range walSegments(t, otherWAL) {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range walSegments(t, y) {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(otherWAL, walDir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(otherWAL, Options{}); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the other database's WAL: %v, want ErrCorruption saying %q", err, want)
	}

	otherControl := t.TempDir()
	copyDir(t, y, otherControl)
	b, err := os.ReadFile(filepath.Join(x, controlName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(otherControl, controlName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(otherControl, Options{}); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the other database's control file: %v, want ErrCorruption saying %q", err, want)
	}
}

// TestWALSegmentOfAnotherDatabase: two databases run the same work, so
// their WALs have records at the same LSNs; each is copied while running
// (a crash image) after its WAL has moved past the checkpoint's segment.
// One's segments after the checkpoint's put in the other's directory are
// refused at Open, naming the segment, where they were replayed until a
// record clashed with the heap.
func TestWALSegmentOfAnotherDatabase(t *testing.T) {
	run := func() string {
		dir := t.TempDir()
		db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, WALSegmentSize: 1 << 20})
		for i := range 20 {
			mustPut(t, db, fmt.Sprintf("key-%05d", i), "before")
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		for i := range 3000 {
			mustPut(t, db, fmt.Sprintf("key-%05d", i%500), strings.Repeat("after", 100))
		}
		image := t.TempDir()
		copyDir(t, dir, image)
		db.Close()
		return image
	}
	x, y := run(), run()
	ctrl, _, err := readControl(vfs.OS{}, x)
	if err != nil {
		t.Fatal(err)
	}
	// The crash image itself opens.
	own := t.TempDir()
	copyDir(t, x, own)
	db, err := Open(own, Options{Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatalf("the crash image: %v", err)
	}
	db.Close()

	ckptSeg, _ := wal.SegmentFile(ctrl.CheckpointLSN, 1<<20)
	swapped := 0
	for _, s := range walSegments(t, y) {
		if filepath.Base(s) <= ckptSeg {
			continue
		}
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(x, walDir, filepath.Base(s)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		swapped++
	}
	if swapped == 0 {
		t.Fatal("the WAL did not go past the checkpoint's segment")
	}
	_, err = Open(x, Options{Autovacuum: noAutovacuum})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "another write-ahead log") {
		t.Fatalf("the other database's segments after the checkpoint's: %v, want ErrCorruption naming the segment", err)
	}
	t.Log(err)
}

// TestHeapPageNewerThanWAL: a heap page whose LSN lies past the end of the
// WAL was not written by this database (WAL before data): a file put back
// from a later copy, say. With the index file loaded, Open reads no heap
// page; the page is refused when it is first read, with ErrCorruption
// naming the file and offset, instead of being read as this database's.
func TestHeapPageNewerThanWAL(t *testing.T) {
	dir := filledAndClosed(t, 100)
	name := filepath.Join(dir, heapDir, "00000000")
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, heap.PageSize)
	if _, err := f.ReadAt(page, 0); err != nil {
		t.Fatal(err)
	}
	heap.SetPageLSN(page, 1<<40)
	heap.SetChecksum(page, 0)
	if _, err := f.WriteAt(page, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	if !db.Recovery().IndexFromFile {
		t.Fatal("the index was rebuilt; the test needs the index file loaded")
	}
	err = db.View(context.Background(), func(tx *Txn) error {
		_, err := tx.Get([]byte("key-00000"))
		return err
	})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "beyond the end of the WAL") || !strings.Contains(err.Error(), "offset 0 (block 0)") {
		t.Fatalf("read of a key on a page newer than the WAL: %v; want ErrCorruption naming the page", err)
	}
	if v, ok := get(t, db, "key-00099"); !ok || v != strings.Repeat("v", 200) {
		t.Fatalf("key-00099, on another page, = %q, %v", v, ok)
	}
	// Without the index file, Open reads every page to rebuild the
	// index, and fails on this one.
	db.Close()
	if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{Autovacuum: noAutovacuum}); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "beyond the end of the WAL") {
		t.Fatalf("Open rebuilding the index over a page newer than the WAL: %v; want ErrCorruption", err)
	}
}

// TestDamagedInsertTarget: the heap's last page, with free space, fails
// its checksum. New keys are placed elsewhere instead of failing on it,
// and the keys on it stay unreadable.
func TestDamagedInsertTarget(t *testing.T) {
	dir := filledAndClosed(t, 100)
	name := filepath.Join(dir, heapDir, "00000000")
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	last := fi.Size()/8192 - 1
	flipFileBits(t, name, last*8192+7000, 0x01)
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	for i := range 40 {
		if err := db.Update(context.Background(), func(tx *Txn) error {
			return tx.Put([]byte(fmt.Sprintf("new-%02d", i)), []byte("v"))
		}); err != nil {
			t.Fatalf("insert of a new key %d: %v", i, err)
		}
	}
	if v, ok := get(t, db, "new-07"); !ok || v != "v" {
		t.Fatalf("new-07 = %q, %v", v, ok)
	}
}

// TestVerifyLostOutOfLineValue: a page holding a chunk of a key's
// out-of-line value fails its checksum; Verify counts and lists the key
// as lost, though its newest version's own page reads.
func TestVerifyLostOutOfLineValue(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	mustPut(t, db, "small", "s")
	mustPut(t, db, "big", strings.Repeat("b", 100000))
	head := headBlock(t, db, "big")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, heapDir, "00000000")
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	// A chunk page: any block but the heads' ones.
	blk := int64(-1)
	for b := int64(0); b < fi.Size()/8192; b++ {
		if uint32(b) != head && b != 0 {
			blk = b
			break
		}
	}
	if blk < 0 {
		t.Fatal("no chunk page")
	}
	flipFileBits(t, name, blk*8192+3000, 0x01)
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	// Open's scan of the heap (the index came from its file) counts it.
	db.waitOpenScan()
	if d := db.Damage(); d.CorruptPages != 1 || d.KeysLost != 1 {
		t.Fatalf("Damage() = %+v, want one corrupt page and one key lost", d)
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.LostKeys) != 1 || rep.LostKeys[0] != "big" || !strings.Contains(strings.Join(rep.Problems, "\n"), `keys lost: 1 `) {
		t.Fatalf("LostKeys %q, problems:\n%s", rep.LostKeys, strings.Join(rep.Problems, "\n"))
	}
}

// flipFileBits XORs the byte at off of the file name with mask, as damage
// on disk would.
func flipFileBits(t *testing.T, name string, off int64, mask byte) {
	t.Helper()
	flipFileBitsIn(t, vfs.OS{}, name, off, mask)
}

// flipFileBitsIn is flipFileBits on fsys.
func flipFileBitsIn(t *testing.T, fsys vfs.FS, name string, off int64, mask byte) {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= mask
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestHeapCutShortWhileOpen: a heap file shortened under a running
// database (by hand, or by another program) past the blocks the last
// checkpoint wrote fails the reads of the pages it lost with ErrCorruption
// naming the file, rather than reading them as new pages and losing their
// keys silently.
func TestHeapCutShortWhileOpen(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{SharedBuffers: 16 * 8192, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "first", "v")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// 64 pages or so, far more than the 16 buffers: most are evicted, so
	// written to the file past the checkpoint's length.
	const n = 4000
	val := strings.Repeat("x", 100)
	for i := 0; i < n; i += 100 {
		if err := db.Update(context.Background(), func(tx *Txn) error {
			for j := i; j < i+100; j++ {
				if err := tx.Put([]byte(fmt.Sprintf("k%05d", j)), []byte(val)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	name := filepath.Join(dir, heapDir, "00000000")
	if err := os.Truncate(name, 8*8192); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for i := range n {
		k := fmt.Sprintf("k%05d", i)
		var got []byte
		err := db.View(context.Background(), func(tx *Txn) error {
			v, err := tx.Get([]byte(k))
			got = v
			return err
		})
		switch {
		case err == nil && string(got) == val:
		case errors.Is(err, ErrCorruption) && strings.Contains(err.Error(), name) && strings.Contains(err.Error(), "while open"):
			lost++
		default:
			t.Fatalf("get %s after the file was cut: %q, %v; want its value or ErrCorruption naming %s", k, got, err, name)
		}
	}
	if lost == 0 {
		t.Fatal("no read reached a page past the new end of the file")
	}
}

// TestHeapWriteFailureIsRetried: a heap page write that fails (no space
// left) fails the checkpoint and the statements that needed a buffer, with
// ErrWriteFailed, but stops nothing: writes go on, and once space is back
// the next checkpoint writes every page and a reopen finds every
// committed key.
func TestHeapWriteFailureIsRetried(t *testing.T) {
	_, ffs := faultMemDir(t)
	opts := Options{FS: ffs, SharedBuffers: 16 * 8192, CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	val := strings.Repeat("v", 200)
	put := func(i int) error {
		return db.Update(context.Background(), func(tx *Txn) error {
			return tx.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(val))
		})
	}
	for i := range 100 {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	fault := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpWrite), Contains: "/heap/", Err: syscall.ENOSPC})
	err := db.Checkpoint()
	if !errors.Is(err, ErrWriteFailed) || errors.Is(err, ErrIOFailure) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("checkpoint with the heap's writes failing: %v; want ErrWriteFailed", err)
	}
	// More pages than buffers: some statements need an eviction, which
	// fails the same way; the others commit.
	committed := map[int]bool{}
	for i := 100; i < 400; i++ {
		switch err := put(i); {
		case err == nil:
			committed[i] = true
		case !errors.Is(err, ErrWriteFailed):
			t.Fatalf("put %d with the heap's writes failing: %v; want nil or ErrWriteFailed", i, err)
		}
	}
	if fault.Fired() == 0 {
		t.Fatal("no heap write was attempted")
	}
	ffs.Clear()
	for i := 400; i < 600; i++ {
		if err := put(i); err != nil {
			t.Fatalf("put %d after space came back: %v", i, err)
		}
		committed[i] = true
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatalf("checkpoint after space came back: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", opts)
	defer db.Close()
	for i := range 600 {
		_, ok := get(t, db, fmt.Sprintf("k%05d", i))
		if want := i < 100 || committed[i]; ok != want {
			t.Errorf("k%05d present %v after reopening, want %v", i, ok, want)
		}
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

// faultMemDir returns a MemFS holding an empty /db whose name is durable,
// and a FaultFS over it to open the database with.
func faultMemDir(t *testing.T) (*vfs.MemFS, *vfs.FaultFS) {
	t.Helper()
	m := memDB(t)
	return m, vfs.NewFaultFS(m)
}

// TestHeapExtensionOnFullDisk: on a full disk (writes that would make a
// file longer fail with ENOSPC, overwrites succeed, as on ext4), a
// statement that needs a new heap page fails with ErrWriteFailed naming
// ENOSPC, because the page's space is taken when the heap is extended, as
// PostgreSQL's smgrextend does; everything else goes on: reads, deletes,
// checkpoints (every page already has its place in the file), and the
// database takes writes again once space is back.
func TestHeapExtensionOnFullDisk(t *testing.T) {
	_, ffs := faultMemDir(t)
	opts := Options{FS: ffs, SharedBuffers: 16 * 8192, CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	val := strings.Repeat("v", 200)
	key := func(i int) string { return fmt.Sprintf("k%05d", i) }
	put := func(i int) error {
		return db.Update(context.Background(), func(tx *Txn) error {
			return tx.Put([]byte(key(i)), []byte(val))
		})
	}
	for i := range 100 {
		if err := put(i); err != nil {
			t.Fatal(err)
		}
	}
	fault := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpWrite, vfs.OpTruncate), Contains: "/heap/", Growing: true, Err: syscall.ENOSPC})
	committed := map[int]bool{}
	for i := 100; i < 400; i++ {
		switch err := put(i); {
		case err == nil:
			committed[i] = true
		case !errors.Is(err, ErrWriteFailed) || !errors.Is(err, syscall.ENOSPC):
			t.Fatalf("put %d on a full disk: %v; want nil or ErrWriteFailed wrapping ENOSPC", i, err)
		}
	}
	if fault.Fired() == 0 || len(committed) == 300 {
		t.Fatalf("no insert needed a new page on the full disk (%d fired, %d committed)", fault.Fired(), len(committed))
	}
	if err := db.Failure(); err != nil {
		t.Fatalf("Failure() on a full disk: %v; want nil", err)
	}
	// Deletes change pages in place; reads evict pages that hold
	// committed versions, whose places in the file are already taken.
	for i := 0; i < 100; i += 10 {
		if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Delete([]byte(key(i))) }); err != nil {
			t.Fatalf("delete %d on a full disk: %v", i, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for i := range 500 {
			want := (i < 100 && i%10 != 0) || committed[i]
			err := db.View(context.Background(), func(tx *Txn) error {
				_, err := tx.Get([]byte(key(i)))
				if want && err != nil || !want && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("Get %s: %w (want present %v)", key(i), err, want)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
	}
	check("reads on a full disk")
	if err := db.Checkpoint(); err != nil {
		t.Fatalf("checkpoint on a full disk: %v", err)
	}
	ffs.Clear()
	for i := 400; i < 500; i++ {
		if err := put(i); err != nil {
			t.Fatalf("put %d after space came back: %v", i, err)
		}
		committed[i] = true
	}
	check("after space came back")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", opts)
	defer db.Close()
	check("after reopening")
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

// TestHeapSegmentSyncDirFailure: the first write into a new heap segment
// comes from the statement that extends the heap into it; when the
// directory fsync that makes the segment's name durable fails, the
// database stops taking writes (DESIGN rule 6), as for any failed fsync,
// instead of creating the file again on the next statement and carrying
// on with a name a power loss may take away.
func TestHeapSegmentSyncDirFailure(t *testing.T) {
	_, ffs := faultMemDir(t)
	opts := Options{FS: ffs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	// The empty heap has no segment yet: the first insert creates one.
	fault := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/heap", Err: syscall.EIO})
	err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("k"), []byte("v")) })
	if fault.Fired() == 0 {
		t.Fatalf("no heap directory fsync by the first insert (err %v)", err)
	}
	if !errors.Is(err, ErrIOFailure) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("insert whose new segment's directory fsync failed: %v; want ErrIOFailure wrapping EIO", err)
	}
	ffs.Clear()
	if err := db.Failure(); !errors.Is(err, ErrIOFailure) {
		t.Fatalf("Failure() after the failed directory fsync: %v; want ErrIOFailure", err)
	}
	err = db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("k2"), []byte("v")) })
	if !errors.Is(err, ErrIOFailure) {
		t.Fatalf("a later insert: %v; want ErrIOFailure (the failed fsync is not retried)", err)
	}
	db.Close()
	db = openTest(t, "/db", opts)
	defer db.Close()
	if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("k3"), []byte("v")) }); err != nil {
		t.Fatalf("insert after reopening: %v", err)
	}
	if v, _ := get(t, db, "k3"); v != "v" {
		t.Fatalf("k3 = %q after reopening", v)
	}
}

// TestLockWaitersWakeOnFailure: a transaction whose commit fails keeps its
// row locks for good (it stays running, invisible, until recovery decides
// whether its commit record is durable), so the failure that stops the
// database's writes must also end the waits for those locks: a writer
// queued behind it gets the failure instead of hanging until its context
// ends.
func TestLockWaitersWakeOnFailure(t *testing.T) {
	_, ffs := faultMemDir(t)
	off := false
	db := openTest(t, "/db", Options{FS: ffs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, EarlyLockRelease: &off})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "hot", "0")
	holder, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Put([]byte("hot"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("hot"), []byte("2")) })
	}()
	for db.locks.waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSync, vfs.OpDatasync), Contains: "/wal/", Err: syscall.EIO})
	if err := holder.Commit(); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("commit on a failing WAL fsync: %v; want ErrWALSyncFailed", err)
	}
	// Only a hang fails here: the deadline is far past any real wait.
	select {
	case err := <-waited:
		if !errors.Is(err, ErrWALSyncFailed) {
			t.Fatalf("the waiting writer: %v; want ErrWALSyncFailed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the writer waiting for the failed commit's row lock never woke")
	}
}

// TestCommitAfterDataFileFailure: a transaction that wrote before a data
// file's fsync failed (the database then takes no writes) cannot commit
// afterwards: its commit fails with the failure, its writes are rolled
// back, and a reopen finds only what committed before.
func TestCommitAfterDataFileFailure(t *testing.T) {
	_, ffs := faultMemDir(t)
	opts := Options{FS: ffs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "before", "v")
	var txs []*Txn
	for _, k := range []string{"during-sync", "during-async"} {
		tx, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSync, vfs.OpDatasync), Contains: "/heap/"})
	if err := db.Checkpoint(); !errors.Is(err, ErrIOFailure) {
		t.Fatalf("checkpoint with the heap's fsync failing: %v; want ErrIOFailure", err)
	}
	if err := txs[0].Commit(); !errors.Is(err, ErrIOFailure) {
		t.Errorf("Commit after the failure: %v; want ErrIOFailure", err)
	}
	if _, err := txs[1].CommitAsync(nil); !errors.Is(err, ErrIOFailure) {
		t.Errorf("CommitAsync after the failure: %v; want ErrIOFailure", err)
	}
	db.Close()
	ffs.Clear()
	db = openTest(t, "/db", opts)
	defer db.Close()
	for k, want := range map[string]bool{"before": true, "during-sync": false, "during-async": false} {
		if _, ok := get(t, db, k); ok != want {
			t.Errorf("%s present %v after reopening, want %v", k, ok, want)
		}
	}
}

// Damage in a WAL record below the last checkpoint's redo point, which
// recovery does not read, is named by Verify as such: old log records
// lost, not committed data.
func TestVerifyOldWALDamageBelowRedo(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	for i := range 300 {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 1000))
	}
	if err := db.Close(); err != nil { // its checkpoint's redo point lies past them
		t.Fatal(err)
	}
	ctrl, found, err := readControl(vfs.OS{}, dir)
	if err != nil || !found {
		t.Fatalf("control file: %v, %v", found, err)
	}
	segs := walSegments(t, dir)
	var seg string
	var segStart uint64
	for _, p := range segs {
		n, err := strconv.ParseUint(filepath.Base(p), 16, 64)
		if err == nil && n <= uint64(ctrl.RedoLSN) && uint64(ctrl.RedoLSN) < n+(1<<20) {
			seg, segStart = p, n
		}
	}
	off := (uint64(ctrl.RedoLSN) - segStart) / 2
	if seg == "" || off < 4096 {
		t.Fatalf("redo point %s: no room below it in its segment (%v)", ctrl.RedoLSN, segs)
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	if v, ok := get(t, db, "key-00007"); !ok || v != strings.Repeat("v", 1000) {
		t.Fatalf("a key whose record was damaged: %d bytes, %v", len(v), ok)
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Problems, "\n")
	if len(rep.Problems) != 1 || !strings.Contains(all, filepath.Base(seg)) || !strings.Contains(all, "below the last checkpoint's redo point") {
		t.Fatalf("verify: %d problems:\n%s\nwant one naming %s as below the redo point", len(rep.Problems), all, filepath.Base(seg))
	}
	// What cannot be read ends at the redo point: the log from there on,
	// which recovery read, is read and checked again, and found whole
	// (the one problem above).
	ctrl, _, err = readControl(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("up to %s, which can no longer be read", ctrl.RedoLSN); !strings.Contains(all, want) {
		t.Fatalf("verify: %s\nwant it to say %q", all, want)
	}
}

// A control file with a flipped byte is refused as corruption naming the
// file from its start: a checksum shows that the file is damaged, not
// where, so the offset of the stored checksum is not given as the place.
func TestDamagedControlFile(t *testing.T) {
	dir := filledAndClosed(t, 10)
	name := filepath.Join(dir, controlName)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0x01 // inside the checkpoint LSN
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{})
	want := name + " offset 0: checksum mismatch over the file's"
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v; want ErrCorruption containing %q", err, want)
	}
}

// A WAL segment name that the directory lists but that cannot be opened
// (a symbolic link to nothing) fails Open as corruption naming the file,
// not with a bare "no such file or directory".
func TestDanglingWALSegmentLink(t *testing.T) {
	dir := filledAndClosed(t, 10)
	link := filepath.Join(dir, walDir, "00000000FF000000")
	if err := os.Symlink(filepath.Join(t.TempDir(), "nothing"), link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), link+" is listed in the WAL directory but cannot be opened") {
		t.Fatalf("Open: %v; want ErrCorruption naming %s", err, link)
	}
}
