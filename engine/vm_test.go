package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/visibility"
	"mvkv/wal"
)

// markAllVisible stands in for vacuum: with no transaction running, it
// marks all-visible every initialized heap page whose tuples all have a
// committed xmin and no xmax. The caller must not hold a snapshot open
// (a REPEATABLE READ transaction that has read). It returns the pages it
// marked.
func markAllVisible(db *DB) (int, error) {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return 0, ErrClosed
	}
	if n := db.procs.active.Load(); n != 0 {
		return 0, fmt.Errorf("%d transactions running", n)
	}
	horizon := db.procs.next()
	marked := 0
	for blk := uint32(0); blk < db.pool.NBlocks(); blk++ {
		db.ckptInterlock.RLock()
		buf, err := db.pool.Get(blk)
		if err != nil {
			db.ckptInterlock.RUnlock()
			return marked, err
		}
		buf.Lock()
		ok, err := pageVisibleToAll(db, buf.Page())
		if err == nil && ok {
			if err = db.setPageAllVisible(buf, false, horizon); err == nil {
				marked++
			}
		}
		buf.Unlock()
		buf.Release()
		db.ckptInterlock.RUnlock()
		if err != nil {
			return marked, err
		}
	}
	return marked, nil
}

func pageVisibleToAll(db *DB, page []byte) (bool, error) {
	if heap.IsNew(page) || heap.PageFlags(page)&heap.PDAllVisible != 0 {
		return false, nil
	}
	for s := 0; s < heap.NumSlots(page); s++ {
		raw, err := heap.Tuple(page, uint16(s))
		if errors.Is(err, heap.ErrBadSlot) {
			continue
		}
		if err != nil {
			return false, err
		}
		h, _, _, err := heap.DecodeTuple(raw)
		if err != nil {
			return false, err
		}
		if h.Xmax != 0 {
			return false, nil
		}
		if ok, err := db.didCommit(h.Xmin); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func openMem(t testing.TB, m *vfs.MemFS, o Options) *DB {
	t.Helper()
	o.FS = m
	if o.SharedBuffers == 0 {
		o.SharedBuffers = 2 << 20
	}
	if o.WALSegmentSize == 0 {
		o.WALSegmentSize = 1 << 20
	}
	o.CheckpointTimeout = -1
	db, err := Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func putKeys(t testing.TB, db *DB, prefix string, n, valLen int) {
	t.Helper()
	err := db.Update(context.Background(), func(tx *Txn) error {
		for i := 0; i < n; i++ {
			if err := tx.Put([]byte(fmt.Sprintf("%s%06d", prefix, i)), []byte(strings.Repeat("v", valLen))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// headBlock returns the heap block of key's newest version.
func headBlock(t testing.TB, db *DB, key string) uint32 {
	t.Helper()
	e := db.idx.get([]byte(key))
	if e == nil {
		t.Fatalf("no index entry for %q", key)
	}
	return e.headTID().Block
}

// allVisible reports whether the map holds blk's all-visible bit, whether
// or not Open's check has passed the block yet.
func allVisible(db *DB, blk uint32) bool {
	b, _ := db.vm.TestStored(blk)
	return b&visibility.AllVisible != 0
}

// countKeys counts visible keys with Scan and with Count; t nil means an
// error counts as -1 for both.
func countKeys(t testing.TB, db *DB) (scan, count int) {
	if t != nil {
		t.Helper()
	}
	err := db.View(context.Background(), func(tx *Txn) error {
		scan, count = 0, 0
		if err := tx.Scan(nil, nil, func(k, v []byte) bool { scan++; return true }); err != nil {
			return err
		}
		var err error
		count, err = tx.Count(nil, nil)
		return err
	})
	if err != nil && t != nil {
		t.Fatal(err)
	}
	if err != nil {
		return -1, -1
	}
	return scan, count
}

func TestVisibilityMapSetAndClear(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	putKeys(t, db, "a", 600, 40)
	marked, err := markAllVisible(db)
	if err != nil || marked < 3 {
		t.Fatalf("marked %d pages: %v", marked, err)
	}
	for _, k := range []string{"a000000", "a000300", "a000599"} {
		if !allVisible(db, headBlock(t, db, k)) {
			t.Fatalf("page of %s not all-visible after marking", k)
		}
	}
	if again, _ := markAllVisible(db); again != 0 {
		t.Fatalf("marking twice marked %d pages again", again)
	}
	mustVerify(t, db)
	if s := db.Stats(); s.VisibilityMap.BitsSet != uint64(marked) {
		t.Fatalf("VMBitsSet %d, marked %d", s.VisibilityMap.BitsSet, marked)
	}

	updBlk, delBlk := headBlock(t, db, "a000000"), headBlock(t, db, "a000300")
	keepBlk := headBlock(t, db, "a000599")
	if updBlk == delBlk || delBlk == keepBlk || updBlk == keepBlk {
		t.Fatalf("keys share pages %d %d %d; the test needs three", updBlk, delBlk, keepBlk)
	}
	err = db.Update(context.Background(), func(tx *Txn) error {
		if err := tx.Put([]byte("a000000"), []byte("new")); err != nil {
			return err
		}
		return tx.Delete([]byte("a000300"))
	})
	if err != nil {
		t.Fatal(err)
	}
	newBlk := headBlock(t, db, "a000000")
	for _, b := range []uint32{updBlk, delBlk, newBlk} {
		if allVisible(db, b) {
			t.Fatalf("block %d still all-visible after a change on it", b)
		}
	}
	if !allVisible(db, keepBlk) {
		t.Fatalf("untouched block %d lost its bit", keepBlk)
	}
	mustVerify(t, db)
	if scan, count := countKeys(t, db); scan != 599 || count != 599 {
		t.Fatalf("Scan saw %d keys, Count %d; want 599", scan, count)
	}
	db.Close()

	db = openMem(t, m, Options{})
	defer db.Close()
	if !allVisible(db, keepBlk) || allVisible(db, updBlk) || allVisible(db, delBlk) {
		t.Fatal("bits did not survive close and reopen as they were")
	}
	mustVerify(t, db)
}

// TestVisibilityMapRedo: the bits set and cleared since the last
// checkpoint come back from the WAL alone.
func TestVisibilityMapRedo(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	putKeys(t, db, "a", 600, 40)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	keep, upd := headBlock(t, db, "a000599"), headBlock(t, db, "a000000")
	err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("a000000"), []byte("x")) })
	if err != nil {
		t.Fatal(err)
	}
	crash := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()

	db = openMem(t, crash, Options{})
	defer db.Close()
	if !allVisible(db, keep) {
		t.Fatalf("HEAP2_VISIBLE for block %d not redone", keep)
	}
	if allVisible(db, upd) {
		t.Fatalf("the update's clear of block %d not redone", upd)
	}
	mustVerify(t, db)
	if scan, count := countKeys(t, db); scan != 600 || count != 600 {
		t.Fatalf("Scan %d, Count %d", scan, count)
	}
}

func TestVerifyFindsWrongBit(t *testing.T) {
	db := openMem(t, vfs.NewMemFS(), Options{})
	defer db.Close()
	putKeys(t, db, "a", 10, 10)
	err := db.Update(context.Background(), func(tx *Txn) error { return tx.Delete([]byte("a000003")) })
	if err != nil {
		t.Fatal(err)
	}
	blk := headBlock(t, db, "a000003")
	if _, err := db.vm.Set(blk, visibility.AllVisible, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("heap block %d is all-visible but the page lacks PD_ALL_VISIBLE", blk)
	if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), want) {
		t.Fatalf("Verify did not report the bit: %v", rep.Problems)
	}
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "committed") {
		t.Fatalf("Verify did not report the deleted tuple: %v", rep.Problems)
	}
}

func TestHeap2VisibleRecord(t *testing.T) {
	r := visibleRecord{Block: 42, Bits: visibility.AllVisible | visibility.AllFrozen, CutoffXid: 1 << 40}
	got, err := decodeVisible(encodeVisible(r))
	if err != nil || got != r {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, bad := range [][]byte{
		nil,
		encodeVisible(r)[:12],
		append(encodeVisible(r), 0),
		encodeVisible(visibleRecord{Block: noBlock, Bits: visibility.AllVisible}),
		encodeVisible(visibleRecord{Block: 1, Bits: visibility.AllFrozen}),
		encodeVisible(visibleRecord{Block: 1, Bits: 0}),
		encodeVisible(visibleRecord{Block: 1, Bits: 0x07}),
	} {
		if _, err := decodeVisible(bad); !errors.Is(err, errBadRecord) {
			t.Errorf("decodeVisible(%x) = %v", bad, err)
		}
	}
	d := describeRecord(wal.Record{LSN: 100, Type: recHeap2Visible, Data: encodeVisible(r)})
	if !strings.Contains(d, "HEAP2_VISIBLE") || !strings.Contains(d, "block 42 all-visible all-frozen cutoff xid 1099511627776") {
		t.Fatalf("describeRecord: %s", d)
	}
	d = describeRecord(wal.Record{Type: recHeapUpdate, Flags: flagAllVisibleCleared | flagNewAllVisibleCleared,
		Data: encodeUpdate(heap.TID{Block: 1}, heap.TID{Block: 2}, heap.AppendTuple(nil, heap.TupleHeader{Xmin: 5, Prev: heap.InvalidTID}, []byte("k"), nil))})
	if !strings.Contains(d, " ALL_VISIBLE_CLEARED NEW_ALL_VISIBLE_CLEARED") {
		t.Fatalf("describeRecord of flags: %s", d)
	}
}

func FuzzDecodeVisible(f *testing.F) {
	f.Add(encodeVisible(visibleRecord{Block: 3, Bits: visibility.AllVisible, CutoffXid: 9}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeVisible(data)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error does not wrap errBadRecord: %v", err)
			}
			return
		}
		if r.Bits&visibility.AllVisible == 0 || r.Block == noBlock {
			t.Fatalf("accepted %+v", r)
		}
		if string(encodeVisible(r)) != string(data) {
			t.Fatalf("re-encoding differs")
		}
		describeRecord(wal.Record{Type: recHeap2Visible, Data: data})
	})
}

func TestVisibilityMapOption(t *testing.T) {
	_, err := Open("/db", Options{FS: vfs.NewMemFS(), VisibilityMap: "sometimes"})
	if !errors.Is(err, ErrInvalidSetting) || !strings.Contains(err.Error(), `"visibility_map": "sometimes": want crash-safe or unlogged`) {
		t.Fatalf("Open with a bad mode: %v", err)
	}
	db := openMem(t, vfs.NewMemFS(), Options{VisibilityMap: VisibilityMapUnlogged})
	defer db.Close()
	putKeys(t, db, "a", 100, 10)
	before := db.Stats()
	if n, err := markAllVisible(db); err != nil || n == 0 {
		t.Fatalf("marked %d: %v", n, err)
	}
	if d := db.Stats().Sub(before); d.WAL.Records != 0 || d.VisibilityMap.BitsSet == 0 {
		t.Fatalf("unlogged marking wrote %d WAL records, set %d bits", d.WAL.Records, d.VisibilityMap.BitsSet)
	}
	mustVerify(t, db)
}

// checkIndexOnly compares Exists, ScanKeys and Count with Scan and Get in
// tx, over the keys in universe and the ranges given.
func checkIndexOnly(t *testing.T, tx *Txn, universe []string) {
	t.Helper()
	for _, r := range [][2][]byte{{nil, nil}, {[]byte("a000010"), []byte("a000050")}, {[]byte("b"), nil}} {
		var want, got []string
		if err := tx.Scan(r[0], r[1], func(k, v []byte) bool { want = append(want, string(k)); return true }); err != nil {
			t.Fatal(err)
		}
		if err := tx.ScanKeys(r[0], r[1], func(k []byte) bool { got = append(got, string(k)); return true }); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("range %q-%q: ScanKeys %v, Scan %v", r[0], r[1], got, want)
		}
		n, err := tx.Count(r[0], r[1])
		if err != nil || n != len(want) {
			t.Fatalf("range %q-%q: Count %d (%v), Scan %d", r[0], r[1], n, err, len(want))
		}
	}
	for _, k := range universe {
		_, err := tx.Get([]byte(k))
		ok, xerr := tx.Exists([]byte(k))
		if xerr != nil || ok != (err == nil) {
			t.Fatalf("Exists(%s) = %v, %v; Get error %v", k, ok, xerr, err)
		}
	}
}

func TestIndexOnlyReads(t *testing.T) {
	db := openMem(t, vfs.NewMemFS(), Options{})
	defer db.Close()
	ctx := context.Background()
	putKeys(t, db, "a", 300, 40)
	universe := []string{"a000000", "a000005", "a000007", "a000010", "a000299", "b000001", "c000001", "zzz"}
	read := func() {
		t.Helper()
		tx, _ := db.Begin(ctx, TxnOptions{})
		checkIndexOnly(t, tx, universe)
		tx.Rollback()
	}
	read()
	if s := db.Stats(); s.Index.AllVisible != 0 || s.Index.HeapFetches == 0 {
		t.Fatalf("before marking: %d from the map, %d heap fetches", s.Index.AllVisible, s.Index.HeapFetches)
	}
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	before := db.Stats()
	read()
	if d := db.Stats().Sub(before); d.Index.AllVisible == 0 || d.Index.HeapFetches != 0 {
		t.Fatalf("after marking: %d from the map, %d heap fetches", d.Index.AllVisible, d.Index.HeapFetches)
	}

	// A writer that has not committed: readers must not see its insert,
	// update or delete, even on pages that were all-visible.
	w, _ := db.Begin(ctx, TxnOptions{})
	for _, op := range []error{w.Put([]byte("b000001"), []byte("x")), w.Put([]byte("a000005"), []byte("y")), w.Delete([]byte("a000007"))} {
		if op != nil {
			t.Fatal(op)
		}
	}
	read()
	checkIndexOnly(t, w, universe) // its own writes
	rr, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if _, err := rr.Count(nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	read()
	checkIndexOnly(t, rr, universe) // a snapshot from before the commit
	if ok, _ := rr.Exists([]byte("a000007")); !ok {
		t.Fatal("a REPEATABLE READ snapshot lost a key deleted after it")
	}
	rr.Rollback()

	// Writes and rollbacks in one transaction, then all marked again.
	w, _ = db.Begin(ctx, TxnOptions{})
	w.Put([]byte("c000001"), []byte("z"))
	w.Delete([]byte("a000010"))
	checkIndexOnly(t, w, universe)
	w.Rollback()
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	read()
	tx, _ := db.Begin(ctx, TxnOptions{})
	defer tx.Rollback()
	seen := 0
	tx.ScanKeys(nil, nil, func([]byte) bool { seen++; return seen < 3 })
	if seen != 3 {
		t.Fatalf("ScanKeys went on after fn returned false: %d calls", seen)
	}
	if _, err := tx.Exists(nil); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Exists(nil) = %v", err)
	}
}

// BenchmarkCount counts 100 000 keys (pgbench's accounts at scale 1) with
// every heap page all-visible and with the map cleared.
func BenchmarkCount(b *testing.B) {
	for _, marked := range []bool{true, false} {
		name := "vm=cleared"
		if marked {
			name = "vm=all-visible"
		}
		b.Run(name, func(b *testing.B) {
			db := openMem(b, vfs.NewMemFS(), Options{SharedBuffers: 64 << 20, WALSegmentSize: 16 << 20})
			defer db.Close()
			const n = 100000
			putKeys(b, db, "a", n, 84)
			if marked {
				if _, err := markAllVisible(db); err != nil {
					b.Fatal(err)
				}
			}
			if err := db.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			tx, _ := db.Begin(context.Background(), TxnOptions{})
			defer tx.Rollback()
			before := db.Stats()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if c, err := tx.Count(nil, nil); err != nil || c != n {
					b.Fatalf("Count = %d, %v", c, err)
				}
			}
			b.StopTimer()
			d := db.Stats().Sub(before)
			b.ReportMetric(float64(d.Index.HeapFetches)/float64(b.N), "heapfetches/op")
		})
	}
}

