package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// TestChunkDebtSurvivesCrash: vacuum's first pass removes an overwritten
// out-of-line version, and the machine stops before its second pass frees
// the version's chunks (a copy of the live directory, as a crash that the
// operating system survives leaves it). The copy opens from its index file,
// and its next vacuum must free those chunks: the pruning record listed
// them, or the checkpoint's index file did. Before, the chunks stayed on
// the heap, named by nothing, until an Open without the index file.
func TestChunkDebtSurvivesCrash(t *testing.T) {
	for _, c := range []struct {
		name string
		// stopped: the run is canceled after its first pass removed the
		// version; else the copy is taken between its passes.
		stopped, checkpoint bool
	}{
		{"stopped run", true, false},
		{"stopped run, then a checkpoint", true, true},
		{"between the passes", false, false},
		{"between the passes, after a checkpoint", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, crash := t.TempDir(), t.TempDir()
			opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, opts)
			defer db.Close()
			mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
			old := db.idx.get([]byte("big")).headTID()
			mustPut(t, db, "big", "small now")
			takeCopy := func() {
				if c.checkpoint {
					if err := db.Checkpoint(); err != nil {
						t.Error(err)
					}
				}
				if err := db.wal.FlushAll(); err != nil {
					t.Error(err)
				}
				copyDir(t, dir, crash)
			}
			if c.stopped {
				// Err is asked before each page of pass 1: cancel once
				// the old version's page is done.
				ctx := &cancelAfter{Context: context.Background()}
				ctx.n.Store(int64(old.Block) + 1)
				if st, err := db.Vacuum(ctx); !errors.Is(err, context.Canceled) || st.TuplesRemoved != 1 {
					t.Fatalf("vacuum: %+v, %v; want one version removed, then context.Canceled", st, err)
				}
				takeCopy()
			} else {
				ctx := &hookCtx{Context: context.Background(), n: int64(db.pool.NBlocks()) + 1, fn: takeCopy}
				if st, err := db.Vacuum(ctx); err != nil || st.ChunksRemoved != 3 {
					t.Fatalf("vacuum: %+v, %v; want its 3 chunks freed", st, err)
				}
				mustHaveRun(t, ctx)
			}
			if t.Failed() {
				return
			}
			if n := chunkTuples(t, db); c.stopped && n != 3 {
				t.Fatalf("%d chunk tuples after the stopped run; want its 3", n)
			}

			cdb := openTest(t, crash, opts)
			defer cdb.Close()
			if ri := cdb.Recovery(); !ri.IndexFromFile {
				t.Fatalf("the copy rebuilt its index (%q): the test is about an Open from the index file", ri.IndexRebuildReason)
			}
			if n := chunkTuples(t, cdb); n != 3 {
				t.Fatalf("%d chunk tuples in the copy; want the 3 the first pass listed", n)
			}
			if owed := cdb.Stats().Vacuum.ChunksOwed; owed != 3 {
				t.Fatalf("the copy's vacuum owes %d chunks, want 3", owed)
			}
			st, err := cdb.Vacuum(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n := chunkTuples(t, cdb); n != 0 || st.ChunksRemoved != 3 {
				t.Fatalf("vacuum of the copy freed %d chunks, %d left: the chunks the crash came between leaked", st.ChunksRemoved, n)
			}
			if owed := cdb.Stats().Vacuum.ChunksOwed; owed != 0 {
				t.Fatalf("after its vacuum, the copy's vacuum owes %d chunks", owed)
			}
			if v, _ := get(t, cdb, "big"); v != "small now" {
				t.Fatalf("big = %q", v)
			}
			mustVerify(t, cdb)
		})
	}
}

