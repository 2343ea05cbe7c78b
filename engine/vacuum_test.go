package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/vfs"
)

var noAutovacuum = func() *bool { b := false; return &b }()

// heapTuples counts the LPNormal tuples in the heap (chunks included).
func heapTuples(t testing.TB, db *DB) int {
	t.Helper()
	n := 0
	for blk := uint32(0); blk < db.pool.NBlocks(); blk++ {
		buf, err := db.pool.Get(blk)
		if err != nil {
			t.Fatal(err)
		}
		buf.RLock()
		for s := 0; s < heap.NumSlots(buf.Page()); s++ {
			if heap.SlotState(buf.Page(), uint16(s)) == heap.LPNormal {
				n++
			}
		}
		buf.RUnlock()
		buf.Release()
	}
	return n
}

func mustVacuum(t testing.TB, db *DB) VacuumStats {
	t.Helper()
	st, err := db.Vacuum(context.Background())
	if err != nil {
		t.Fatalf("Vacuum: %v", err)
	}
	return st
}

func mustVerify(t testing.TB, db *DB) {
	t.Helper()
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", err, rep.Problems)
	}
	if rep.OrphanChunks > 0 {
		t.Fatalf("Verify: %v", rep.Notes)
	}
}

func mustDelete(t testing.TB, db *DB, k string) {
	t.Helper()
	if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Delete([]byte(k)) }); err != nil {
		t.Fatalf("delete %s: %v", k, err)
	}
}

// Vacuum with no snapshot open removes every version but the newest of each
// key, every version of deleted keys with their index entries, aborted
// versions and the chunks of removed out-of-line values; reopening finds
// the same data.
func TestVacuumRemovesWhatNoSnapshotSees(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	big := strings.Repeat("x", 3*chunkSize) // out of line: 3 chunks, 4 with a suffix
	for i := 0; i < 10; i++ {
		mustPut(t, db, "a", fmt.Sprint("a", i))
		mustPut(t, db, "b", fmt.Sprint("b", i))
		mustPut(t, db, "big", big+fmt.Sprint(i))
	}
	mustPut(t, db, "gone", "1")
	mustPut(t, db, "gone", "2")
	mustDelete(t, db, "gone")
	tx, _ := db.Begin(context.Background(), TxnOptions{})
	if err := tx.Put([]byte("a"), []byte("aborted")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("never"), []byte(big)); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()

	before := heapTuples(t, db)
	st := mustVacuum(t, db)
	// Survivors: a, b, big + its 4 chunks.
	if got := heapTuples(t, db); got != 7 {
		t.Errorf("after vacuum %d tuples in the heap, want 7 (before: %d; stats %+v)", got, before, st)
	}
	if st.KeysRemoved != 2 { // "gone", and "never" whose only version aborted
		t.Errorf("KeysRemoved = %d, want 2", st.KeysRemoved)
	}
	// 9 old values of big with 4 chunks each, and the aborted one with 3.
	if st.ChunksRemoved != 9*4+3 {
		t.Errorf("ChunksRemoved = %d, want 39", st.ChunksRemoved)
	}
	if want := uint64(before - 7 - 39); st.TuplesRemoved != want {
		t.Errorf("TuplesRemoved = %d, want %d", st.TuplesRemoved, want)
	}
	if db.idx.get([]byte("gone")) != nil || db.idx.get([]byte("never")) != nil {
		t.Error("index still has entries for keys vacuum removed")
	}
	check := func(db *DB) {
		t.Helper()
		for k, want := range map[string]string{"a": "a9", "b": "b9", "big": big + "9"} {
			if got, ok := get(t, db, k); !ok || got != want {
				t.Errorf("%s = %.10q, %v; want %.10q", k, got, ok, want)
			}
		}
		if _, ok := get(t, db, "gone"); ok {
			t.Error("deleted key is back")
		}
	}
	check(db)
	mustVerify(t, db)
	// Vacuum again: nothing left to remove.
	if st := mustVacuum(t, db); st.TuplesRemoved != 0 || st.ChunksRemoved != 0 {
		t.Errorf("second vacuum removed %d tuples and %d chunks", st.TuplesRemoved, st.ChunksRemoved)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	check(db)
	mustVerify(t, db)
}

// A REPEATABLE READ snapshot keeps the versions it sees through any number
// of vacuums; once it ends, the next vacuum removes them.
func TestVacuumKeepsWhatSnapshotsSee(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "old")
	mustPut(t, db, "d", "here")
	rr, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if v, err := rr.Get([]byte("k")); err != nil || string(v) != "old" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	for i := 0; i < 5; i++ {
		mustPut(t, db, "k", fmt.Sprint("new", i))
		mustVacuum(t, db)
	}
	mustDelete(t, db, "d")
	mustPut(t, db, "fresh", "1")
	st := mustVacuum(t, db)
	if st.KeysRemoved != 0 {
		t.Errorf("vacuum removed %d keys a snapshot still sees", st.KeysRemoved)
	}
	if st.RecentlyDead == 0 {
		t.Error("no recently dead versions reported while a snapshot holds them")
	}
	for k, want := range map[string]string{"k": "old", "d": "here"} {
		if v, err := rr.Get([]byte(k)); err != nil || string(v) != want {
			t.Errorf("snapshot reads %s = %q, %v; want %q", k, v, err, want)
		}
	}
	if _, err := rr.Get([]byte("fresh")); !errors.Is(err, ErrNotFound) {
		t.Errorf("snapshot sees a key inserted after it: %v", err)
	}
	rr.Commit()
	st = mustVacuum(t, db)
	if st.KeysRemoved != 1 || heapTuples(t, db) != 2 {
		t.Errorf("after the snapshot ended: %d keys removed, %d tuples left; want 1 and 2", st.KeysRemoved, heapTuples(t, db))
	}
	if v, _ := get(t, db, "k"); v != "new4" {
		t.Errorf("k = %q", v)
	}
	mustVerify(t, db)
}

// A TID read before vacuum removed the version behind it, whose slot then
// went to another key, is recognised as vanished, and the walk restarts
// from the head.
func TestReaderSeesVanishedSlot(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "k", "1")
	e := db.idx.get([]byte("k"))
	stale := e.headTID()
	mustDelete(t, db, "k")
	mustVacuum(t, db)
	if e.headTID().Valid() {
		t.Fatal("vacuum left the removed key's head in place")
	}
	mustPut(t, db, "other", "2")
	if tid := db.idx.get([]byte("other")).headTID(); tid != stale {
		t.Logf("slot %s not reused (other went to %s)", stale, tid)
	}
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if _, err := db.readVersion(stale, "k", true); !errors.Is(err, errVanished) {
		t.Errorf("reading a removed version: %v, want errVanished", err)
	}
	snap := db.snaps.take(db.procs)
	defer db.snaps.release(snap)
	if _, found, err := db.fetchVisible(e, snap, 0); err != nil || found {
		t.Errorf("walk from a stale entry: found %v, %v", found, err)
	}
}

// The randomized model test: random writes, aborts, deletes, long-running
// REPEATABLE READ readers and vacuums, checked against a map after every
// step; each reader must keep seeing the state it started with.
func TestVacuumModel(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	base := testSeed(t, 0)
	for s := 0; s < seeds; s++ {
		seed := base + uint64(s)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { vacuumModel(t, seed, 600) })
	}
}