// TestIndexOnlyUnderConcurrentWrites: while writers insert, update and
// delete keys on all-visible pages (clearing their bits), a REPEATABLE
// READ reader's Count, ScanKeys and Exists must agree with its Scan, which
// reads every version from the heap, at the same snapshot.
func TestIndexOnlyUnderConcurrentWrites(t *testing.T) {
	db := openMem(t, vfs.NewMemFS(), Options{})
	defer db.Close()
	putKeys(t, db, "a", 2000, 30)
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	iters := 150
	if raceEnabled {
		iters = 40
	}
	done := make(chan error, 4)
	for w := 0; w < 2; w++ {
		go func(w int) {
			var err error
			for i := 0; i < iters && err == nil; i++ {
				err = db.Update(ctx, func(tx *Txn) error {
					k := fmt.Sprintf("a%06d", (i*37+w*250)%500) // pages of the last 1500 keys stay all-visible
					if err := tx.Put([]byte(fmt.Sprintf("b%d-%06d", w, i)), []byte("new")); err != nil {
						return err
					}
					if i%3 == 0 {
						return tx.Delete([]byte(k))
					}
					return tx.Put([]byte(k), []byte("upd"))
				})
			}
			done <- err
		}(w)
	}
	for r := 0; r < 2; r++ {
		go func() {
			var err error
			for i := 0; i < iters/3 && err == nil; i++ {
				err = db.View(ctx, func(tx *Txn) error {
					var scan, keys []string
					if err := tx.Scan(nil, nil, func(k, _ []byte) bool { scan = append(scan, string(k)); return true }); err != nil {
						return err
					}
					n, err := tx.Count(nil, nil)
					if err != nil {
						return err
					}
					if err := tx.ScanKeys(nil, nil, func(k []byte) bool { keys = append(keys, string(k)); return true }); err != nil {
						return err
					}
					if n != len(scan) || strings.Join(keys, ",") != strings.Join(scan, ",") {
						return fmt.Errorf("at one snapshot: Scan %d keys, Count %d, ScanKeys %d", len(scan), n, len(keys))
					}
					for _, k := range []string{"a000000", "a000037", "b0-000001", "b1-000002"} {
						_, gerr := tx.Get([]byte(k))
						if ok, err := tx.Exists([]byte(k)); err != nil || ok != (gerr == nil) {
							return fmt.Errorf("Exists(%s) = %v, %v; Get: %v", k, ok, err, gerr)
						}
					}
					return nil
				})
			}
			done <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if s := db.Stats(); s.Index.AllVisible == 0 || s.VisibilityMap.BitsCleared == 0 {
		t.Fatalf("the test did not exercise the map: %d fast lookups, %d bits cleared", s.Index.AllVisible, s.VisibilityMap.BitsCleared)
	}
}

// TestIndexOnlyBitClearedMidScan: a key's new version lands, mid-scan, on
// the very page whose set bit the scan has just used for the key before
// it. The scan must not reuse that bit for the moved key: its snapshot
// sees the key as deleted.
func TestIndexOnlyBitClearedMidScan(t *testing.T) {
	db := openMem(t, vfs.NewMemFS(), Options{})
	defer db.Close()
	ctx := context.Background()
	var loader uint64
	err := db.Update(ctx, func(tx *Txn) error {
		if err := tx.Put([]byte("k2"), []byte("old")); err != nil {
			return err
		}
		for i := 0; i < 300; i++ {
			if err := tx.Put([]byte(fmt.Sprintf("f%04d", i)), []byte(strings.Repeat("x", 40))); err != nil {
				return err
			}
		}
		loader = tx.XID()
		if err := tx.Put([]byte("k1a"), []byte("a")); err != nil {
			return err
		}
		return tx.Put([]byte("k1b"), []byte("b"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("k2")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := markAllVisible(db); err != nil {
		t.Fatal(err)
	}
	last := headBlock(t, db, "k1a")
	if headBlock(t, db, "k2") == last || !allVisible(db, last) {
		t.Fatal("setup: k2 must be on another page, and k1a's page all-visible")
	}

	reader, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	defer reader.Rollback()
	if _, err := reader.Exists([]byte("k1a")); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	var seen []string
	moved := false
	err = reader.ScanKeys([]byte("k"), nil, func(k []byte) bool {
		seen = append(seen, string(k))
		if moved {
			return true
		}
		moved = true
		// Re-insert k2 from a transaction whose xid picks the same
		// insert target as the loader, so the new version lands on k1a's
		// page; others roll back.
		for i := 0; i < 64; i++ {
			w, _ := db.Begin(ctx, TxnOptions{})
			if err := w.Put([]byte("k2"), []byte("new")); err != nil {
				t.Error(err)
				return false
			}
			if w.XID()%nInsertTargets != loader%nInsertTargets {
				w.Rollback()
				continue
			}
			if err := w.Commit(); err != nil {
				t.Error(err)
			}
			if headBlock(t, db, "k2") != last {
				t.Errorf("k2's new version is on block %d, not %d", headBlock(t, db, "k2"), last)
			}
			return true
		}
		t.Error("no transaction got the loader's insert target")
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(seen, ",") != "k1a,k1b" {
		t.Fatalf("ScanKeys at a snapshot from before k2 came back saw %v", seen)
	}
}

// vacuumedWithVMBits returns a database (autovacuum off) of 200 keys that
// vacuum has marked all-visible in the map, and its directory.
func vacuumedWithVMBits(t *testing.T) (string, *DB) {
	t.Helper()
	dir := t.TempDir()
	off := false
	db := openTest(t, dir, Options{Autovacuum: &off})
	putKeys(t, db, "a", 200, 100)
	mustVacuum(t, db)
	if db.Stats().VisibilityMap.BitsSet == 0 {
		t.Fatal("vacuum set no visibility map bit")
	}
	return dir, db
}

// A visibility map file cut short in the middle of a page opens (the
// partial page reads as one never written) and its checksums pass, but the
// bits it held are gone: Verify reports the file, its size and the offset
// of the page cut short.
func TestVerifyFindsTruncatedVM(t *testing.T) {
	dir, db := vacuumedWithVMBits(t)
	off := false
	mustVerify(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, vmDir, "00000000")
	if err := os.Truncate(name, heap.PageSize/2); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: &off})
	defer db.Close()
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("visibility map: %s is %d bytes, not a whole number of %d-byte pages: the page at offset 0", name, heap.PageSize/2, heap.PageSize)
	if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), want) {
		t.Fatalf("Verify of a map file cut short: %v, want a problem containing %q", rep.Problems, want)
	}
	if errs := db.vm.CheckFiles(); len(errs) != 1 || !errors.Is(errs[0], visibility.ErrCorrupt) || !errors.Is(errs[0], heap.ErrCorrupt) {
		t.Fatalf("CheckFiles: %v, want one error matching visibility.ErrCorrupt and heap.ErrCorrupt", errs)
	}
}

// A visibility map file removed, or cut to a whole number of pages (here
// none), beside heap pages that vacuum marked all-visible: no page fails
// a check and every read works, so only the heap's PD_ALL_VISIBLE flags
// show the loss. Open succeeds (the bits are a hint: a clear one only
// sends reads and vacuum to the heap); Verify reports the file, its
// length and the offset of the map page that is gone, with the heap pages
// whose bits it held, until vacuum sets them again.
func TestVerifyFindsLostVMFile(t *testing.T) {
	for _, c := range []struct {
		name string
		cut  func(name string) error
		want string
	}{
		{"removed", os.Remove, "%s is missing, and with it the map page at offset 0"},
		{"cut to no page", func(name string) error { return os.Truncate(name, 0) }, "%s is 0 bytes, ending before the map page at offset 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, db := vacuumedWithVMBits(t)
			off := false
			nblocks := db.storage.NBlocks()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(dir, vmDir, "00000000")
			if err := c.cut(name); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, dir, Options{Autovacuum: &off})
			defer db.Close()
			if v, ok := get(t, db, "a000001"); !ok || len(v) != 100 {
				t.Fatalf("a000001 = %q, %v", v, ok)
			}
			rep, err := db.Verify()
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf(c.want, name)
			got := strings.Join(rep.Problems, "\n")
			if !strings.Contains(got, want) || !strings.Contains(got, fmt.Sprintf("%d heap pages have PD_ALL_VISIBLE", nblocks)) {
				t.Fatalf("Verify: %v; want a problem containing %q and naming the %d heap pages", rep.Problems, want, nblocks)
			}
			if len(rep.Problems) != 1 {
				t.Fatalf("Verify: %d problems, want 1: %v", len(rep.Problems), rep.Problems)
			}
			mustVacuum(t, db)
			mustVerify(t, db)
			if db.Stats().VisibilityMap.BitsSet == 0 {
				t.Fatal("vacuum set no bit again")
			}
		})
	}
}

// A file named as a visibility map file but lying past every map page the
// heap needs (one heap of 200 keys needs one page, in 00000000) was put
// there: nothing reads it, so Open and the database work as without it,
// as with a stranger in the WAL directory, and Verify names it as a file
// that is not the map's (not as a page failing its checksum, which is what
// a copy of a map page reads as at another block number), without reading
// the billion map pages between.
func TestVerifyStrayVMFile(t *testing.T) {
	for _, c := range []struct {
		name, file string
		data       func(dir string) []byte
	}{
		{"copy of a map page", "00000005", func(dir string) []byte {
			b, err := os.ReadFile(filepath.Join(dir, vmDir, "00000000"))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"zeros", "00000001", func(string) []byte { return make([]byte, heap.PageSize) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, db := vacuumedWithVMBits(t)
			off := false
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			stray := filepath.Join(dir, vmDir, c.file)
			if err := os.WriteFile(stray, c.data(dir), 0o644); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, dir, Options{Autovacuum: &off})
			defer db.Close()
			mustPut(t, db, "a000001", "new")
			mustVacuum(t, db)
			rep, err := db.Verify()
			if err != nil {
				t.Fatal(err)
			}
			want := "visibility map: " + stray + " is not a file of this map: it would hold map pages from "
			if len(rep.Problems) != 1 || !strings.HasPrefix(rep.Problems[0], want) || !strings.Contains(rep.Problems[0], "past the 1 the heap's") {
				t.Fatalf("Verify with %s: %q; want one problem starting %q and saying it lies past the 1 map page the heap needs", stray, rep.Problems, want)
			}
			strays, pages := db.vm.StrayFiles(db.storage.NBlocks())
			if len(strays) != 1 || !errors.Is(strays[0], visibility.ErrStrayFile) || pages != 1 {
				t.Fatalf("StrayFiles: %v, %d pages; want one error matching ErrStrayFile and 1 page", strays, pages)
			}
			if err := os.Remove(stray); err != nil {
				t.Fatal(err)
			}
			mustVerify(t, db)
		})
	}
}

// A flipped bit in a map page of a cleanly closed database: Open succeeds,
// the page is read as one with no bit set (with a warning naming the file
// and offset), reads and writes of the keys it covers work, Verify reports
// the damage on disk until vacuum sets the bits again and a checkpoint
// writes the page whole.
func TestDamagedVMPageReadsAsNoBits(t *testing.T) {
	dir, db := vacuumedWithVMBits(t)
	off := false
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, vmDir, "00000000")
	flipFileBits(t, name, heap.PageHeaderSize, 0x04)

	var logged strings.Builder
	db, err := Open(dir, Options{Autovacuum: &off, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open with a damaged map page: %v", err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("a000001"), []byte("new")) }); err != nil {
		t.Fatalf("write to a heap page the damaged map page covers: %v", err)
	}
	err = db.View(ctx, func(tx *Txn) error {
		v, err := tx.Get([]byte("a000002"))
		if err == nil && len(v) != 100 {
			err = fmt.Errorf("a000002 = %q", v)
		}
		return err
	})
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), name+" at offset 0") {
		t.Fatalf("no warning naming %s at offset 0 in the log:\n%s", name, logged.String())
	}
	if db.Stats().VisibilityMap.PagesZeroed != 1 {
		t.Fatalf("PagesZeroed = %d, want 1", db.Stats().VisibilityMap.PagesZeroed)
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), name+" at offset 0") {
		t.Fatalf("Verify before the page is written again: %v, want the damage at %s offset 0", rep.Problems, name)
	}
	mustVacuum(t, db)
	mustVerify(t, db)
}