// TestChunkDebtStaleEntryLeftAlone: a chunk in vacuum's debt whose slot was
// freed and then taken by another value's chunk (as a crash after the
// index file listed it, and before Open, would leave it) is not freed: its
// xmin no longer matches. The debt forgets it once a run has looked.
func TestChunkDebtStaleEntryLeftAlone(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, opts)
	mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
	var ctids []heap.TID
	var xmin uint64
	eachHeapTuple(t, db, func(tid heap.TID, raw []byte) {
		h, key, val, err := heap.DecodeTuple(raw)
		if err != nil || string(key) != "big" || h.Infomask&heap.External == 0 || h.Infomask&heap.Chunk != 0 {
			return
		}
		if ctids, err = chunkTIDs(val); err != nil {
			t.Fatal(err)
		}
		xmin = h.Xmin
	})
	if len(ctids) == 0 {
		t.Fatal("no out-of-line version of big")
	}
	// An entry for the live value's first chunk, with another xmin: a
	// chunk of an older value that slot held once.
	db.vac.debt.add([]chunkID{{ctids[0], xmin - 1}})
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	// Close looks at the debt too, and finds the slot taken.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := db.vac.debt.len(); n != 0 {
		t.Fatalf("the debt still holds %d chunks after Close found the slot taken", n)
	}
	db = openTest(t, crash, opts)
	defer db.Close()
	if n := db.vac.debt.len(); n != 1 {
		t.Fatalf("the debt after Open holds %d chunks, want the 1 the index file carried", n)
	}
	if st, err := db.Vacuum(context.Background()); err != nil || st.ChunksRemoved != 0 {
		t.Fatalf("vacuum: %+v, %v; want nothing freed", st, err)
	}
	if n := db.vac.debt.len(); n != 0 {
		t.Fatalf("the debt still holds %d chunks after a run found the slot taken", n)
	}
	if got, _ := get(t, db, "big"); got != string(patterned(3*chunkSize, 1)) {
		t.Fatal("the live value changed")
	}
	mustVerify(t, db)
}