func vacuumModel(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize, VacuumFreezeMinAge: int64(r.IntN(3)) - 1}
	db := openTest(t, dir, opts)
	defer func() { db.Close() }()
	ctx := context.Background()
	cur := ladderState{}
	type reader struct {
		tx   *Txn
		want ladderState
	}
	var readers []reader
	checkReader := func(rd reader) {
		t.Helper()
		got := ladderState{}
		if err := rd.tx.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
			t.Fatalf("seed %d: reader scan: %v", seed, err)
		}
		if !maps.Equal(got, rd.want) {
			t.Fatalf("seed %d: reader sees %s", seed, diffState(got, rd.want))
		}
		for _, k := range []string{"k0", "k1", "k7"} {
			v, err := rd.tx.Get([]byte(k))
			want, ok := rd.want[k]
			if (err == nil) != ok || string(v) != want {
				t.Fatalf("seed %d: reader Get(%s) = %q, %v; want %q, %v", seed, k, v, err, want, ok)
			}
		}
	}
	for step := 0; step < steps; step++ {
		switch op := r.IntN(20); {
		case op < 11: // a transaction of a few writes, sometimes aborted
			tx, _ := db.Begin(ctx, TxnOptions{})
			next := maps.Clone(cur)
			for w := 0; w < 1+r.IntN(3); w++ {
				k := fmt.Sprintf("k%d", r.IntN(12))
				var err error
				switch {
				case r.IntN(5) == 0:
					err = tx.Delete([]byte(k))
					delete(next, k)
				case r.IntN(30) == 0:
					v := strings.Repeat(fmt.Sprint(step), 3000)
					err = tx.Put([]byte(k), []byte(v))
					next[k] = v
				default:
					v := fmt.Sprint(step, ":", w)
					err = tx.Put([]byte(k), []byte(v))
					next[k] = v
				}
				if err != nil {
					t.Fatalf("seed %d: write: %v", seed, err)
				}
			}
			if r.IntN(5) == 0 {
				tx.Rollback()
			} else {
				if err := tx.Commit(); err != nil {
					t.Fatalf("seed %d: commit: %v", seed, err)
				}
				cur = next
			}
		case op < 13:
			tx, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
			rd := reader{tx, maps.Clone(cur)}
			checkReader(rd) // takes the snapshot
			readers = append(readers, rd)
		case op < 15 && len(readers) > 0:
			i := r.IntN(len(readers))
			checkReader(readers[i])
			readers[i].tx.Commit()
			readers = slices.Delete(readers, i, i+1)
		case op < 18:
			mustVacuum(t, db)
		case op == 18:
			for _, rd := range readers {
				checkReader(rd)
			}
		default:
			if len(readers) == 0 && r.IntN(4) == 0 {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = openTest(t, dir, opts)
			}
		}
		got, err := scanState(db)
		if err != nil {
			t.Fatalf("seed %d: scan: %v", seed, err)
		}
		if !maps.Equal(got, cur) {
			t.Fatalf("seed %d step %d: %s", seed, step, diffState(got, cur))
		}
	}
	for _, rd := range readers {
		checkReader(rd)
		rd.tx.Commit()
	}
	// Nothing is open any more: a vacuum leaves one version per key.
	mustVacuum(t, db)
	if n, keys := heapTuples(t, db), len(cur); n < keys || db.idx.len() != keys {
		t.Errorf("seed %d: %d tuples and %d index entries for %d keys", seed, n, db.idx.len(), keys)
	}
	chains := 0
	for _, e := range db.idx.entriesAfter("", true, 1000) {
		v, err := db.readVersion(e.headTID(), e.key(), false)
		if err != nil {
			t.Fatal(err)
		}
		if v.hdr.Prev.Valid() {
			chains++
		}
	}
	if chains != 0 {
		t.Errorf("seed %d: %d keys still have more than one version", seed, chains)
	}
	mustVerify(t, db)
}

// Transfers between accounts keep the total constant; REPEATABLE READ
// readers check the total while vacuum runs in a loop beside writers, so
// any version removed too early or chain broken shows as a wrong sum or an
// error.
func TestVacuumConcurrentTransfers(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize, VacuumFreezeMinAge: -1})
	defer db.Close()
	const accounts, initial = 20, 1000
	for i := 0; i < accounts; i++ {
		mustPut(t, db, fmt.Sprintf("acct%02d", i), fmt.Sprint(initial))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var writers, readers sync.WaitGroup
	errc := make(chan error, 8)
	parse := func(b []byte) int {
		n := 0
		fmt.Sscan(string(b), &n)
		return n
	}
	for w := 0; w < 3; w++ {
		writers.Add(1)
		go func(w int) {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for i := 0; i < 1000; i++ {
				a, b := r.IntN(accounts), r.IntN(accounts)
				if a >= b {
					continue // lock in key order: no deadlocks
				}
				err := db.Update(context.Background(), func(tx *Txn) error {
					for _, x := range []struct{ k, d int }{{a, -7}, {b, 7}} {
						if err := tx.Update([]byte(fmt.Sprintf("acct%02d", x.k)), func(old []byte, _ bool) ([]byte, error) {
							return []byte(fmt.Sprint(parse(old) + x.d)), nil
						}); err != nil {
							return err
						}
					}
					if r.IntN(6) == 0 {
						return errors.New("abort")
					}
					return nil
				})
				if err != nil && err.Error() != "abort" {
					errc <- err
					return
				}
			}
		}(w)
	}
	for rdr := 0; rdr < 2; rdr++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for ctx.Err() == nil {
				tx, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
				for pass := 0; pass < 3; pass++ {
					sum, n := 0, 0
					if err := tx.Scan(nil, nil, func(_, v []byte) bool { sum += parse(v); n++; return true }); err != nil {
						errc <- err
						tx.Rollback()
						return
					}
					if sum != accounts*initial || n != accounts {
						errc <- fmt.Errorf("reader saw %d accounts totalling %d", n, sum)
						tx.Rollback()
						return
					}
				}
				tx.Commit()
			}
		}()
	}
	vacDone := make(chan struct{})
	go func() {
		defer close(vacDone)
		for ctx.Err() == nil {
			if _, err := db.Vacuum(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- err
				return
			}
		}
	}()
	writers.Wait()
	cancel()
	readers.Wait()
	<-vacDone
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	mustVacuum(t, db)
	if n := heapTuples(t, db); n != accounts {
		t.Errorf("%d tuples left for %d accounts", n, accounts)
	}
	mustVerify(t, db)
}

// Under a steady update load with autovacuum on, the heap stops growing:
// vacuum frees the old versions and the free space map hands their space to
// new ones.
func TestAutovacuumKeepsHeapBounded(t *testing.T) {
	on := true
	db := openTest(t, t.TempDir(), Options{Autovacuum: &on, AutovacuumNaptime: 5 * time.Millisecond, AutovacuumVacuumThreshold: 100})
	defer db.Close()
	const keys = 50
	val := strings.Repeat("v", 100)
	for i := 0; i < keys; i++ {
		mustPut(t, db, fmt.Sprint("key", i), val)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var base uint32
	for round := 0; round < 12; round++ {
		runs := db.Stats().Vacuum.AutovacuumRuns
		for i := 0; i < 400; i++ {
			mustPut(t, db, fmt.Sprint("key", r.IntN(keys)), val)
		}
		// Wait for a run that started after this round's updates began
		// (no bound on how long: the machine may be loaded).
		for db.Stats().Vacuum.AutovacuumRuns < runs+2 {
			time.Sleep(time.Millisecond)
		}
		if round == 3 {
			base = db.pool.NBlocks()
		}
	}
	// A round writes about 8 pages of new versions.
	if n := db.pool.NBlocks(); n > base+8 {
		t.Errorf("heap grew from %d to %d blocks over 8 rounds of updates with autovacuum", base, n)
	}
	if s := db.Stats(); s.Vacuum.TuplesRemoved == 0 || s.Vacuum.PagesScanned == 0 {
		t.Errorf("stats show no vacuum work: %+v", s)
	}
}

// Freezing: committed tuples below the cutoff get the frozen bits, an
// aborted xmax below it is cleared, RelFrozenXid moves up to the horizon, and
// frozen tuples are read without the CLOG, also after reopening.
func TestVacuumFreezes(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1}
	db := openTest(t, dir, opts)
	for i := 0; i < 20; i++ {
		mustPut(t, db, fmt.Sprint("k", i), "v")
	}
	tx, _ := db.Begin(context.Background(), TxnOptions{})
	if err := tx.Put([]byte("k0"), []byte("aborted")); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	st := mustVacuum(t, db)
	if st.TuplesFrozen != 20 || st.RelFrozenXid != st.OldestXmin {
		t.Fatalf("TuplesFrozen %d (want 20), RelFrozenXid %d (want OldestXmin %d)", st.TuplesFrozen, st.RelFrozenXid, st.OldestXmin)
	}
	v, err := db.readVersion(db.idx.get([]byte("k0")).headTID(), "k0", false)
	if err != nil {
		t.Fatal(err)
	}
	if v.hdr.Infomask&heap.Frozen == 0 || v.hdr.Xmax != 0 {
		t.Errorf("k0 after freezing: infomask %#x xmax %d; want frozen, xmax cleared", v.hdr.Infomask, v.hdr.Xmax)
	}
	if st := mustVacuum(t, db); st.TuplesFrozen != 0 || st.TuplesRemoved != 0 {
		t.Errorf("second vacuum froze %d and removed %d", st.TuplesFrozen, st.TuplesRemoved)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, opts)
	defer db.Close()
	before := db.Stats()
	for i := 0; i < 20; i++ {
		if got, ok := get(t, db, fmt.Sprint("k", i)); !ok || got != "v" {
			t.Fatalf("k%d = %q, %v", i, got, ok)
		}
	}
	if d := db.Stats().Sub(before); d.CLOG.Lookups != 0 {
		t.Errorf("reading frozen tuples made %d CLOG lookups", d.CLOG.Lookups)
	}
	if got := db.vac.relFrozenXid.Load(); got < st.OldestXmin {
		t.Errorf("frozen xid found at open %d, below the horizon %d every tuple was frozen under", got, st.OldestXmin)
	}
	mustVerify(t, db)
}