// TestExistsTakesTheSnapshot checks that Exists, as a REPEATABLE READ
// transaction's first statement, takes the transaction's snapshot even when
// the key is absent: a key another transaction inserts afterwards stays
// invisible to the transaction's later reads, as after a Get that found
// nothing.
func TestExistsTakesTheSnapshot(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if ok, err := tx.Exists([]byte("k")); err != nil || ok {
		t.Fatalf("Exists(k) = %v, %v; want false", ok, err)
	}
	mustPut(t, db, "k", "v")
	if ok, err := tx.Exists([]byte("k")); err != nil || ok {
		t.Errorf("Exists(k) after another transaction inserted it = %v, %v; want false (the first statement's snapshot)", ok, err)
	}
	if v, err := tx.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(k) = %q, %v; want ErrNotFound (the first statement's snapshot)", v, err)
	}
}

// TestVacuumClearsWrongBit: a visibility map bit set on a page that holds
// a deleted version (damage, or a bug) makes Count answer from the map and
// count the deleted key; an aggressive vacuum finds the page not
// all-visible, clears the bit, and Count and Verify are right again.
func TestVacuumClearsWrongBit(t *testing.T) {
	db := openMem(t, vfs.NewMemFS(), Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1})
	defer db.Close()
	putKeys(t, db, "a", 10, 10)
	// An open snapshot keeps the deleted version needed, so that no
	// pruning removes it and the page cannot become all-visible.
	ctx := context.Background()
	s, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Rollback()
	if _, err := s.Get([]byte("a000000")); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("a000003")) }); err != nil {
		t.Fatal(err)
	}
	blk := headBlock(t, db, "a000003")
	if _, err := db.vm.Set(blk, visibility.AllVisible, 0); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		n := 0
		if err := db.View(ctx, func(tx *Txn) error {
			var err error
			n, err = tx.Count(nil, nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 10 {
		t.Fatalf("Count with the wrong bit: %d; want 10, the map answering for the page (else this test shows nothing)", n)
	}
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Aggressive {
		t.Fatal("the run was not aggressive")
	}
	if av, _ := db.pageAllVisible(blk); av {
		t.Fatal("the wrong bit is still set after an aggressive vacuum")
	}
	if n := count(); n != 9 {
		t.Errorf("Count after vacuum: %d, want 9", n)
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Errorf("Verify after vacuum: %v %v", err, rep.Problems)
	}
}

// TestVacuumSecondPassSetsBits: a page whose only versions no snapshot
// can see are deleted keys' heads becomes all-visible in the run that
// frees them (pass 2, as PostgreSQL's lazy_vacuum_heap_page), not in the
// run after, and the bits survive a crash. (A page a writer changes
// between the passes keeps its bits clear: the snapshot model stress test
// and the index-only tests under concurrent writers check the bits that
// readers rely on.)
func TestVacuumSecondPassSetsBits(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	putKeys(t, db, "a", 600, 40)
	if err := db.Update(context.Background(), func(tx *Txn) error {
		for i := 0; i < 600; i += 2 {
			if err := tx.Delete([]byte(fmt.Sprintf("a%06d", i))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := db.Vacuum(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nblocks := db.pool.NBlocks()
	for blk := uint32(0); blk < nblocks; blk++ {
		if !allVisible(db, blk) {
			t.Fatalf("block %d of %d not all-visible after one vacuum (%+v)", blk, nblocks, st)
		}
	}
	if st.PagesAllVisible != uint64(nblocks) {
		t.Fatalf("PagesAllVisible %d, want %d", st.PagesAllVisible, nblocks)
	}
	mustVerify(t, db)
	if scan, count := countKeys(t, db); scan != 300 || count != 300 {
		t.Fatalf("Scan saw %d keys, Count %d; want 300", scan, count)
	}
	// A crash copy recovers the bits from the WAL.
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()
	db = openMem(t, crashed, Options{})
	defer db.Close()
	for blk := uint32(0); blk < nblocks; blk++ {
		if !allVisible(db, blk) {
			t.Fatalf("block %d lost its bit in a crash", blk)
		}
	}
	mustVerify(t, db)
}