// TestIndexFileVersion3Read: an index file of format version 3 (version 4
// without vacuum's debt) is used as one with an empty debt, so that an
// upgrade does not rebuild the index from the heap.
func TestIndexFileVersion3Read(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, opts)
	for i := 0; i < 50; i++ {
		mustPut(t, db, string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, indexFileName)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(b[60:]) != 0 {
		t.Fatal("the file carries a debt: the test needs one without")
	}
	rewrite := func(version uint32, reserved uint32) {
		t.Helper()
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[8:], version)
		binary.LittleEndian.PutUint32(c[60:], reserved)
		sum := crc32.Update(crc32.Checksum(c[indexHeaderSize:len(c)-4], castagnoli), castagnoli, c[:indexHeaderSize])
		binary.LittleEndian.PutUint32(c[len(c)-4:], sum)
		if err := os.WriteFile(name, c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(indexFileVersionNoDebt, 0)
	db = openTest(t, dir, opts)
	if ri := db.Recovery(); !ri.IndexFromFile {
		t.Fatalf("a version 3 file was not used: %q", ri.IndexRebuildReason)
	}
	if v, _ := get(t, db, "aa"); v != "v" {
		t.Fatalf("aa = %q", v)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Version 3 with a nonzero field where version 4 counts the debt.
	b, err = os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	rewrite(indexFileVersionNoDebt, 1)
	db = openTest(t, dir, opts)
	defer db.Close()
	if ri := db.Recovery(); ri.IndexFromFile || !bytes.Contains([]byte(ri.IndexRebuildReason), []byte("not zero")) {
		t.Fatalf("a version 3 file with its reserved field set: %+v", ri)
	}
}

// TestChunkDebtCrashPoints: out-of-line values are written, overwritten,
// deleted and rolled back with vacuum running every few transactions and
// a checkpoint among them, and the power fails at file-system operations
// along the way (unsynced writes dropped, or the last one torn). Every
// crash copy must open with no orphan chunk (every chunk a removed
// version named is in vacuum's debt, or was freed), and its next vacuum
// must leave the debt empty and still no orphan; and a crash between the
// passes of a last run is checked whatever points the sample met. A crash
// between a run's passes left orphans before the debt was logged.
func TestChunkDebtCrashPoints(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	sample := *ladderSample
	if sample <= 0 {
		sample = 4
		if raceEnabled {
			sample = 40
		}
	}
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond,
		SharedBuffers: 16 * heap.PageSize, WALSegmentSize: 1 << 20, Autovacuum: noAutovacuum}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The hook runs in whichever goroutine did the operation (the WAL
	// writer's too): it has a source of its own, and failure is read
	// under hookMu.
	r, hr := rand.New(rand.NewPCG(seed, 11)), rand.New(rand.NewPCG(seed, 12))
	points, checked, betweenPasses := 0, 0, 0
	var hookMu sync.Mutex
	var failure error
	failed := func() bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		return failure != nil
	}
	m.SetOpHook(func(p vfs.CrashPoint) {
		hookMu.Lock()
		defer hookMu.Unlock()
		points++
		if failure != nil || hr.IntN(sample) != 0 {
			return
		}
		if db.vac.debt.len() > 0 {
			betweenPasses++
		}
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			c := p.CrashCopy(mode, rand.New(rand.NewPCG(seed, uint64(p.Op.Index))))
			if err := checkChunkDebt(c); err != nil {
				failure = fmt.Errorf("crash after op %v (%v): %w", p.Op, mode, err)
				return
			}
		}
	})
	ctx := context.Background()
	for i := 0; i < 36 && !failed(); i++ {
		if i == 12 {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		if i%4 == 3 {
			if _, err := db.Vacuum(ctx); err != nil {
				t.Fatal(err)
			}
		}
		k := fmt.Sprintf("big%d", r.IntN(3))
		err := db.Update(ctx, func(tx *Txn) error {
			if r.IntN(6) == 0 {
				return tx.Delete([]byte(k))
			}
			if err := tx.Put([]byte(k), patterned(2*chunkSize+r.IntN(chunkSize), uint32(i))); err != nil {
				return err
			}
			if r.IntN(8) == 0 {
				return errRollBack
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollBack) {
			t.Fatal(err)
		}
	}
	if !failed() {
		if _, err := db.Vacuum(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m.SetOpHook(nil)
	if failure != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, failure)
	}
	// Which operations the sample meets depends on the goroutines'
	// timing (the WAL writer's among them): one crash between a run's
	// passes is taken whatever the sample met, so that the test always
	// tests the debt. Err is asked before each page of pass 1, then
	// before the first revisit.
	mustPut(t, db, "big0", string(patterned(3*chunkSize, 99)))
	mustPut(t, db, "big0", "small")
	between := &hookCtx{Context: ctx, n: int64(db.pool.NBlocks()) + 1, fn: func() {
		if n := db.vac.debt.len(); n == 0 {
			t.Errorf("vacuum owes nothing between its passes")
		}
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			betweenPasses++
			if err := checkChunkDebt(m.CrashCopy(mode, rand.New(rand.NewPCG(seed, 1)))); err != nil {
				t.Errorf("seed %d: crash between a vacuum's passes (%v): %v", seed, mode, err)
			}
		}
	}}
	if _, err := db.Vacuum(between); err != nil {
		t.Fatal(err)
	}
	mustHaveRun(t, between)
	t.Logf("seed %d: %d operations, %d crash copies checked, %d points taken while vacuum owed chunks", seed, points, checked, betweenPasses)
}

// checkChunkDebt opens the crash copy c and checks that no chunk is an
// orphan, before its vacuum and after, and that the vacuum paid the debt.
func checkChunkDebt(c *vfs.MemFS) error { return checkDebtCopy(c, "/db", nil) }

// TestAutovacuumPaysChunkDebt: a VACUUM canceled between its passes leaves
// the chunks of the version its first pass removed in the debt, and no
// run is due (the threshold is far off): autovacuum frees them at its next
// nap anyway, reading only their pages. Before, they waited for a run that
// enough dead versions elsewhere would start.
func TestAutovacuumPaysChunkDebt(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{AutovacuumNaptime: 20 * time.Millisecond, AutovacuumVacuumThreshold: 1 << 30, CheckpointTimeout: -1})
	defer db.Close()
	mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
	old := db.idx.get([]byte("big")).headTID()
	mustPut(t, db, "big", "small now")
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(int64(old.Block) + 1)
	if st, err := db.Vacuum(ctx); !errors.Is(err, context.Canceled) || st.TuplesRemoved != 1 {
		t.Fatalf("vacuum: %+v, %v; want one version removed, then context.Canceled", st, err)
	}
	if due, _ := db.autovacuumDue(); due {
		t.Fatal("a run is due: the test is about the debt alone")
	}
	// Liveness, not speed: the deadline only bounds a hang.
	for deadline := time.Now().Add(time.Minute); db.vac.debt.len() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the debt still holds %d chunks a minute later, with a naptime of 20 ms", db.vac.debt.len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := chunkTuples(t, db); n != 0 {
		t.Fatalf("%d chunk tuples left after autovacuum paid the debt", n)
	}
	if st := db.Stats().Vacuum; st.AutovacuumRuns != 0 || st.ChunksRemoved != 3 {
		t.Fatalf("stats %+v: want no autovacuum run and 3 chunks removed", st)
	}
	mustVerify(t, db)
}