func TestPruneRecordRoundTrip(t *testing.T) {
	pages := []*prunePage{
		{block: 3, unused: []uint16{1, 4}, prev: []prevFix{{2, heap.TID{Block: 0, Slot: 1}}}, freeze: []freezeOp{{5, heap.Frozen | heap.XminCommitted, 0}}},
		{block: 9, prev: []prevFix{{0, heap.InvalidTID}}},
	}
	listed := []chunkID{{heap.TID{Block: 12, Slot: 0}, 77}, {heap.TID{Block: 4, Slot: 9}, 78}}
	for _, flags := range []uint8{0, flagPruneNoRepair, flagPruneChunks, flagPruneNoRepair | flagPruneChunks} {
		var want []chunkID
		if flags&flagPruneChunks != 0 {
			want = listed
		}
		enc := encodePrune(pages, want)
		got, gotListed, err := decodePrune(enc, flags)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, pages) || !reflect.DeepEqual(gotListed, want) {
			t.Errorf("round trip with flags %#x: %+v %+v, want %+v %+v", flags, got[0], gotListed, pages[0], want)
		}
		for _, bad := range [][]byte{nil, {0, 0}, enc[:20], append(enc, 0), enc[:len(enc)-1]} {
			if _, _, err := decodePrune(bad, flags); err == nil {
				t.Errorf("decodePrune(%x, %#x) accepted", bad, flags)
			}
		}
	}
	// The flag with no list, and a list without the flag.
	if _, _, err := decodePrune(encodePrune(pages, nil), flagPruneChunks); err == nil {
		t.Error("flagPruneChunks without listed chunks accepted")
	}
	if _, _, err := decodePrune(encodePrune(pages, listed), 0); err == nil {
		t.Error("listed chunks without flagPruneChunks accepted")
	}
	if _, _, err := decodePrune(append(encodePrune(pages, nil), 0, 0, 0, 0), flagPruneChunks); err == nil {
		t.Error("a list of no chunks accepted")
	}
	// A part that changes nothing compacts the page, which a record that
	// does not compact cannot say.
	empty := encodePrune([]*prunePage{{block: 1}}, nil)
	if _, _, err := decodePrune(empty, 0); err != nil {
		t.Errorf("compaction-only part refused: %v", err)
	}
	if _, _, err := decodePrune(empty, flagPruneNoRepair); err == nil {
		t.Error("empty part accepted with flagPruneNoRepair")
	}
}

func FuzzDecodePrune(f *testing.F) {
	f.Add(uint8(0), encodePrune([]*prunePage{{block: 3, unused: []uint16{1, 4}, prev: []prevFix{{2, heap.TID{Block: 0, Slot: 1}}}}}, nil))
	f.Add(flagPruneNoRepair, encodePrune([]*prunePage{{block: 1, freeze: []freezeOp{{5, 0x11, 7}}}, {block: 2, unused: []uint16{0}}}, nil))
	f.Add(uint8(0), encodePrune([]*prunePage{{block: 4}}, nil))
	f.Add(flagPruneChunks, encodePrune([]*prunePage{{block: 4, unused: []uint16{2}}}, []chunkID{{heap.TID{Block: 5, Slot: 1}, 9}}))
	f.Fuzz(func(t *testing.T, flags uint8, data []byte) {
		pages, listed, err := decodePrune(data, flags)
		if err != nil {
			return
		}
		if again := encodePrune(pages, listed); string(again) != string(data) {
			t.Fatalf("decode then encode changed %x into %x", data, again)
		}
		if (len(listed) > 0) != (flags&flagPruneChunks != 0) {
			t.Fatalf("flags %#x, %d chunks listed", flags, len(listed))
		}
		_ = describePrune(data, flags)
		page := make([]byte, heap.PageSize)
		heap.InitPage(page)
		for _, p := range pages {
			applyPrune(page, p, flags) // must not panic on a page that lacks the slots
		}
	})
}

