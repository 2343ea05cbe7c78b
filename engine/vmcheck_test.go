package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/visibility"
)

// staleMapState builds a directory whose visibility map file is older than
// its heap: 1,000 keys marked all-visible, the map files saved, every
// other key deleted (which clears the bits of every page), a clean close,
// then the saved map files copied back. Their checksums are valid; their
// bits say all-visible for pages holding deleted keys. It returns the
// pages whose bits are wrong.
func staleMapState(t *testing.T, dir string, o Options) int {
	t.Helper()
	db := openTest(t, dir, o)
	putKeys(t, db, "a", 1000, 40)
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	saved := saveMapFiles(t, dir)
	db = openTest(t, dir, o)
	pages := map[uint32]bool{}
	for i := 0; i < 1000; i += 2 {
		k := fmt.Sprintf("a%06d", i)
		pages[headBlock(t, db, k)] = true
		mustDelete(t, db, k)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	restoreMapFiles(t, dir, saved)
	return len(pages)
}

// saveMapFiles returns the contents of dir's visibility map files by name.
func saveMapFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	saved := map[string][]byte{}
	names, err := os.ReadDir(filepath.Join(dir, "vm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, "vm", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		saved[n.Name()] = b
	}
	if len(saved) == 0 {
		t.Fatal("no map file written")
	}
	return saved
}

// restoreMapFiles writes saved (saveMapFiles) back over dir's map files.
func restoreMapFiles(t *testing.T, dir string, saved map[string][]byte) {
	t.Helper()
	for n, b := range saved {
		if err := os.WriteFile(filepath.Join(dir, "vm", n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// reopenStale opens dir over a map file put back from an older copy, with
// the key index rebuilt from the heap (its file removed) or read from its
// file, logging into the buffer it returns, and waits for Open's
// background check of the map, so that every bit it finds wrong is
// cleared and counted.
func reopenStale(t *testing.T, dir string, o Options, rebuild bool) (*DB, *syncBuffer) {
	t.Helper()
	if rebuild {
		if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
			t.Fatal(err)
		}
	}
	logged := &syncBuffer{}
	o.Logger = slog.New(slog.NewTextHandler(logged, nil))
	db := openTest(t, dir, o)
	t.Cleanup(func() { db.Close() })
	if db.recovery.IndexFromFile == rebuild {
		t.Fatalf("index from file %v, want %v", db.recovery.IndexFromFile, !rebuild)
	}
	db.waitOpenScan()
	return db, logged
}

// checkpointVerify checkpoints db, which writes the map bits Open's check
// cleared, and fails t unless Verify then finds nothing.
func checkpointVerify(t *testing.T, db *DB) {
	t.Helper()
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify after the checkpoint: %v\n%s", err, rep)
	}
}

// checkHalfDeleted checks that the index-only reads and the heap reads
// agree on staleMapState's keys: 500 left, the deleted ones absent.
func checkHalfDeleted(t *testing.T, db *DB) {
	t.Helper()
	if scan, count := countKeys(t, db); scan != 500 || count != 500 {
		t.Fatalf("Scan finds %d keys, Count %d; want 500 both", scan, count)
	}
	err := db.View(context.Background(), func(tx *Txn) error {
		for _, i := range []int{0, 2, 998} {
			if ok, err := tx.Exists([]byte(fmt.Sprintf("a%06d", i))); err != nil || ok {
				return fmt.Errorf("Exists(a%06d) = %v, %v for a deleted key", i, ok, err)
			}
		}
		if ok, err := tx.Exists([]byte("a000001")); err != nil || !ok {
			return fmt.Errorf("Exists(a000001) = %v, %v for a live key", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStaleVisibilityMapFile: a map file copied back from an older copy of
// the directory must not make index-only reads answer wrongly, neither at
// once after an Open that takes the key index from its file (the
// background check has not passed the pages yet) nor after one that
// rebuilds it from the heap; the check clears the wrong bits, says so in
// the log and in Damage, and after a checkpoint Verify finds the map
// right.
func TestStaleVisibilityMapFile(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			wrong := staleMapState(t, dir, o)
			if rebuild {
				if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
					t.Fatal(err)
				}
			}
			var logged syncBuffer
			o.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			db := openTest(t, dir, o)
			defer db.Close()
			if db.recovery.IndexFromFile == rebuild {
				t.Fatalf("index from file %v, want %v", db.recovery.IndexFromFile, !rebuild)
			}
			// At once, whether or not the check has passed the pages.
			checkHalfDeleted(t, db)
			db.waitOpenScan()
			if d := db.Damage(); d.MapBitsCleared != wrong || !strings.Contains(d.MapBits, "block") {
				t.Fatalf("Damage says %d pages' map bits cleared (%q), want %d", d.MapBitsCleared, d.MapBits, wrong)
			}
			if l := logged.String(); !strings.Contains(l, "visibility map bits set for heap pages not marked all-visible") {
				t.Fatalf("no warning logged: %s", l)
			}
			checkHalfDeleted(t, db)
			checkpointVerify(t, db)
		})
	}
}

// TestMapBitsDistrustedUntilChecked drives the check by hand, so that
// nothing depends on whether the background scan or a reader comes first:
// while the bits are distrusted, index-only reads go to the heap, whatever
// the stored bits say; the scan clears the wrong bits, trusts the right
// ones, and leaves alone the bits of a page whose PD_ALL_VISIBLE is set
// only in the buffer pool (vacuum set it after the page was last written).
func TestMapBitsDistrustedUntilChecked(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	putKeys(t, db, "a", 1000, 40)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Every page all-visible in the pool only: the files still have
	// pages without PD_ALL_VISIBLE.
	if n, err := markAllVisible(db); err != nil || n < 3 {
		t.Fatalf("marked %d pages (%v)", n, err)
	}
	// Deleting a key clears its page's flag and bits; the stale bits a
	// copied-back map file would hold are put back by hand, without the
	// flag.
	gone := headBlock(t, db, "a000000")
	mustDelete(t, db, "a000000")
	if allVisible(db, gone) {
		t.Fatal("the delete left the map bit set")
	}
	if _, err := db.vm.Set(gone, visibility.AllVisible, 0); err != nil {
		t.Fatal(err)
	}
	if scan, count := countKeys(t, db); count == scan {
		t.Fatalf("the wrong bit did not show (Count %d, Scan %d): the test no longer sets it up", count, scan)
	}
	db.vm.Distrust(0)
	before := db.Stats()
	if scan, count := countKeys(t, db); scan != 999 || count != 999 {
		t.Fatalf("distrusted map: Scan %d, Count %d, want 999", scan, count)
	}
	if d := db.Stats().Sub(before); d.Index.AllVisible != 0 {
		t.Fatalf("distrusted map: %d keys answered from it", d.Index.AllVisible)
	}
	nblocks := db.pool.NBlocks()
	db.bgWG.Add(1)
	db.scanForDamagedPages(nblocks, nblocks)
	if d := db.Damage(); d.MapBitsCleared != 1 || !strings.Contains(d.MapBits, fmt.Sprintf("block %d", gone)) {
		t.Fatalf("Damage after the check: %+v, want block %d's bits cleared", d, gone)
	}
	if b, err := db.vm.TestStored(gone); err != nil || b != 0 {
		t.Fatalf("block %d keeps bits %v (%v)", gone, b, err)
	}
	for blk := range nblocks {
		if av, _ := db.pageAllVisible(blk); blk != gone && !av {
			t.Fatalf("block %d: its right bit was cleared or is still distrusted", blk)
		}
	}
	before = db.Stats()
	if scan, count := countKeys(t, db); scan != 999 || count != 999 {
		t.Fatalf("after the check: Scan %d, Count %d, want 999", scan, count)
	}
	if d := db.Stats().Sub(before); d.Index.AllVisible == 0 {
		t.Fatal("after the check no key is answered from the map")
	}
	// The files' pages still lack PD_ALL_VISIBLE: the right bits were
	// confirmed through the pool, not from the disk.
	page := make([]byte, heap.PageSize)
	if err := db.storage.ReadBlock(1, page); err != nil || heap.PageFlags(page)&heap.PDAllVisible != 0 {
		t.Fatalf("block 1 on disk: flags %#x (%v); the test meant it without PD_ALL_VISIBLE", heap.PageFlags(page), err)
	}
}

// TestNewPageClearsStaleMapBits: bits a map older than the heap holds for
// a block past the heap's end (which Open's check does not read) are
// cleared when the block becomes a page, so an uncommitted insert there
// is not taken for a live key by index-only reads.
func TestNewPageClearsStaleMapBits(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	putKeys(t, db, "a", 10, 40)
	end := db.pool.NBlocks()
	for b := end; b < end+4; b++ {
		if _, err := db.vm.Set(b, visibility.AllVisible, 0); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	w, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback()
	var keys []string
	for i := 0; db.pool.NBlocks() < end+2; i++ {
		k := fmt.Sprintf("new%04d", i)
		if err := w.Put([]byte(k), []byte(strings.Repeat("n", 1500))); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if allVisible(db, end) || allVisible(db, end+1) {
		t.Fatalf("blocks %d and %d, new pages, keep their stale map bits", end, end+1)
	}
	err = db.View(ctx, func(tx *Txn) error {
		for _, k := range keys {
			if ok, err := tx.Exists([]byte(k)); err != nil || ok {
				return fmt.Errorf("Exists(%s) = %v, %v for an uncommitted insert", k, ok, err)
			}
		}
		if n, err := tx.Count(nil, nil); err != nil || n != 10 {
			return fmt.Errorf("Count = %d, %v; want 10", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStaleMapPastHeapEnd: a map file copied back from a copy taken before
// vacuum cut the heap's tail holds bits for blocks past the heap's end,
// which no check of the heap's pages reads. The heap grows back into those
// blocks, and a change clears the bits only of a page marked all-visible,
// so Open must clear them before anything is written: otherwise the new
// pages start all-visible, and index-only reads count the keys deleted
// from them.
func TestStaleMapPastHeapEnd(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, o)
			putKeys(t, db, "a", 1000, 40)
			marked, err := markAllVisible(db)
			if err != nil || marked < 3 {
				t.Fatalf("marked %d pages (%v)", marked, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			saved := saveMapFiles(t, dir)
			db = openTest(t, dir, o)
			for i := range 1000 {
				mustDelete(t, db, fmt.Sprintf("a%06d", i))
			}
			st, err := db.Vacuum(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n := db.pool.NBlocks(); st.PagesTruncated == 0 || n != 0 {
				t.Fatalf("vacuum cut %d pages, the heap has %d: the test meant it cut to nothing", st.PagesTruncated, n)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			restoreMapFiles(t, dir, saved)
			// The check of the heap's pages done, so that the map's bits
			// are all trusted again.
			db, logged := reopenStale(t, dir, o, rebuild)
			putKeys(t, db, "b", 1000, 40)
			for i := 0; i < 1000; i += 2 {
				mustDelete(t, db, fmt.Sprintf("b%06d", i))
			}
			if scan, count := countKeys(t, db); scan != 500 || count != 500 {
				t.Fatalf("Scan finds %d keys, Count %d; want 500 both", scan, count)
			}
			err = db.View(context.Background(), func(tx *Txn) error {
				if ok, err := tx.Exists([]byte("b000000")); err != nil || ok {
					return fmt.Errorf("Exists(b000000) = %v, %v for a deleted key", ok, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if d := db.Damage(); d.MapBitsCleared != marked {
				t.Fatalf("Damage says %d blocks' map bits cleared (%q), want %d", d.MapBitsCleared, d.MapBits, marked)
			}
			if l := logged.String(); !strings.Contains(l, "visibility map bits set for heap blocks past the heap's end: cleared") {
				t.Fatalf("no warning logged: %s", l)
			}
			checkpointVerify(t, db)
		})
	}
}

// TestClearedMapBitsWrittenByIdleCheckpoint: the bits Open's check clears
// are logged by no record, so a checkpoint that finds nothing logged since
// the last one must still write them; otherwise the map file on disk stays
// wrong after SAVE, BGSAVE or a clean shutdown (mvkv verify reports it, and
// every Open clears the bits again). Nothing is read or written after Open
// here, so that no hint bit's full-page image makes the checkpoint busy.
func TestClearedMapBitsWrittenByIdleCheckpoint(t *testing.T) {
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	wrong := staleMapState(t, dir, o)
	db, _ := reopenStale(t, dir, o, false)
	if d := db.Damage(); d.MapBitsCleared != wrong {
		t.Fatalf("Damage says %d pages' map bits cleared, want %d", d.MapBitsCleared, wrong)
	}
	checkpointVerify(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, _ = reopenStale(t, dir, o, false)
	if d := db.Damage(); d.MapBitsCleared != 0 {
		t.Fatalf("the next Open cleared %d pages' map bits again (%s)", d.MapBitsCleared, d.MapBits)
	}
}

// TestStaleAllFrozenBit: a map file copied back from a copy in which a
// page was all-frozen, onto a heap whose page has since been changed and
// vacuumed again to all-visible only (a tuple on it is not frozen), passes
// the PD_ALL_VISIBLE check; its all-frozen bit is still wrong, and would
// have aggressive vacuum skip the page and advance the frozen horizon past
// that tuple's xmin. Open's check clears the all-frozen bit alone, with a
// warning, and after a checkpoint Verify finds the map right.
func TestStaleAllFrozenBit(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			dir := t.TempDir()
			freezeAll := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, VacuumFreezeMinAge: -1, VacuumFreezeTableAge: -1}
			db := openTest(t, dir, freezeAll)
			putKeys(t, db, "a", 1000, 40)
			if _, err := db.Vacuum(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			mapFile := filepath.Join(dir, "vm", "00000000")
			saved, err := os.ReadFile(mapFile)
			if err != nil {
				t.Fatal(err)
			}
			// Default freeze ages: the new version is left unfrozen.
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db = openTest(t, dir, o)
			if err := db.Update(context.Background(), func(tx *Txn) error {
				return tx.Put([]byte("a000000"), []byte("new"))
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Vacuum(context.Background()); err != nil {
				t.Fatal(err)
			}
			blk := headBlock(t, db, "a000000")
			if b, err := db.vm.TestStored(blk); err != nil || b != visibility.AllVisible {
				t.Fatalf("block %d after the vacuum: bits %v (%v), want all-visible only", blk, b, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if b := visibility.PageBits(saved, blk); b != visibility.AllVisible|visibility.AllFrozen {
				t.Fatalf("block %d in the saved map: bits %v, the test meant all-frozen", blk, b)
			}
			if err := os.WriteFile(mapFile, saved, 0o644); err != nil {
				t.Fatal(err)
			}
			db, logged := reopenStale(t, dir, o, rebuild)
			if b, err := db.vm.TestStored(blk); err != nil || b != visibility.AllVisible {
				t.Fatalf("block %d after the check: bits %v (%v), want all-visible only", blk, b, err)
			}
			if d := db.Damage(); d.MapBitsCleared != 1 || !strings.Contains(d.MapBits, fmt.Sprintf("block %d", blk)) {
				t.Fatalf("Damage: %d pages' map bits cleared (%q), want block %d's", d.MapBitsCleared, d.MapBits, blk)
			}
			if l := logged.String(); !strings.Contains(l, "visibility map all-frozen bits set for heap pages holding tuples not frozen: cleared") {
				t.Fatalf("no warning logged: %s", l)
			}
			checkpointVerify(t, db)
		})
	}
}

// TestClearFromSkipsStrayMapFile: a stray map file far past what the heap
// needs (vm/00000005) is not read by Open's clearing of the bits past the
// heap's end, which would otherwise read every map page before it.
func TestClearFromSkipsStrayMapFile(t *testing.T) {
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	putKeys(t, db, "a", 100, 40)
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "vm", "00000000"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vm", "00000005"), page, 0o644); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, o)
	defer db.Close()
	if d := db.Damage(); d.MapBitsCleared != 0 {
		t.Fatalf("Open cleared %d blocks' bits: it read the stray file", d.MapBitsCleared)
	}
	if st := db.vm.Stats(); st.PageReads > 2 {
		t.Fatalf("Open read %d map pages for a one-page map", st.PageReads)
	}
}

// TestVerifyWaitsForMapCheck: Verify right after an Open that took the
// index from its file waits for the background check of the map, whose
// cleared bits its checkpoint then writes, so that the report does not
// depend on which came first.
func TestVerifyWaitsForMapCheck(t *testing.T) {
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	staleMapState(t, dir, o)
	db := openTest(t, dir, o)
	defer db.Close()
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("Verify at once after Open: %v\n%s", err, rep)
	}
	if d := db.Damage(); d.ScanRunning || d.MapBitsCleared == 0 {
		t.Fatalf("after Verify: %+v", d)
	}
}

// TestBulkLoadClearsStaleMapBits: bits a map older than the heap holds for
// blocks past the heap's end are cleared when a bulk load makes them
// pages, as when a writer does, so that a snapshot older than the load,
// for which the load leaves the bits unset, does not count its keys from
// them.
func TestBulkLoadClearsStaleMapBits(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	end := db.pool.NBlocks()
	for b := end; b < end+8; b++ {
		if _, err := db.vm.Set(b, visibility.AllVisible, 0); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	old, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	if n, err := old.Count(nil, nil); err != nil || n != 0 {
		t.Fatalf("Count before the load: %d, %v", n, err)
	}
	st, err := db.BulkLoad(ctx, bulkRows(200, 100))
	if err != nil {
		t.Fatal(err)
	}
	if st.AllVisible || st.Pages < 2 || st.FirstBlock != end {
		t.Fatalf("load %+v: want pages from block %d, not marked all-visible (a snapshot older than it is open)", st, end)
	}
	for b := end; b < end+st.Pages; b++ {
		if allVisible(db, b) {
			t.Fatalf("block %d, loaded while an older snapshot was open, keeps its stale map bit", b)
		}
	}
	if n, err := old.Count(nil, nil); err != nil || n != 0 {
		t.Fatalf("a snapshot older than the load counts %d keys (%v); want 0", n, err)
	}
	if ok, err := old.Exists(bulkKey(0)); err != nil || ok {
		t.Fatalf("a snapshot older than the load: Exists = %v, %v", ok, err)
	}
}

// TestMapFromLaterCopy: a map file put back from a later copy of the
// directory (or copied after the WAL while a server wrote) holds pages
// whose LSN lies past this WAL's end. They read as pages with no bit set,
// with a warning naming the file and offset, as damaged map pages do;
// kept, their LSN failed the WAL flush before every write of them, so the
// first checkpoint after Open's check cleared a bit on one stopped the
// database taking writes.
func TestMapFromLaterCopy(t *testing.T) {
	dir, older := t.TempDir(), t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	putKeys(t, db, "a", 1000, 40)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, older)
	db = openTest(t, dir, o)
	putKeys(t, db, "b", 1000, 40)
	if marked, err := markAllVisible(db); err != nil || marked < 3 {
		t.Fatalf("marked %d pages (%v)", marked, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	restoreMapFiles(t, older, saveMapFiles(t, dir))
	db, logged := reopenStale(t, older, o, false)
	if l := logged.String(); !strings.Contains(l, filepath.Join(older, "vm", "00000000")+" at offset 0") || !strings.Contains(l, "is beyond the end of the WAL") {
		t.Fatalf("no warning naming the map page past the end of the WAL: %s", l)
	}
	if scan, count := countKeys(t, db); scan != 1000 || count != 1000 {
		t.Fatalf("Scan finds %d keys, Count %d; want 1000 both", scan, count)
	}
	mustDelete(t, db, "a000000")
	if err := db.Checkpoint(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := db.Failure(); err != nil {
		t.Fatalf("database stopped taking writes: %v", err)
	}
	mustPut(t, db, "c", "1")
}