// TestChunkDebtDamagedPageHoldsUpNoOther: a page holding a chunk in
// vacuum's debt fails its checks after a restart (the debt came through
// the index file). The page is all-frozen, so the first pass skips it, and
// only the second reads it: each run must still free the debt's chunks on
// other pages, and report the damage; the damaged page's entry stays until
// zero_damaged_pages reads the page as empty. Before, every run stopped at
// the damaged page, and the chunks of later pages were never freed.
func TestChunkDebtDamagedPageHoldsUpNoOther(t *testing.T) {
	dir, crash := t.TempDir(), t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, VacuumFreezeMinAge: -1}
	db := openTest(t, dir, opts)
	defer db.Close()
	mustPut(t, db, "big1", string(patterned(3*chunkSize, 1)))
	mustPut(t, db, "big2", string(patterned(3*chunkSize, 2)))
	_, ptr := rawPointer(t, db, "big1")
	p, err := parseToastPointer(ptr)
	if err != nil {
		t.Fatal(err)
	}
	_, ptr2 := rawPointer(t, db, "big2")
	p2, err := parseToastPointer(ptr2)
	if err != nil {
		t.Fatal(err)
	}
	damaged := p.tids[0].Block
	for _, tid := range append(p.tids[1:], p2.tids...) {
		if tid.Block == damaged {
			t.Fatalf("chunks %v and %v: the test needs the first alone on its page", p.tids, p2.tids)
		}
	}
	// Frozen, so that the page is all-frozen and skipped by pass 1.
	for range 2 {
		if _, err := db.Vacuum(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, af := db.pageAllVisible(damaged); !af {
		t.Fatalf("chunk page %d is not all-frozen", damaged)
	}
	mustPut(t, db, "big1", "small 1")
	mustPut(t, db, "big2", "small 2")
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(int64(db.pool.NBlocks()))
	if _, err := db.Vacuum(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("vacuum: %v; want it stopped after its first pass", err)
	}
	if n := db.vac.debt.len(); n != 6 {
		t.Fatalf("debt of %d chunks after the first pass; want the 6 of the two values", n)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, crash)
	flipFileBits(t, filepath.Join(crash, heapDir, "00000000"), int64(damaged)*heap.PageSize+3000, 0x01)

	cdb := openTest(t, crash, opts)
	defer cdb.Close()
	if n := cdb.vac.debt.len(); n != 6 {
		t.Fatalf("debt of %d chunks in the copy; want 6", n)
	}
	// Open's scan trusts the map's bits once it has read the page; a
	// damaged page keeps them.
	cdb.waitOpenScan()
	if _, af := cdb.pageAllVisible(damaged); !af {
		t.Fatalf("damaged chunk page %d is not all-frozen after Open's scan", damaged)
	}
	for i := range 2 {
		st, err := cdb.Vacuum(context.Background())
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "00000000") {
			t.Fatalf("vacuum %d of the copy: %v; want the damaged page named", i, err)
		}
		if want := uint64(5 * (1 - i)); st.ChunksRemoved != want {
			t.Fatalf("vacuum %d of the copy freed %d chunks; want %d: the damaged page held up the rest of the debt", i, st.ChunksRemoved, want)
		}
		if got := cdb.vac.debt.list(); len(got) != 1 || got[0].tid != p.tids[0] {
			t.Fatalf("debt after vacuum %d of the copy: %v; want only %s, on the damaged page", i, got, p.tids[0])
		}
	}
	cdb.SetZeroDamagedPages(true)
	if _, err := cdb.Vacuum(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := cdb.vac.debt.len(); n != 0 {
		t.Fatalf("debt of %d chunks once the damaged page reads as empty", n)
	}
	for k, v := range map[string]string{"big1": "small 1", "big2": "small 2"} {
		if got, _ := get(t, cdb, k); got != v {
			t.Fatalf("%s = %q", k, got)
		}
	}
}

// TestChunkDebtPastHeapEndDropped: an entry of vacuum's debt in the index
// file that names a block past the heap (stale: a truncation cuts off only
// pages without tuples) is dropped at Open; the file is still used, where
// refusing it would rebuild the whole index from the heap for one stale
// entry.
func TestChunkDebtPastHeapEndDropped(t *testing.T) {
	dir, crash := t.TempDir(), t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, opts)
	defer db.Close()
	mustPut(t, db, "k", "v")
	db.vac.debt.add([]chunkID{{heap.TID{Block: db.pool.NBlocks() + 100, Slot: 1}, 7}})
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, crash)
	cdb := openTest(t, crash, opts)
	defer cdb.Close()
	if ri := cdb.Recovery(); !ri.IndexFromFile {
		t.Fatalf("the index file was not used: %q", ri.IndexRebuildReason)
	}
	if n := cdb.vac.debt.len(); n != 0 {
		t.Fatalf("the debt holds %d chunks after Open, want the stale one dropped", n)
	}
	if v, _ := get(t, cdb, "k"); v != "v" {
		t.Fatalf("k = %q", v)
	}
}