// BenchmarkVacuum measures vacuum throughput: each iteration updates every
// key once (untimed), then vacuums, removing one old version per key.
func BenchmarkVacuum(b *testing.B) {
	db := openTest(b, b.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 64 << 20})
	defer db.Close()
	const keys = 5000
	val := strings.Repeat("v", 100)
	update := func() {
		for i := 0; i < keys; i += 100 {
			err := db.Update(context.Background(), func(tx *Txn) error {
				for j := i; j < i+100; j++ {
					if err := tx.Put([]byte(fmt.Sprintf("key%06d", j)), []byte(val)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	update()
	mustVacuum(b, db)
	var removed uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		update()
		b.StartTimer()
		removed += mustVacuum(b, db).TuplesRemoved
	}
	b.ReportMetric(float64(removed)/b.Elapsed().Seconds(), "tuples/s")
	b.ReportMetric(float64(db.pool.NBlocks()), "heap-blocks")
}

// TestVacuumTruncatesCLOG checks the wiring from vacuum's frozen horizon to
// CLOG truncation: once every tuple below a segment boundary is frozen,
// vacuum removes the CLOG segments below it, and the database still reads,
// verifies and reopens. The xid counter is advanced past three segments'
// worth of xids instead of running millions of transactions.
func TestVacuumTruncatesCLOG(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1}
	db := openTest(t, dir, opts)
	for i := 0; i < 20; i++ {
		mustPut(t, db, fmt.Sprint("k", i), "old")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	seg0 := filepath.Join(dir, clogDir, "000000000000")
	if _, err := os.Stat(seg0); err != nil {
		t.Fatalf("CLOG segment 0 after a checkpoint: %v", err)
	}
	perSeg := uint64(clog.XidsPerPage * clog.PagesPerSegment)
	db.procs.mu.Lock()
	db.procs.nextXid = 3 * perSeg
	db.procs.mu.Unlock()
	for i := 0; i < 30; i += 2 {
		mustPut(t, db, fmt.Sprint("k", i), "new")
	}
	st := mustVacuum(t, db)
	if clogSegment(st.RelFrozenXid) != 3 {
		t.Fatalf("RelFrozenXid %d is in CLOG segment %d, want 3", st.RelFrozenXid, clogSegment(st.RelFrozenXid))
	}
	if got := db.clog.OldestXid(); got != st.RelFrozenXid {
		t.Fatalf("CLOG truncation point %d, want RelFrozenXid %d", got, st.RelFrozenXid)
	}
	if s := db.Stats(); s.CLOG.Truncations != 1 {
		t.Fatalf("CLOGTruncations = %d, want 1", s.CLOG.Truncations)
	}
	if _, err := os.Stat(seg0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("CLOG segment 0 after truncation: %v (want it removed)", err)
	}
	check := func(db *DB) {
		t.Helper()
		for i := 0; i < 30; i++ {
			want, ok := "old", i < 20
			if i%2 == 0 {
				want, ok = "new", true
			}
			if got, found := get(t, db, fmt.Sprint("k", i)); found != ok || (ok && got != want) {
				t.Fatalf("k%d = %q, %v; want %q, %v", i, got, found, want, ok)
			}
		}
		mustVerify(t, db)
	}
	check(db)
	if st := mustVacuum(t, db); st.RelFrozenXid < db.clog.OldestXid() {
		t.Fatalf("second vacuum: RelFrozenXid %d below the truncation point %d", st.RelFrozenXid, db.clog.OldestXid())
	}
	if s := db.Stats(); s.CLOG.Truncations != 1 {
		t.Fatalf("a vacuum with nothing to remove truncated again: %d truncations", s.CLOG.Truncations)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, opts)
	defer db.Close()
	check(db)
}

// TestVacuumSkipsAllVisiblePages checks lazy vacuum's page skipping: a run
// that is not aggressive skips pages the previous run marked all-visible
// and keeps the frozen horizon where it was; an aggressive run reads them.
func TestVacuumSkipsAllVisiblePages(t *testing.T) {
	for _, aggressive := range []bool{false, true} {
		t.Run(fmt.Sprint("aggressive=", aggressive), func(t *testing.T) {
			opts := Options{Autovacuum: noAutovacuum}
			if aggressive {
				opts.VacuumFreezeTableAge = -1
			}
			db := openTest(t, t.TempDir(), opts)
			defer db.Close()
			for i := 0; i < 500; i++ {
				mustPut(t, db, fmt.Sprintf("k%04d", i), strings.Repeat("v", 100))
			}
			first := mustVacuum(t, db)
			if first.PagesAllVisible == 0 {
				t.Fatalf("first vacuum marked no page all-visible: %+v", first)
			}
			for i := 0; i < 500; i += 100 {
				mustPut(t, db, fmt.Sprintf("k%04d", i), "new")
			}
			second := mustVacuum(t, db)
			if second.Aggressive != aggressive {
				t.Fatalf("Aggressive = %v, want %v", second.Aggressive, aggressive)
			}
			if aggressive {
				if second.PagesSkipped != 0 {
					t.Errorf("aggressive vacuum skipped %d pages", second.PagesSkipped)
				}
			} else {
				if second.PagesSkipped == 0 {
					t.Errorf("lazy vacuum skipped no all-visible page: %+v", second)
				}
				if second.RelFrozenXid > first.RelFrozenXid {
					t.Errorf("lazy vacuum moved RelFrozenXid from %d to %d", first.RelFrozenXid, second.RelFrozenXid)
				}
			}
			if second.TuplesRemoved == 0 {
				t.Errorf("second vacuum removed nothing: %+v", second)
			}
			mustVerify(t, db)
			for i := 0; i < 500; i++ {
				want := strings.Repeat("v", 100)
				if i%100 == 0 {
					want = "new"
				}
				if got, ok := get(t, db, fmt.Sprintf("k%04d", i)); !ok || got != want {
					t.Fatalf("k%04d = %q, %v", i, got, ok)
				}
			}
		})
	}
}

// A key nobody wrote since a vacuum found its one version visible to
// everyone is not read again, even when its page is not all-visible; every
// kind of write brings it back.
func TestVacuumSkipsAllVisiblePagesAfterWrites(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	const n = 200
	for i := 0; i < n; i++ {
		mustPut(t, db, fmt.Sprintf("k%04d", i), strings.Repeat("v", 100))
	}
	first := mustVacuum(t, db)
	if first.PagesAllVisible != first.PagesScanned {
		t.Fatalf("first vacuum marked %d of %d pages all-visible: %+v", first.PagesAllVisible, first.PagesScanned, first)
	}
	// One update clears the all-visible bit of the page of k0005 (and the
	// page its new version lands on); the other pages are skipped.
	mustPut(t, db, "k0005", "new")
	st := mustVacuum(t, db)
	if st.PagesScanned > 2 || st.TuplesRemoved != 1 {
		t.Fatalf("after one update: scanned %d pages, removed %d; want at most 2, 1: %+v", st.PagesScanned, st.TuplesRemoved, st)
	}
	// A delete, an aborted update and an aborted delete make their keys
	// dirty again; the delete's key goes.
	mustDelete(t, db, "k0006")
	for _, k := range []string{"k0007", "k0008"} {
		tx, _ := db.Begin(context.Background(), TxnOptions{})
		var err error
		if k == "k0007" {
			err = tx.Put([]byte(k), []byte("aborted"))
		} else {
			err = tx.Delete([]byte(k))
		}
		if err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
	}
	st = mustVacuum(t, db)
	if st.KeysRemoved != 1 || st.TuplesRemoved != 2 {
		t.Fatalf("after delete and aborts: removed %d keys and %d versions; want 1, 2: %+v", st.KeysRemoved, st.TuplesRemoved, st)
	}
	if _, ok := get(t, db, "k0006"); ok {
		t.Error("deleted key still there")
	}
	for _, k := range []string{"k0007", "k0008"} {
		if got, ok := get(t, db, k); !ok || got != strings.Repeat("v", 100) {
			t.Errorf("%s = %q, %v after aborted writes", k, got, ok)
		}
	}
	mustVerify(t, db)
}

// Deleting a key that does not exist leaves no index entry behind, even
// with no vacuum to come.
func TestDeleteOfMissingKeyLeavesNoEntry(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "k", "v")
	for i := 0; i < 100; i++ {
		mustDelete(t, db, fmt.Sprint("missing", i))
	}
	if n := db.Stats().Index.Keys; n != 1 {
		t.Errorf("Stats().Index.Keys = %d after deletes of missing keys, want 1", n)
	}
	mustPut(t, db, "missing7", "now")
	if got, ok := get(t, db, "missing7"); !ok || got != "now" {
		t.Errorf("missing7 = %q, %v", got, ok)
	}
	mustVerify(t, db)
}

// Vacuum frees slots in place and compacts each page once: with a pruning
// budget of a few pages, chains spread over many pages name each page in
// many batches, yet no page is compacted twice in a run, none is left with
// holes, and the freed space is taken by the next versions instead of new
// pages. Recovery replays both kinds of record to the same pages.
func TestVacuumCompactsEachPageOnce(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize}
	db := openTest(t, dir, opts)
	const keys = 1500
	rng := rand.New(rand.NewPCG(1, 2))
	val := func(round int) string { return fmt.Sprintf("%03d", round) + strings.Repeat("v", 97) }
	for i := 0; i < keys; i++ {
		mustPut(t, db, fmt.Sprintf("k%05d", i), val(0))
	}
	for round := 1; round <= 3; round++ {
		for _, i := range rng.Perm(keys) {
			mustPut(t, db, fmt.Sprintf("k%05d", i), val(round))
		}
	}
	st := mustVacuum(t, db)
	nblocks := uint64(db.pool.NBlocks())
	// Updates that found their old version's page full, and reads of
	// nearly full pages, pruned most old versions themselves.
	s := db.Stats()
	if pruned := s.Heap.PrunedByUpdate + s.Heap.PrunedByRead; st.TuplesRemoved+pruned < 3*keys {
		t.Fatalf("vacuum removed %d versions and pruning %d, want at least %d in all", st.TuplesRemoved, pruned, 3*keys)
	}
	// Each page read at most twice, through a ring of 2 frames (an eighth
	// of the pool): the run took no more frames than that from the pool.
	if st.PagesScanned+st.PagesRevisited > 2*nblocks || st.PagesRead > st.PagesScanned+st.PagesRevisited {
		t.Errorf("vacuum scanned %d pages, revisited %d and read %d, in a heap of %d pages", st.PagesScanned, st.PagesRevisited, st.PagesRead, nblocks)
	}
	if st.RingSwept > 2 {
		t.Errorf("vacuum took %d frames from the pool, want its ring of 2", st.RingSwept)
	}
	holes := func(db *DB) int {
		n := 0
		for blk := uint32(0); blk < db.pool.NBlocks(); blk++ {
			buf, err := db.pool.Get(blk)
			if err != nil {
				t.Fatal(err)
			}
			buf.RLock()
			if heap.HoleBytes(buf.Page()) > 0 {
				n++
			}
			buf.RUnlock()
			buf.Release()
		}
		return n
	}
	if n := holes(db); n != 0 {
		t.Errorf("%d pages left with holes after vacuum", n)
	}
	mustVerify(t, db)
	for _, i := range rng.Perm(keys) {
		mustPut(t, db, fmt.Sprintf("k%05d", i), val(4))
	}
	if grown := uint64(db.pool.NBlocks()); grown != nblocks {
		t.Errorf("heap grew from %d to %d pages although vacuum freed a version of every key", nblocks, grown)
	}
	crashCopy := t.TempDir()
	copyDir(t, dir, crashCopy)
	db.Close()
	db = openTest(t, crashCopy, opts)
	defer db.Close()
	mustVerify(t, db)
	for i := 0; i < keys; i++ {
		if got, ok := get(t, db, fmt.Sprintf("k%05d", i)); !ok || got != val(4) {
			t.Fatalf("k%05d after recovery = %q, %v", i, got, ok)
		}
	}
}

// A negative autovacuum_vacuum_scale_factor stands for 0: the threshold
// alone decides, however many keys there are; 0 itself is the default.
func TestAutovacuumScaleFactorZero(t *testing.T) {
	off := false
	for _, c := range []struct {
		scale float64
		due   bool
	}{{-1, true}, {0, false}, {0.001, true}, {0.2, false}} {
		db := openTest(t, t.TempDir(), Options{Autovacuum: &off, AutovacuumVacuumThreshold: 100, AutovacuumVacuumScaleFactor: c.scale})
		txn, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5000 {
			if err := txn.Put([]byte(fmt.Sprint("key", i)), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		// A snapshot held open keeps the old versions from being pruned.
		release := holdSnapshot(t, db)
		for i := range 200 {
			mustPut(t, db, fmt.Sprint("key", i), "w")
		}
		release()
		// 200 dead tuples: above 100 + 0.001*5000, below 100 + 0.2*5000.
		if due, dead := db.autovacuumDue(); due != c.due || dead != 200 {
			t.Errorf("scale factor %v: due %v with %d dead, want %v with 200", c.scale, due, dead, c.due)
		}
		db.Close()
	}
}

// TestVacuumRemovesCrashedTransaction leaves a transaction open across a
// checkpoint and crashes: every record of its xid lies before the redo
// point, so recovery never marks it aborted and the CLOG says "in
// progress" for good. Vacuum must still count it as aborted (it is not
// running): remove the versions it inserted, clear the xmax it set, and let
// RelFrozenXid pass it. Otherwise its versions stay forever and the CLOG can
// never be truncated past it.
func TestVacuumRemovesCrashedTransaction(t *testing.T) {
	ctx := context.Background()
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1, CheckpointTimeout: -1}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "kept", "v1")
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("chunked ", 4000) // stored out of line
	for k, v := range map[string]string{"kept": "crashed update", "new": "crashed insert", "big": big} {
		if err := tx.Put([]byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	xid := tx.st.xid.Load()
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	tx.Rollback()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	opts.FS = crashed
	db = openTest(t, "/db", opts)
	defer db.Close()
	if st, err := db.clog.Status(xid); err != nil || st != clog.StatusInProgress {
		t.Fatalf("CLOG status of the crashed xid %d after recovery: %v, %v; the test needs it in progress", xid, st, err)
	}
	check := func(when string) {
		t.Helper()
		if v, ok := get(t, db, "kept"); !ok || v != "v1" {
			t.Fatalf("%s: kept = %q, %v; want v1", when, v, ok)
		}
		for _, k := range []string{"new", "big"} {
			if v, ok := get(t, db, k); ok {
				t.Fatalf("%s: %s = %.20q, inserted by the crashed transaction", when, k, v)
			}
		}
	}
	check("after recovery")
	mustPut(t, db, "later", "x")
	st := mustVacuum(t, db)
	check("after vacuum")
	if st.RelFrozenXid <= xid {
		t.Errorf("RelFrozenXid %d after an aggressive vacuum, not past the crashed xid %d", st.RelFrozenXid, xid)
	}
	if st.TuplesRemoved < 3 || st.ChunksRemoved == 0 {
		t.Errorf("vacuum removed %d versions and %d chunks; want the crashed transaction's 3 versions and its chunks", st.TuplesRemoved, st.ChunksRemoved)
	}
	v, err := db.readVersion(db.idx.get([]byte("kept")).headTID(), "kept", false)
	if err != nil {
		t.Fatal(err)
	}
	if v.hdr.Xmax != 0 || v.hdr.Infomask&heap.Frozen == 0 {
		t.Errorf("kept after vacuum: xmax %d, infomask %#x; want the crashed xmax cleared and the version frozen", v.hdr.Xmax, v.hdr.Infomask)
	}
	// The keys only the crashed transaction wrote got no index entry at
	// open: their versions went as any dead version does.
	if db.idx.get([]byte("new")) != nil || db.idx.get([]byte("big")) != nil {
		t.Error("index entries for keys only a crashed transaction wrote")
	}
	mustVerify(t, db)
}

// TestVacuumClearsDeadXmaxOfFrozenVersion rolls back an update of a key
// frozen by an earlier run: the frozen version keeps the aborted xmax,
// which the next freeze must clear, or RelFrozenXid (and CLOG truncation)
// stays at it for good.
func TestVacuumClearsDeadXmaxOfFrozenVersion(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1})
	defer db.Close()
	mustPut(t, db, "a", "1")
	if st := mustVacuum(t, db); st.TuplesFrozen != 1 {
		t.Fatalf("first vacuum froze %d versions, want 1", st.TuplesFrozen)
	}
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("a"), []byte("rolled back")); err != nil {
		t.Fatal(err)
	}
	aborted := tx.st.xid.Load()
	tx.Rollback()
	mustPut(t, db, "b", "later") // moves the horizon past the aborted xid
	st := mustVacuum(t, db)
	if st.RelFrozenXid <= aborted {
		t.Errorf("RelFrozenXid %d, not past the rolled-back update's xid %d", st.RelFrozenXid, aborted)
	}
	v, err := db.readVersion(db.idx.get([]byte("a")).headTID(), "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if v.hdr.Xmax != 0 || v.hdr.Infomask&heap.Frozen == 0 {
		t.Errorf("a: xmax %d, infomask %#x; want the aborted xmax cleared, still frozen", v.hdr.Xmax, v.hdr.Infomask)
	}
	if st.TuplesFrozen != 1 { // b; clearing a's xmax freezes nothing new
		t.Errorf("TuplesFrozen %d, want 1", st.TuplesFrozen)
	}
	if got, ok := get(t, db, "a"); !ok || got != "1" {
		t.Errorf("a = %q, %v", got, ok)
	}
	mustVerify(t, db)
}

// TestVacuumFreezesChunks freezes a large value stored out of line: its
// chunks are frozen too, so RelFrozenXid passes their xmin, at once and after
// a crash, and the CLOG could be truncated past it.
func TestVacuumFreezesChunks(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1, CheckpointTimeout: -1}
	db := openTest(t, "/db", opts)
	big := strings.Repeat("0123456789", 4000)
	mustPut(t, db, "big", big)
	mustPut(t, db, "small", "x")
	st := mustVacuum(t, db)
	if st.ChunksFrozen == 0 || st.RelFrozenXid != st.OldestXmin {
		t.Fatalf("ChunksFrozen %d, RelFrozenXid %d (OldestXmin %d); want chunks frozen and RelFrozenXid at the horizon", st.ChunksFrozen, st.RelFrozenXid, st.OldestXmin)
	}
	if again := mustVacuum(t, db); again.ChunksFrozen != 0 || again.RelFrozenXid < st.RelFrozenXid {
		t.Errorf("second vacuum: ChunksFrozen %d, RelFrozenXid %d", again.ChunksFrozen, again.RelFrozenXid)
	}
	mustVerify(t, db)
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, fsys := range map[string]*vfs.MemFS{"reopened": m, "after a crash": crashed} {
		opts.FS = fsys
		db := openTest(t, "/db", opts)
		if got, ok := get(t, db, "big"); !ok || got != big {
			t.Fatalf("%s: big has %d bytes, %v", name, len(got), ok)
		}
		if got := db.vac.relFrozenXid.Load(); got < st.RelFrozenXid {
			t.Errorf("%s: frozen xid found at open %d, below %d", name, got, st.RelFrozenXid)
		}
		mustVerify(t, db)
		db.Close()
	}
}

// holdSnapshot registers a snapshot until the returned function is called:
// the vacuum horizon stays below every later xid, so neither vacuum nor an
// update's prune of the page removes the versions written meanwhile.
func holdSnapshot(t testing.TB, db *DB) func() {
	t.Helper()
	tx, err := db.Begin(context.Background(), TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := tx.snapshot()
	_ = snap
	return func() { tx.Rollback() }
}

// TestUpdatePrunesItsChain updates one key many times with autovacuum off:
// the writes (and the reads of the chain they make first) that find the
// page full prune its dead versions, so the heap stays at a page or two
// instead of growing with every update. A snapshot held open stops the
// pruning of everything it may see, and what it saw stays readable.
func TestUpdatePrunesItsChain(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, "/db", opts)
	defer db.Close()
	val := func(i int) string { return fmt.Sprintf("%06d", i) + strings.Repeat("v", 200) }
	for i := range 5000 {
		mustPut(t, db, "hot", val(i))
	}
	if n := db.pool.NBlocks(); n > 2 {
		t.Errorf("5000 updates of one key left %d heap pages", n)
	}
	st := db.Stats()
	if st.Heap.PrunedByUpdate+st.Heap.PrunedByRead < 4000 || st.Heap.PrunesByUpdate+st.Heap.PrunesByRead == 0 {
		t.Errorf("%d prunes removed %d versions, want most of the 5000", st.Heap.PrunesByUpdate+st.Heap.PrunesByRead, st.Heap.PrunedByUpdate+st.Heap.PrunedByRead)
	}
	// The pruned versions are off autovacuum's dead-tuple count: 4,999
	// updates left 4,999 dead versions, and what is left is what the
	// prunes did not remove.
	if dead, pruned := db.av.dead.Load(), st.Heap.PrunedByUpdate+st.Heap.PrunedByRead; dead != 4999-int64(pruned) {
		t.Errorf("autovacuum counts %d dead tuples after %d of 4999 were pruned", dead, pruned)
	}
	mustVerify(t, db)

	reader, err := db.Begin(context.Background(), TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback()
	if v, err := reader.Get([]byte("hot")); err != nil || string(v) != val(4999) {
		t.Fatalf("reader: %.6s, %v", v, err)
	}
	before := db.Stats().Heap.PrunedByUpdate
	for i := 5000; i < 5400; i++ {
		mustPut(t, db, "hot", val(i))
	}
	if v, err := reader.Get([]byte("hot")); err != nil || string(v) != val(4999) {
		t.Fatalf("reader after 400 updates: %.6s, %v; want the version its snapshot saw", v, err)
	}
	if got := db.Stats().Heap.PrunedByUpdate - before; got > 1 {
		// Only versions below the one the snapshot sees may go: the
		// horizon is at the reader's snapshot.
		t.Logf("%d versions pruned under the open snapshot", got)
	}
	if got, _ := get(t, db, "hot"); got != val(5399) {
		t.Fatalf("hot = %.6s", got)
	}
	mustVerify(t, db)

	// The prunes are redone after a crash, torn last write or not.
	for name, c := range map[string]*vfs.MemFS{
		"DropUnsynced": m.CrashCopy(vfs.DropUnsynced, nil),
		"TearLast":     m.CrashCopy(vfs.TearLast, rand.New(rand.NewPCG(7, 9))),
	} {
		o := opts
		o.FS = c
		cdb := openTest(t, "/db", o)
		if got, ok := get(t, cdb, "hot"); !ok || got != val(5399) {
			t.Errorf("after a crash (%s): hot = %.6s, %v", name, got, ok)
		}
		mustVerify(t, cdb)
		cdb.Close()
	}
}

// TestVerifyAfterPruningPastCrashedVersion: a transaction that crashed with
// all its records before the redo point leaves a version in a key's chain
// whose xmin stays "in progress" in the CLOG. Later updates prune the
// versions above it, so the committed version below it names an updater
// whose version is gone. Verify must count the crashed version as aborted,
// as readers and vacuum do, and find the database healthy.
func TestVerifyAfterPruningPastCrashedVersion(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, "/db", opts)
	val := func(i int) string { return fmt.Sprintf("%06d", i) + strings.Repeat("v", 200) }
	if err := db.Update(context.Background(), func(tx *Txn) error {
		if err := tx.Put([]byte("hot"), []byte(val(0))); err != nil {
			return err
		}
		for i := range 10 {
			if err := tx.Put([]byte(fmt.Sprintf("filler-%03d", i)), []byte(strings.Repeat("f", 200))); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("hot"), []byte("never committed")); err != nil {
		t.Fatal(err)
	}
	// Fill the page (a snapshot held open: no pruning) so that hot's later
	// versions go to another page.
	release := holdSnapshot(t, db)
	for i := range 40 {
		mustPut(t, db, fmt.Sprintf("filler-%03d", i%10), strings.Repeat("g", 200))
	}
	release()
	if err := db.Checkpoint(); err != nil { // the redo point passes the open transaction's records
		t.Fatal(err)
	}
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	tx.Rollback()
	db.Close()

	opts.FS = crashed
	db = openTest(t, "/db", opts)
	defer db.Close()
	for i := 1; i <= 200; i++ {
		mustPut(t, db, "hot", val(i))
	}
	if st := db.Stats(); st.Heap.PrunesByUpdate+st.Heap.PrunesByRead == 0 {
		t.Fatal("no prune happened; the test needs one")
	}
	if got, _ := get(t, db, "hot"); got != val(200) {
		t.Fatalf("hot = %.6s", got)
	}
	mustVerify(t, db)
}

// TestUpdatePrunesBelowSnapshots updates one key while REPEATABLE READ
// snapshots stay open across a few updates each: the old version is often
// newer than some open snapshot, and the prune then keeps everything down
// to the newest version all snapshots see and removes what lies below it,
// so the key still stays on a few pages. The snapshots are taken and
// released by the writer's goroutine, so that how long each holds the
// horizon back is counted in updates, not left to the scheduler (readers
// in goroutines of their own, descheduled on a loaded machine, hold it
// back for hundreds of updates at times, and the pages grown then stay).
// Then readers in goroutines of their own run beside the updates: every
// read returns a committed value, never an older one than before.
func TestUpdatePrunesBelowSnapshots(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	val := func(i int) string { return fmt.Sprintf("%06d", i) + strings.Repeat("v", 200) }
	mustPut(t, db, "hot", val(0))
	ctx := context.Background()

	// A snapshot taken before every other update, each released three
	// updates later: at most two open at once.
	var open []*Txn
	for i := 1; i <= 5000; i++ {
		if i%2 == 0 {
			tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			// A read of a key that is not there takes the snapshot
			// and visits no page, so that the pruning below is the
			// updates' own (a read of "hot" prunes its page too).
			if _, err := tx.Get([]byte("absent")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("read of a missing key: %v", err)
			}
			open = append(open, tx)
		}
		if len(open) > 2 {
			if i%100 == 0 {
				if v, err := open[0].Get([]byte("hot")); err != nil || string(v[:6]) != fmt.Sprintf("%06d", i-5) {
					t.Fatalf("snapshot taken before update %d reads %.6s, %v", i-4, v, err)
				}
			}
			open[0].Rollback()
			open = open[1:]
		}
		mustPut(t, db, "hot", val(i))
	}
	for _, tx := range open {
		tx.Rollback()
	}
	st := db.Stats()
	pruned := st.Heap.PrunedByUpdate + st.Heap.PrunedByRead
	t.Logf("%d heap pages, %d versions pruned in %d prunes by updates and %d by reads", db.pool.NBlocks(), pruned, st.Heap.PrunesByUpdate, st.Heap.PrunesByRead)
	// Unpruned, the versions fill about 140 pages.
	if n := db.pool.NBlocks(); n > 4 || pruned < 4800 {
		t.Errorf("5000 updates next to snapshots held across 4 updates: %d heap pages, %d versions pruned", n, pruned)
	}

	// Readers of their own: what they see, not how much was pruned.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			last := -1
			for runCtx.Err() == nil {
				tx, err := db.Begin(runCtx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
				if err != nil {
					return
				}
				v, err := tx.Get([]byte("hot"))
				tx.Rollback()
				if err != nil {
					errc <- err
					return
				}
				var n int
				fmt.Sscanf(string(v[:6]), "%d", &n)
				if n < last || string(v) != val(n) {
					errc <- fmt.Errorf("read %.6s after %d", v, last)
					return
				}
				last = n
			}
		})
	}
	for i := 5001; i <= 7000; i++ {
		mustPut(t, db, "hot", val(i))
	}
	cancel()
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if after := db.Stats(); after.Heap.PrunedByUpdate+after.Heap.PrunedByRead <= pruned {
		t.Errorf("no version pruned during 2000 updates beside readers")
	}
	if got, _ := get(t, db, "hot"); got != val(7000) {
		t.Fatalf("hot = %.6s", got)
	}
	mustVerify(t, db)
}