// TestChunkDebtMapRenewedAfterPaid: once a debt that grew past
// chunkDebtShrink is mostly paid, its map is made anew with what is left
// (a Go map keeps the room it grew to, so the largest debt a database
// ever owed stayed allocated while it was open), every chunk still owed
// stays in it, and a debt that never grew keeps its map.
func TestChunkDebtMapRenewedAfterPaid(t *testing.T) {
	var d chunkDebt
	d.add([]chunkID{{heap.TID{Block: 1, Slot: 1}, 7}})
	small := reflect.ValueOf(d.m).Pointer()
	d.drop(chunkID{heap.TID{Block: 1, Slot: 1}, 7})
	if reflect.ValueOf(d.m).Pointer() != small {
		t.Fatal("the map of a debt of one chunk was made anew")
	}

	n := 16 * chunkDebtShrink
	cs := make([]chunkID, n)
	for i := range cs {
		cs[i] = chunkID{heap.TID{Block: uint32(i / 64), Slot: uint16(i % 64)}, uint64(100 + i%3)}
	}
	for cycle := range 3 {
		d.add(cs)
		grown := reflect.ValueOf(d.m).Pointer()
		// Pay all but every 16th chunk, the last of them first.
		for i := n - 1; i >= 0; i-- {
			if i%16 != 0 {
				d.drop(cs[i])
			}
		}
		if reflect.ValueOf(d.m).Pointer() == grown {
			t.Fatalf("cycle %d: the map that held %d chunks was kept with %d left", cycle, n, d.len())
		}
		if d.peak > n/4 {
			t.Fatalf("cycle %d: peak %d after the debt fell to %d", cycle, d.peak, d.len())
		}
		got := d.list()
		if len(got) != n/16 {
			t.Fatalf("cycle %d: %d chunks owed, want %d", cycle, len(got), n/16)
		}
		for j, c := range got {
			if want := cs[16*j]; c != want {
				t.Fatalf("cycle %d: chunk %d owed is %v, want %v", cycle, j, c, want)
			}
		}
		for i := 0; i < n; i += 16 {
			d.drop(cs[i])
		}
		if d.len() != 0 {
			t.Fatalf("cycle %d: %d chunks owed after all were paid", cycle, d.len())
		}
	}
}