// A REPEATABLE READ write of a key whose only version was frozen, with its
// xid below the CLOG truncation point, succeeds: the serialization check
// honours the Frozen bit before asking the CLOG, which no longer knows the
// xid.
func TestRepeatableReadWriteOfFrozenKeyBelowCLOGTruncation(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1})
	defer db.Close()
	mustPut(t, db, "frozen", "old")
	perSeg := uint64(clog.XidsPerPage * clog.PagesPerSegment)
	db.procs.mu.Lock()
	db.procs.nextXid = 3 * perSeg
	db.procs.mu.Unlock()
	mustPut(t, db, "other", "x")
	st := mustVacuum(t, db)
	if db.clog.OldestXid() <= 3 {
		t.Fatalf("CLOG not truncated past the frozen key's xid (RelFrozenXid %d, truncation point %d)", st.RelFrozenXid, db.clog.OldestXid())
	}
	for _, iso := range []IsolationLevel{RepeatableRead, ReadCommitted} {
		tx, err := db.Begin(context.Background(), TxnOptions{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := tx.Get([]byte("frozen")); err != nil || string(v) == "" {
			t.Fatalf("%v: Get = %q, %v", iso, v, err)
		}
		if err := tx.Put([]byte("frozen"), []byte(fmt.Sprint("new ", iso))); err != nil {
			t.Fatalf("%v: Put of a frozen key below the CLOG truncation point: %v", iso, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		mustVacuum(t, db) // freeze the new version too
	}
	mustVerify(t, db)
}

// leaveDeadTuples opens a database in dir with autovacuum off, updates 30
// keys once and deletes deletes of them with a snapshot held (so nothing
// is pruned), and closes it; it returns the dead-tuple count at the close.
func leaveDeadTuples(t *testing.T, dir string, opts Options, deletes int) int64 {
	t.Helper()
	opts.Autovacuum = noAutovacuum
	db := openTest(t, dir, opts)
	release := holdSnapshot(t, db) // no pruning
	for i := range 30 {
		mustPut(t, db, fmt.Sprint("k", i), "a")
		mustPut(t, db, fmt.Sprint("k", i), "b")
	}
	for i := range deletes {
		mustDelete(t, db, fmt.Sprint("k", i))
	}
	release()
	_, dead := db.autovacuumDue()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dead
}

// The dead-tuple count survives a restart: the scan at open counts the dead
// versions it finds, so autovacuum still owes the run a crash would
// otherwise make it forget.
func TestAutovacuumDebtSurvivesRestart(t *testing.T) {
	dir, opts := t.TempDir(), Options{AutovacuumVacuumThreshold: 10}
	before := leaveDeadTuples(t, dir, opts, 5)
	opts.Autovacuum = noAutovacuum
	db := openTest(t, dir, opts)
	defer db.Close()
	due, after := db.autovacuumDue()
	if before != 35 || after != 35 || !due {
		t.Fatalf("dead tuples %d before the restart, %d after (due %v); want 35 and 35, due", before, after, due)
	}
}

// The dead-tuple count survives a crash too, where Open takes the index
// file's count and adds what the replayed transactions left, each as its
// end counts it: the versions a rolled-back transaction inserted and those
// of one the crash cut off are dead, and a rolled-back delete kills
// nothing. Counting update and delete records alone forgot the former and
// counted the latter.
func TestAutovacuumDebtSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	if err := db.Checkpoint(); err != nil { // the index file Open will read
		t.Fatal(err)
	}
	release := holdSnapshot(t, db) // no pruning
	defer release()
	for i := range 30 {
		mustPut(t, db, fmt.Sprint("k", i), "a")
		mustPut(t, db, fmt.Sprint("k", i), "b") // 30 dead
	}
	write := func(f func(tx *Txn, i int) error, n int) *Txn {
		tx, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := f(tx, i); err != nil {
				t.Fatal(err)
			}
		}
		return tx
	}
	write(func(tx *Txn, i int) error { return tx.Put([]byte(fmt.Sprint("m", i)), []byte("x")) }, 10).Rollback() // 10 dead
	write(func(tx *Txn, i int) error { return tx.Delete([]byte(fmt.Sprint("k", i))) }, 5).Rollback()            // none
	open := write(func(tx *Txn, i int) error { return tx.Put([]byte(fmt.Sprint("n", i)), []byte("x")) }, 20)    // 20 at the crash
	defer open.Rollback()
	db2 := reopenCrashCopy(t, db, dir, 40, " (and 20 of the open transaction)")
	if _, dead := db2.autovacuumDue(); dead != 60 {
		t.Fatalf("dead tuples after the crash: %d, want 60 (30 updates, 10 rolled-back inserts, 20 inserts the crash aborted)", dead)
	}
}

// Autovacuum pays the debt found at open soon after it, not a naptime
// later: a process restarted more often than the naptime would otherwise
// never vacuum.
func TestAutovacuumRunsSoonAfterOpen(t *testing.T) {
	dir, opts := t.TempDir(), Options{AutovacuumVacuumThreshold: 10}
	leaveDeadTuples(t, dir, opts, 0)
	opts.AutovacuumNaptime = time.Hour
	db := openTest(t, dir, opts)
	defer db.Close()
	// Liveness, not speed: the first check is due a second after open;
	// the deadline only bounds a hang.
	for deadline := time.Now().Add(time.Minute); db.Stats().Vacuum.AutovacuumRuns == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no autovacuum run within a minute of open, with the debt due and a naptime of an hour")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if due, dead := db.autovacuumDue(); due {
		t.Fatalf("after the run, %d dead tuples still due", dead)
	}
}

// Readers at REPEATABLE READ and READ COMMITTED run against transfers whose
// pages fill and are pruned by updates and reads, and against vacuum runs
// in a loop: every statement must see exactly one consistent state (the
// total holds in each scan), and a REPEATABLE READ transaction the same
// state in all its statements, key by key.
func TestReadersAgainstPruningAndVacuum(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize, VacuumFreezeMinAge: -1})
	defer db.Close()
	const accounts, initial = 200, 1000
	pad := strings.Repeat("p", 120) // about 60 versions a page: pages fill fast
	key := func(i int) []byte { return fmt.Appendf(nil, "acct%03d", i) }
	parse := func(b []byte) int {
		n := 0
		fmt.Sscan(strings.TrimRight(string(b), "p"), &n)
		return n
	}
	for i := 0; i < accounts; i++ {
		mustPut(t, db, string(key(i)), fmt.Sprint(initial, pad))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var writers, others sync.WaitGroup
	errc := make(chan error, 16)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	for w := 0; w < 3; w++ {
		writers.Add(1)
		go func(w int) {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; i < 1500; i++ {
				a, b := r.IntN(accounts), r.IntN(accounts)
				if a >= b {
					continue // key order: no deadlocks
				}
				err := db.Update(context.Background(), func(tx *Txn) error {
					for _, x := range []struct{ k, d int }{{a, -3}, {b, 3}} {
						if err := tx.Update(key(x.k), func(old []byte, _ bool) ([]byte, error) {
							return []byte(fmt.Sprint(parse(old)+x.d, pad)), nil
						}); err != nil {
							return err
						}
					}
					if r.IntN(8) == 0 {
						return errors.New("abort")
					}
					return nil
				})
				if err != nil && err.Error() != "abort" {
					report(err)
					return
				}
			}
		}(w)
	}
	scan := func(tx *Txn) (map[string]int, error) {
		m := map[string]int{}
		sum := 0
		err := tx.Scan(nil, nil, func(k, v []byte) bool { m[string(k)] = parse(v); sum += parse(v); return true })
		if err == nil && (sum != accounts*initial || len(m) != accounts) {
			err = fmt.Errorf("a scan saw %d accounts totalling %d", len(m), sum)
		}
		return m, err
	}
	for _, iso := range []IsolationLevel{RepeatableRead, ReadCommitted} {
		others.Add(1)
		go func(iso IsolationLevel) {
			defer others.Done()
			r := rand.New(rand.NewPCG(uint64(iso), 5))
			for ctx.Err() == nil {
				tx, err := db.Begin(ctx, TxnOptions{Isolation: iso, ReadOnly: true})
				if err != nil {
					if ctx.Err() == nil {
						// Not the cancel that ends the test.
						report(err)
					}
					return
				}
				first, err := scan(tx)
				for pass := 0; pass < 3 && err == nil; pass++ {
					var again map[string]int
					if again, err = scan(tx); err == nil && iso == RepeatableRead && !maps.Equal(first, again) {
						err = fmt.Errorf("repeatable read: two scans of one transaction differ")
					}
					// Point reads walk the chains one key at a time.
					for j := 0; j < 20 && err == nil && iso == RepeatableRead; j++ {
						k := key(r.IntN(accounts))
						v, gerr := tx.Get(k)
						if gerr != nil || parse(v) != first[string(k)] {
							err = fmt.Errorf("repeatable read: Get(%s) = %q, %v; its first scan saw %d", k, v, gerr, first[string(k)])
						}
					}
				}
				tx.Rollback()
				if err != nil && !errors.Is(err, context.Canceled) {
					report(fmt.Errorf("%v: %w", iso, err))
					return
				}
			}
		}(iso)
	}
	others.Add(1)
	go func() {
		defer others.Done()
		// Not back to back: pruning by updates and reads must get pages
		// to prune between runs.
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			if _, err := db.Vacuum(ctx); err != nil && !errors.Is(err, context.Canceled) {
				report(err)
				return
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	writers.Wait()
	cancel()
	others.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	s := db.Stats()
	if s.Heap.PrunesByUpdate+s.Heap.PrunesByRead == 0 || s.Vacuum.Runs == 0 {
		t.Errorf("no pruning outside vacuum (%d by updates, %d by reads) or no vacuum run (%d): the test did not test it", s.Heap.PrunesByUpdate, s.Heap.PrunesByRead, s.Vacuum.Runs)
	}
	t.Logf("pages pruned: %d by updates, %d by reads, %d by vacuum in %d runs", s.Heap.PrunesByUpdate, s.Heap.PrunesByRead, s.Vacuum.PagesPruned, s.Vacuum.Runs)
	mustVerify(t, db)
}

// A vacuum of a heap many times the size of the buffer pool reads each page
// at most twice, takes no more frames from the pool than its ring holds,
// and leaves the working set in the pool: keys read before the run are
// read after it without a page read.
func TestVacuumRingKeepsWorkingSet(t *testing.T) {
	const frames = 64 // 512 KiB; the ring is an eighth: 8 frames
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: frames * heap.PageSize})
	defer db.Close()
	const keys = 8000
	key := func(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }
	put := func(v string) {
		t.Helper()
		err := db.Update(context.Background(), func(tx *Txn) error {
			for i := 0; i < keys; i++ {
				if err := tx.Put(key(i), []byte(v)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(strings.Repeat("a", 200))
	release := holdSnapshot(t, db) // no pruning: vacuum finds every dead version
	put(strings.Repeat("b", 200))
	release()
	nblocks := uint64(db.pool.NBlocks())
	if nblocks < 4*frames {
		t.Fatalf("heap of %d pages, want at least four times the pool's %d", nblocks, frames)
	}
	hot := func() {
		t.Helper()
		for round := 0; round < 6; round++ {
			for i := 0; i < 10; i++ {
				if _, ok := get(t, db, string(key(i*7))); !ok {
					t.Fatalf("%s missing", key(i*7))
				}
			}
		}
	}
	hot()
	st := mustVacuum(t, db)
	before := db.Stats()
	hot()
	if d := db.Stats().Sub(before); d.Buffers.Misses != 0 {
		t.Errorf("reading the working set after vacuum missed the pool %d times", d.Buffers.Misses)
	}
	t.Logf("heap %d pages, pool %d: vacuum scanned %d, revisited %d, read %d from disk, took %d frames from the pool; removed %d versions",
		nblocks, frames, st.PagesScanned, st.PagesRevisited, st.PagesRead, st.RingSwept, st.TuplesRemoved)
	if st.PagesScanned+st.PagesRevisited > 2*nblocks || st.PagesRead > st.PagesScanned+st.PagesRevisited {
		t.Errorf("vacuum scanned %d pages and revisited %d of a %d-page heap", st.PagesScanned, st.PagesRevisited, nblocks)
	}
	if st.RingSwept > frames/8 {
		t.Errorf("vacuum took %d frames from the pool, more than its ring of %d", st.RingSwept, frames/8)
	}
	if st.TuplesRemoved != keys {
		t.Errorf("vacuum removed %d versions, want %d", st.TuplesRemoved, keys)
	}
}

// Autovacuum that fails the same way every naptime (a heap page that fails
// its checksum) says so once, not once a naptime.
func TestAutovacuumRepeatedFailureLoggedOnce(t *testing.T) {
	dir := filledAndClosed(t, 400)
	file := filepath.Join(dir, heapDir, "00000000")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[heap.PageSize/2] ^= 0x55 // block 0, inside its tuples
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	on := true
	db, err := Open(dir, Options{Autovacuum: &on, AutovacuumNaptime: 2 * time.Millisecond,
		AutovacuumVacuumThreshold: 1, AutovacuumVacuumScaleFactor: -1,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 20; i++ {
		mustPut(t, db, "key-00399", fmt.Sprint(i)) // on the last page
	}
	deadline := time.Now().Add(10 * time.Second)
	for db.Stats().Vacuum.AutovacuumFailures < 20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logged.String(), "autovacuum failed"); n != 1 {
		t.Fatalf("%d autovacuum failure messages, want 1:\n%s", n, logged.String())
	}
}

// describePrune names the chunks a pruning record lists for vacuum, the
// first eight, in the singular for one.
func TestDescribePruneListedChunks(t *testing.T) {
	pages := []*prunePage{{block: 7, unused: []uint16{1, 3}}}
	one := describePrune(encodePrune(pages, []chunkID{{heap.TID{Block: 8, Slot: 0}, 5}}), flagPruneChunks)
	if !strings.HasSuffix(one, " (compacted); lists 1 chunk for vacuum: (8,0)") {
		t.Errorf("one chunk: %q", one)
	}
	var many []chunkID
	for i := range 10 {
		many = append(many, chunkID{heap.TID{Block: uint32(i), Slot: 1}, 5})
	}
	if got := describePrune(encodePrune(pages, many), flagPruneChunks); !strings.HasSuffix(got, "; lists 10 chunks for vacuum: (0,1) (1,1) (2,1) (3,1) (4,1) (5,1) (6,1) (7,1) …") {
		t.Errorf("ten chunks: %q", got)
	}
}

// Autovacuum runs, whatever the dead-tuple count, once the frozen horizon
// lags the vacuum horizon by autovacuum_freeze_max_age, and its run
// freezes enough for the CLOG to be truncated: a workload that leaves no
// dead tuples (inserts only) would otherwise never vacuum, and the CLOG
// would grow for ever. The run must also leave the trigger off (the freeze
// ages are capped by it), or it would start again at every nap. Without
// the trigger no run comes: 20 inserts leave no dead tuple.
func TestAutovacuumFreezeMaxAge(t *testing.T) {
	dir := t.TempDir()
	opts := Options{AutovacuumFreezeMaxAge: 100_000, AutovacuumNaptime: 5 * time.Millisecond}
	db := openTest(t, dir, opts)
	defer db.Close()
	for i := 0; i < 20; i++ {
		mustPut(t, db, fmt.Sprint("k", i), "old")
	}
	perSeg := uint64(clog.XidsPerPage * clog.PagesPerSegment)
	db.procs.mu.Lock()
	db.procs.nextXid = 3 * perSeg
	db.procs.mu.Unlock()
	for i := 20; i < 40; i++ {
		mustPut(t, db, fmt.Sprint("k", i), "new")
	}
	if _, dead := db.autovacuumDue(); dead != 0 {
		t.Fatalf("%d dead tuples after inserts only, want 0", dead)
	}
	// Liveness, not speed: the deadline only bounds a hang. Both counts:
	// the run truncates the CLOG before the worker counts the run.
	for deadline := time.Now().Add(time.Minute); db.Stats().CLOG.Truncations == 0 || db.Stats().Vacuum.AutovacuumRuns == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no autovacuum run and CLOG truncation within a minute; autovacuum runs %d, truncations %d, frozen horizon %d, vacuum horizon %d",
				db.Stats().Vacuum.AutovacuumRuns, db.Stats().CLOG.Truncations, db.vac.relFrozenXid.Load(), db.oldestXmin())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if db.freezeDue() {
		t.Fatalf("after the run the frozen horizon %d still lags the vacuum horizon %d by the maximum age: every nap would run again",
			db.vac.relFrozenXid.Load(), db.oldestXmin())
	}
	// The old keys' xids lie in segment 0 and are frozen; the new keys'
	// start segment 3, the frozen horizon now.
	if got := clogSegment(db.clog.OldestXid()); got != 3 {
		t.Fatalf("CLOG truncated to segment %d, want 3, the new keys' xids", got)
	}
	for i := 0; i < 40; i++ {
		want := "old"
		if i >= 20 {
			want = "new"
		}
		if got, ok := get(t, db, fmt.Sprint("k", i)); !ok || got != want {
			t.Fatalf("k%d = %q, %v; want %q", i, got, ok, want)
		}
	}
	mustVerify(t, db)
}

// A crash after a vacuum does not count again the versions the vacuum
// removed: recovery takes the slots the replayed pruning records free off
// the dead tuples the replayed transactions left, as the running count
// took the vacuum's run off. With out-of-line values, the slots of the
// chunks vacuum frees in its second pass are not versions: taking them
// off as versions made a crash after vacuuming large values forget the
// versions that died after the run.
func TestAutovacuumDebtAfterCrashLessVacuumed(t *testing.T) {
	for _, c := range []struct{ name, old string }{
		{"inline", "a"},
		{"out of line", strings.Repeat("x", 12_000)}, // several chunks each
	} {
		t.Run(c.name, func(t *testing.T) { testDebtAfterCrashLessVacuumed(t, c.old) })
	}
}

func testDebtAfterCrashLessVacuumed(t *testing.T, old string) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	if err := db.Checkpoint(); err != nil { // the index file Open will read
		t.Fatal(err)
	}
	for i := range 30 {
		mustPut(t, db, fmt.Sprint("k", i), old)
		mustPut(t, db, fmt.Sprint("k", i), "b") // 30 dead, with any chunks
	}
	st, err := db.Vacuum(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(old) > 1 && st.ChunksRemoved <= st.TuplesRemoved {
		t.Fatalf("vacuum removed %d chunks of %d versions; the test wants several a version", st.ChunksRemoved, st.TuplesRemoved)
	}
	for i := range 7 {
		mustPut(t, db, fmt.Sprint("k", i), "c") // 7 dead after the vacuum
	}
	db2 := reopenCrashCopy(t, db, dir, 7, "")
	if _, dead := db2.autovacuumDue(); dead != 7 {
		t.Fatalf("dead tuples after the crash: %d, want 7 (the 30 the vacuum removed, or its freed chunks, taken off or counted again?)", dead)
	}
	if st := db2.Stats(); st.Vacuum.DeadTuples != 7 {
		t.Fatalf("Stats().Vacuum.DeadTuples = %d, want 7", st.Vacuum.DeadTuples)
	}
}

// TestAutovacuumRechecksAfterManualVacuum runs a VACUUM between the
// worker's finding a run due and its run taking vacuum's lock, as a long
// manual VACUUM holding the lock would: the VACUUM pays the count, and the
// worker, checking again once it holds the lock as PostgreSQL's
// table_recheck_autovac does, must not run a second pass over the heap
// for the debt just paid.
func TestAutovacuumRechecksAfterManualVacuum(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{AutovacuumNaptime: time.Millisecond,
		AutovacuumVacuumThreshold: 5, AutovacuumVacuumScaleFactor: -1, CheckpointTimeout: -1})
	defer db.Close()
	due := make(chan struct{})
	release := make(chan struct{})
	naps := make(chan bool, 1)
	first := true // the worker's goroutine alone reads and writes it
	db.testAutovacuumNap = func(d bool) {
		if d && first {
			first = false
			close(due)
			<-release
			return
		}
		select {
		case naps <- d:
		default:
		}
	}
	for i := range 10 {
		mustPut(t, db, "k", fmt.Sprint(i)) // 9 dead versions
	}
	select {
	case <-due:
	case <-time.After(time.Minute):
		t.Fatal("autovacuum never found a run due")
	}
	mustVacuum(t, db)
	if d := db.av.dead.Load(); d != 0 {
		t.Fatalf("dead count after VACUUM: %d, want 0", d)
	}
	before := db.vac.runs.Load()
	// The worker waits in the hook: no nap is reported until the release
	// but those before it, dropped here.
	select {
	case <-naps:
	default:
	}
	close(release)
	// The next nap: the worker is past the run it found due.
	select {
	case <-naps:
	case <-time.After(time.Minute):
		t.Fatal("autovacuum stopped napping")
	}
	if got := db.vac.runs.Load() - before; got != 0 {
		t.Errorf("autovacuum ran %d vacuum(s) after a VACUUM had paid the count it found due", got)
	}
}

// reopenCrashCopy flushes db's WAL, checks that autovacuum's dead-tuple
// count is wantBefore (note explains it in the failure), and opens a copy
// of dir as a kill would leave it, which must load the index file (whose
// count the tests check); the copy is closed when the test ends.
func reopenCrashCopy(t *testing.T, db *DB, dir string, wantBefore int64, note string) *DB {
	t.Helper()
	if err := db.wal.FlushAll(); err != nil {
		t.Fatal(err)
	}
	if _, dead := db.autovacuumDue(); dead != wantBefore {
		t.Fatalf("dead tuples before the crash: %d, want %d%s", dead, wantBefore, note)
	}
	crashed := t.TempDir()
	copyDir(t, dir, crashed) // what a kill leaves: the WAL is flushed
	db2 := openTest(t, crashed, Options{Autovacuum: noAutovacuum})
	t.Cleanup(func() { db2.Close() })
	if !db2.Recovery().IndexFromFile {
		t.Fatal("the index was rebuilt from the heap; the test wants the index file's count")
	}
	return db2
}
