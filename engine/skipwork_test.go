package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/vfs"
)

// Tests of the parts that let a reader skip work (hint bits, the
// visibility map, freezing, CLOG truncation, index-only reads): whatever
// they skip, a reader returns what the per-tuple rules would.

// belowTruncationState writes keys whose versions all carry xids of CLOG
// segment 0: plain, updated, deleted, updated and deleted by transactions
// that rolled back (an aborted xmax), some out of line. It returns what a
// reader must see.
func belowTruncationState(t *testing.T, db *DB) ladderState {
	t.Helper()
	ctx := context.Background()
	want := ladderState{}
	for i := range 40 {
		k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("%s%d", strings.Repeat("v", 200), i)
		if i%10 == 3 {
			v = fmt.Sprintf("%s%d", strings.Repeat("B", 12000), i)
		}
		mustPut(t, db, k, v)
		want[k] = v
	}
	for i := 0; i < 40; i += 4 {
		k := fmt.Sprintf("k%02d", i)
		mustPut(t, db, k, "updated "+k)
		want[k] = "updated " + k
		mustDelete(t, db, fmt.Sprintf("k%02d", i+1))
		delete(want, fmt.Sprintf("k%02d", i+1))
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i%8 == 0 {
			err = tx.Delete(fmt.Appendf(nil, "k%02d", i+2))
		} else {
			err = tx.Put(fmt.Appendf(nil, "k%02d", i+2), []byte("rolled back"))
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// checkReadPaths reads db through every read path at both isolation
// levels and compares with want.
func checkReadPaths(t *testing.T, db *DB, want ladderState, when string) {
	t.Helper()
	ctx := context.Background()
	keys := slices.Sorted(maps.Keys(want))
	for _, iso := range []IsolationLevel{RepeatableRead, ReadCommitted} {
		tx, err := db.Begin(ctx, TxnOptions{Isolation: iso, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		fail := func(format string, args ...any) {
			t.Helper()
			tx.Rollback()
			t.Fatalf("%s, %v: %s", when, iso, fmt.Sprintf(format, args...))
		}
		for i := range 45 {
			k := fmt.Sprintf("k%02d", i)
			v, err := tx.Get([]byte(k))
			w, ok := want[k]
			switch {
			case ok && (err != nil || string(v) != w):
				fail("Get %s = %.20q, %v; want %.20q", k, v, err, w)
			case !ok && !errors.Is(err, ErrNotFound):
				fail("Get %s = %.20q, %v; want ErrNotFound", k, v, err)
			}
			p, n, err := tx.GetPrefix([]byte(k), 5)
			switch {
			case ok && (err != nil || string(p) != w[:min(5, len(w))] || n != len(w)):
				fail("GetPrefix %s = %q, %d, %v", k, p, n, err)
			case !ok && !errors.Is(err, ErrNotFound):
				fail("GetPrefix %s: %v, want ErrNotFound", k, err)
			}
			if e, err := tx.Exists([]byte(k)); err != nil || e != ok {
				fail("Exists %s = %v, %v; want %v", k, e, err, ok)
			}
		}
		got := ladderState{}
		if err := tx.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
			fail("Scan: %v", err)
		}
		if d := diffState(got, want); d != "" {
			fail("Scan: %s", d)
		}
		var pk []string
		err = tx.ScanPrefix(nil, nil, 3, func(k, p []byte, n int) bool {
			if w := want[string(k)]; string(p) != w[:min(3, len(w))] || n != len(w) {
				pk = append(pk, "bad "+string(k))
			}
			pk = append(pk, string(k))
			return true
		})
		if err != nil || !slices.Equal(pk, keys) {
			fail("ScanPrefix: %v, %v; want %v", pk, err, keys)
		}
		var sk []string
		if err := tx.ScanKeys(nil, nil, func(k []byte) bool { sk = append(sk, string(k)); return true }); err != nil || !slices.Equal(sk, keys) {
			fail("ScanKeys: %v, %v; want %v", sk, err, keys)
		}
		if n, err := tx.Count(nil, nil); err != nil || n != len(want) {
			fail("Count = %d, %v; want %d", n, err, len(want))
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := db.StatTuple(ctx, func(k []byte) string { return string(k[:min(1, len(k))]) }); err != nil {
		t.Fatalf("%s: StatTuple: %v", when, err)
	}
	mustVerify(t, db)
}

// writeBelowTruncation writes every key of want through Update, Delete
// and DeleteRange at both isolation levels, rolling each transaction
// back (state unchanged) but the last, whose changes it applies to want.
func writeBelowTruncation(t *testing.T, db *DB, want ladderState, when string) {
	t.Helper()
	ctx := context.Background()
	for round, iso := range []IsolationLevel{RepeatableRead, ReadCommitted, RepeatableRead} {
		commit := round == 2
		tx, err := db.Begin(ctx, TxnOptions{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		next := maps.Clone(want)
		for i := range 45 {
			k := fmt.Sprintf("k%02d", i)
			if i%3 == 0 {
				err = tx.Update([]byte(k), func(old []byte, found bool) ([]byte, error) {
					if w, ok := want[k]; found != ok || string(old) != w {
						return nil, fmt.Errorf("Update %s saw %.20q, %v; want %.20q", k, old, found, w)
					}
					return []byte("rewritten " + k), nil
				})
				next[k] = "rewritten " + k
			} else if i%3 == 1 && i < 30 {
				err = tx.Delete([]byte(k))
				delete(next, k)
			}
			if err != nil {
				tx.Rollback()
				t.Fatalf("%s, %v: %v", when, iso, err)
			}
		}
		var gone []string
		n, err := tx.DeleteRange([]byte("k30"), []byte("k40"), func(k, old []byte) {
			if w := want[string(k)]; string(old) != w && string(old) != "rewritten "+string(k) {
				gone = append(gone, "bad old value of "+string(k))
			}
			gone = append(gone, string(k))
		})
		if err != nil {
			tx.Rollback()
			t.Fatalf("%s, %v: DeleteRange: %v", when, iso, err)
		}
		for _, k := range gone {
			delete(next, k)
		}
		if n != len(gone) {
			t.Fatalf("%s, %v: DeleteRange said %d, called back %d", when, iso, n, len(gone))
		}
		if !commit {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("%s, %v: Commit: %v", when, iso, err)
		}
		clear(want)
		maps.Copy(want, next)
	}
}

// TestReadPathsBelowCLOGTruncation: versions written in CLOG segment 0,
// some of them then updated or deleted in segment 3 while a snapshot
// older than those changes stays open, are frozen by a vacuum that
// truncates segments 0 to 2. Every read and write path, the open
// snapshot's included, must read them as before, and so must a backup of
// the database, a crash copy and the database reopened; then the old
// snapshot ends, vacuum removes what it held, and it all holds again,
// down to a bulk load into the emptied database.
func TestReadPathsBelowCLOGTruncation(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1, SharedBuffers: 16 * heap.PageSize}
	db := openTest(t, "/db", opts)
	defer func() { db.Close() }()
	ctx := context.Background()
	want := belowTruncationState(t, db)
	db.procs.setNext(3*clogSegXids + 10)

	// A snapshot older than the changes below, which keeps the versions
	// they replace (xmin frozen below the truncation point, xmax above).
	old, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	if _, err := old.Get([]byte("k00")); err != nil {
		t.Fatal(err)
	}
	oldWant := maps.Clone(want)
	mustPut(t, db, "k00", "seg 3 value")
	want["k00"] = "seg 3 value"
	mustDelete(t, db, "k02")
	delete(want, "k02")
	mustPut(t, db, "k03", "seg3 over an out-of-line value")
	want["k03"] = "seg3 over an out-of-line value"
	tx, _ := db.Begin(ctx, TxnOptions{})
	if err := tx.Delete([]byte("k06")); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()

	st := mustVacuum(t, db)
	if st.TuplesFrozen == 0 || db.clog.OldestXid() < 3*clogSegXids {
		t.Fatalf("vacuum froze %d versions, CLOG truncated below %d: the test tests nothing", st.TuplesFrozen, db.clog.OldestXid())
	}
	checkOld := func(when string) {
		t.Helper()
		got := ladderState{}
		if err := old.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
			t.Fatalf("%s: old snapshot's Scan: %v", when, err)
		}
		if d := diffState(got, oldWant); d != "" {
			t.Fatalf("%s: old snapshot's Scan: %s", when, d)
		}
		for _, k := range []string{"k00", "k02", "k03", "k06"} {
			v, err := old.Get([]byte(k))
			if w, ok := oldWant[k]; err != nil || string(v) != w || !ok {
				t.Fatalf("%s: old snapshot's Get %s = %.20q, %v; want %.20q", when, k, v, err, w)
			}
		}
		if n, err := old.Count(nil, nil); err != nil || n != len(oldWant) {
			t.Fatalf("%s: old snapshot's Count = %d, %v; want %d", when, n, err, len(oldWant))
		}
	}
	checkOld("after the truncating vacuum")
	checkReadPaths(t, db, want, "after the truncating vacuum")
	crash := m.CrashCopy(vfs.DropUnsynced, nil)
	if _, err := db.Backup(ctx, "/bk"); err != nil {
		t.Fatal(err)
	}
	checkOld("after the backup")
	writeBelowTruncation(t, db, want, "with the old snapshot open")
	checkReadPaths(t, db, want, "after writes")
	checkOld("after writes")

	bk := openVerifiedCopy(t, m, "/bk", 1<<20)
	bkWant := maps.Clone(oldWant)
	bkWant["k00"], bkWant["k03"] = "seg 3 value", "seg3 over an out-of-line value"
	delete(bkWant, "k02")
	crashWant := maps.Clone(bkWant)
	checkReadPaths(t, bk, bkWant, "backup copy")
	writeBelowTruncation(t, bk, bkWant, "backup copy")
	checkReadPaths(t, bk, bkWant, "backup copy after writes")
	bk.Close()

	c := openTest(t, "/db", Options{FS: crash, Autovacuum: noAutovacuum})
	if c.clog.OldestXid() < 3*clogSegXids {
		t.Fatalf("crash copy: CLOG truncation point %d", c.clog.OldestXid())
	}
	checkReadPaths(t, c, crashWant, "crash copy")
	c.Close()

	old.Rollback()
	st = mustVacuum(t, db)
	checkReadPaths(t, db, want, "after the old snapshot ended and vacuum ran")
	db.procs.setNext(5*clogSegXids + 10)
	mustPut(t, db, "k44", "seg 5 value")
	want["k44"] = "seg 5 value"
	mustVacuum(t, db)
	if db.clog.OldestXid() < 5*clogSegXids {
		t.Fatalf("second truncation: point %d", db.clog.OldestXid())
	}
	checkReadPaths(t, db, want, "after the second truncation")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1})
	checkReadPaths(t, db, want, "reopened")
	writeBelowTruncation(t, db, want, "reopened")
	checkReadPaths(t, db, want, "reopened, after writes")

	// Empty it, and load it again in bulk.
	if err := db.Update(ctx, func(tx *Txn) error { _, err := tx.DeleteRange(nil, nil, nil); return err }); err != nil {
		t.Fatal(err)
	}
	mustVacuum(t, db)
	rng := rand.New(rand.NewPCG(1, 2))
	want = ladderState{}
	for i := range 45 {
		want[fmt.Sprintf("k%02d", i)] = fmt.Sprint("bulk ", rng.IntN(1000))
	}
	_, err = db.BulkLoad(ctx, func(yield func([]byte, []byte) bool) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if !yield([]byte(k), []byte(want[k])) {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	checkReadPaths(t, db, want, "after a bulk load")
}

// TestCrashLadderHintsAndFreezing is the crash ladder with the work
// skippers busy around commits that are not durable yet: a third of the
// commits asynchronous and the rest released early (the default), a WAL
// writer that never runs (an asynchronous commit stays in the WAL buffer
// until a later flush), a buffer pool of 16 pages (evictions write pages
// between checkpoints), readers after every commit (hint bits), and an
// aggressive vacuum every few transactions (freezing every committed
// version below the horizon, setting all-visible and all-frozen bits).
// At every crash point checked the copy must recover to a commit prefix
// that includes every acknowledged commit: a hint, a frozen version or a
// map bit that reached disk ahead of its commit record would show a
// transaction whose commit was lost.
func TestCrashLadderHintsAndFreezing(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	work := ladderWorkload(seed, 90)
	for i := range work {
		work[i].sync = i%3 != 0
	}
	sample := *ladderSample
	if sample <= 0 {
		sample = 3
		if raceEnabled {
			sample = 32
		}
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	var hints, frozen, visible uint64
	cfg := ladderConfig{
		tweak: func(o *Options) {
			o.WALWriterDelay = time.Hour
			o.VacuumFreezeMinAge = -1
			o.SharedBuffers = 16 * heap.PageSize
			o.Autovacuum = noAutovacuum
		},
		between: func(ctx context.Context, db *DB, i int) error {
			for range 3 {
				k := fmt.Appendf(nil, "k%02d", rng.IntN(30))
				err := db.View(ctx, func(tx *Txn) error { _, err := tx.Get(k); return err })
				if err != nil && !errors.Is(err, ErrNotFound) {
					return err
				}
			}
			if i%5 == 2 {
				st, err := db.Vacuum(ctx)
				if err != nil {
					return err
				}
				frozen += st.TuplesFrozen
				visible += st.PagesAllVisible
			}
			hints = db.Stats().Heap.HintBitsSet
			return nil
		},
	}
	points, checked, err := crashLadderWith(seed, work, sample, 1<<30, 0, cfg)
	if err != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, err)
	}
	if hints == 0 || frozen == 0 || visible == 0 {
		t.Fatalf("seed %d: %d hint bits set, %d versions frozen, %d pages marked all-visible: the workload no longer tests them", seed, hints, frozen, visible)
	}
	t.Logf("seed %d: %d file-system operations, %d crash copies checked; %d hint bits set, %d versions frozen, %d pages marked all-visible", seed, points, checked, hints, frozen, visible)
}

// TestCLOGEvictionAndTruncationUnderLoad: writers commit and roll back
// over their own keys while the xids jump from CLOG page to CLOG page (a
// pool of 16 CLOG buffers, so the pages of older xids are evicted and
// read back), vacuum freezes and truncates the CLOG behind them, and
// REPEATABLE READ readers hold snapshots across the jumps. Every writer
// reads back what it committed, every reader reads the same state twice
// in its transaction, and at the end every key holds its last committed
// value, Verify finds nothing, and so does a reopened database.
func TestCLOGEvictionAndTruncationUnderLoad(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1,
		CLOGBuffers: 16, SharedBuffers: 64 * heap.PageSize}
	db := openTest(t, "/db", opts)
	defer func() { db.Close() }()
	ctx := context.Background()
	const writers, keysEach, rounds = 4, 12, 150
	models := make([]ladderState, writers)
	stop := make(chan struct{})
	tick := make(chan struct{}, 1) // a writer finished a round
	var wg, bg sync.WaitGroup
	var reads atomic.Uint64
	var truncations atomic.Int64
	for w := range writers {
		models[w] = ladderState{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			model := models[w]
			// Past rounds until a vacuum has truncated the CLOG under
			// the load (at most 40 times as many): on a fast machine the
			// writers could end before the fourth tick's vacuum, or
			// before one found a truncation, and the test would test nothing.
			for n := 0; n < rounds || (truncations.Load() == 0 && n < 40*rounds); n++ {
				k := fmt.Sprintf("w%d-%02d", w, rng.IntN(keysEach))
				v := fmt.Sprintf("%d", n)
				abort := rng.IntN(4) == 0
				del := rng.IntN(6) == 0
				errAbort := errors.New("rolled back")
				err := db.Update(ctx, func(tx *Txn) error {
					var err error
					if del {
						err = tx.Delete([]byte(k))
					} else {
						err = tx.Put([]byte(k), []byte(v))
					}
					if err == nil && abort {
						err = errAbort
					}
					return err
				})
				switch {
				case abort && errors.Is(err, errAbort):
				case err != nil:
					t.Errorf("writer %d: %s: %v", w, k, err)
					return
				case del:
					delete(model, k)
				default:
					model[k] = v
				}
				select {
				case tick <- struct{}{}:
				default:
				}
				for i := range 2 {
					if i == 1 {
						k = fmt.Sprintf("w%d-%02d", w, rng.IntN(keysEach))
					}
					// Not get, whose t.Fatalf belongs to the test's
					// goroutine.
					var got string
					ok := true
					err := db.View(ctx, func(tx *Txn) error {
						v, err := tx.Get([]byte(k))
						got = string(v)
						return err
					})
					if errors.Is(err, ErrNotFound) {
						got, ok, err = "", false, nil
					}
					if err != nil {
						t.Errorf("writer %d after round %d: get %s: %v", w, n, k, err)
						return
					}
					if want, wok := model[k]; ok != wok || got != want {
						t.Errorf("writer %d after round %d: %s = %q, %v; want %q, %v", w, n, k, got, ok, want, wok)
						return
					}
				}
			}
		})
	}
	for r := range 2 {
		bg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				iso := []IsolationLevel{RepeatableRead, ReadCommitted}[r]
				tx, err := db.Begin(ctx, TxnOptions{Isolation: iso, ReadOnly: true})
				if err != nil {
					t.Error(err)
					return
				}
				var first ladderState
				for range 2 {
					st := ladderState{}
					err := tx.Scan(nil, nil, func(k, v []byte) bool { st[string(k)] = string(v); return true })
					if err != nil {
						t.Errorf("reader: %v", err)
						tx.Rollback()
						return
					}
					n, err := tx.Count(nil, nil)
					if err != nil || (iso == RepeatableRead && n != len(st)) {
						t.Errorf("reader: Count = %d, %v; Scan found %d", n, err, len(st))
						tx.Rollback()
						return
					}
					if first == nil {
						first = st
					} else if d := diffState(st, first); iso == RepeatableRead && d != "" {
						t.Errorf("REPEATABLE READ reader: the second scan differs: %s", d)
					}
				}
				reads.Add(1)
				tx.Rollback()
			}
		})
	}
	bg.Go(func() {
		for jumps := 0; ; jumps++ {
			select {
			case <-stop:
				return
			case <-tick:
			}
			// To the first xid of a CLOG page further on, so that the
			// next assignment extends it as usual.
			db.procs.mu.Lock()
			db.procs.nextXid = (db.procs.nextXid/clog.XidsPerPage + 3) * clog.XidsPerPage
			db.procs.mu.Unlock()
			if jumps%4 == 3 {
				before := db.clog.OldestXid()
				if _, err := db.Vacuum(ctx); err != nil {
					t.Errorf("vacuum: %v", err)
					return
				}
				if db.clog.OldestXid() > before {
					truncations.Add(1)
				}
			}
			if jumps%9 == 8 {
				if err := db.Checkpoint(); err != nil {
					t.Errorf("checkpoint: %v", err)
					return
				}
			}
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	want := ladderState{}
	for _, m := range models {
		maps.Copy(want, m)
	}
	mustVacuum(t, db)
	check := func(when string) {
		t.Helper()
		got, err := scanState(db)
		if err != nil {
			t.Fatal(err)
		}
		if d := diffState(got, want); d != "" {
			t.Fatalf("%s: %s", when, d)
		}
		mustVerify(t, db)
	}
	check("at the end")
	st := db.Stats()
	if truncations.Load() == 0 || st.CLOG.Misses == 0 {
		t.Fatalf("%d truncations, %d CLOG misses: the test tests nothing", truncations.Load(), st.CLOG.Misses)
	}
	t.Logf("%d truncations (CLOG from xid %d), %d CLOG misses, %d reader transactions", truncations.Load(), db.clog.OldestXid(), st.CLOG.Misses, reads.Load())
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", opts)
	check("reopened")
}

// TestIndexOnlyReadOfHeadVacuumRemoves: an index-only check reads a key's
// head, then vacuum's second pass removes that head (the key was deleted
// below the horizon) and marks its page all-visible, all before the check
// tests the page's bit. The bit vouches for what the page holds now, not
// for the removed head: Exists and Count must not find the deleted key.
func TestIndexOnlyReadOfHeadVacuumRemoves(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	for i := range 20 {
		mustPut(t, db, fmt.Sprintf("a%02d", i), "v")
	}
	mustDelete(t, db, "a05")
	blk := headBlock(t, db, "a05")
	for _, what := range []string{"Exists", "Count"} {
		t.Run(what, func(t *testing.T) {
			tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.Get([]byte("a00")); err != nil { // the snapshot, after the delete
				t.Fatal(err)
			}
			var vs VacuumStats
			var once sync.Once
			db.testHeadRead = func() {
				once.Do(func() { vs, err = db.Vacuum(ctx) })
			}
			defer func() { db.testHeadRead = nil }()
			if what == "Exists" {
				ok, xerr := tx.Exists([]byte("a05"))
				if err != nil || xerr != nil || ok {
					t.Fatalf("Exists of a deleted key = %v, %v (vacuum: %v)", ok, xerr, err)
				}
			} else {
				n, xerr := tx.Count([]byte("a05"), []byte("a06"))
				if err != nil || xerr != nil || n != 0 {
					t.Fatalf("Count of a deleted key = %d, %v (vacuum: %v)", n, xerr, err)
				}
			}
			if vs.KeysRemoved != 1 || !allVisible(db, blk) {
				t.Fatalf("vacuum removed %d keys and the page is all-visible: %v; the test tests nothing", vs.KeysRemoved, allVisible(db, blk))
			}
		})
		if what == "Exists" {
			// Deleted again, for Count.
			mustPut(t, db, "a05", "v")
			mustDelete(t, db, "a05")
			blk = headBlock(t, db, "a05")
		}
	}
}

// TestHintBitWaitsForEarlyReleasedCommit: a commit released early is
// visible while its record's sync is still under way. A reader that meets
// it then (Get and Exists) must not hint it committed, so that the heap
// page, written meanwhile as an eviction would write it, carries no hint
// for a commit a power loss can still take away; recovering a crash copy
// taken then must not show the row. Once the sync completes the next
// reader sets the hint.
func TestHintBitWaitsForEarlyReleasedCommit(t *testing.T) {
	m := memDB(t)
	g := newWALGate(m)
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "other", "durable")
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("k"), []byte("early")); err != nil {
		t.Fatal(err)
	}
	// The version's record is durable, so writing its page flushes
	// nothing; the commit record will not be.
	if err := db.wal.Flush(db.wal.InsertLSN()); err != nil {
		t.Fatal(err)
	}
	g.shut()
	committed := make(chan error, 1)
	go func() { committed <- tx.Commit() }()
	released := false
	defer func() {
		if !released {
			g.open()
			<-committed
		}
	}()
	<-g.blocked // the commit is visible, its record written and not synced
	hintsBefore := db.Stats().Heap.HintBitsSet
	r, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Get([]byte("k")); err != nil || string(v) != "early" {
		t.Fatalf("Get of an early-released commit = %q, %v", v, err)
	}
	if ok, err := r.Exists([]byte("k")); err != nil || !ok {
		t.Fatalf("Exists of an early-released commit = %v, %v", ok, err)
	}
	r.Rollback()
	if n := db.Stats().Heap.HintBitsSet - hintsBefore; n != 0 {
		t.Fatalf("%d hint bits set for a commit whose record is not durable", n)
	}
	if err := db.pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	crash := m.CrashCopy(vfs.DropUnsynced, nil)
	tid := db.idx.get([]byte("k")).headTID()
	st, err := heap.OpenStorage(crash, "/db/heap")
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, heap.PageSize)
	if err := st.ReadBlock(tid.Block, page); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if raw, err := heap.Tuple(page, tid.Slot); err != nil || heap.TupleInfomask(raw)&(heap.XminCommitted|heap.Frozen) != 0 {
		t.Fatalf("tuple on disk: %v, infomask %#x: a committed hint ahead of its commit record", err, heap.TupleInfomask(raw))
	}
	re := openTest(t, "/db", Options{FS: crash, Autovacuum: noAutovacuum})
	if v, ok := get(t, re, "k"); ok {
		t.Errorf("after the crash k = %q: a commit whose record was lost is visible", v)
	}
	if v, ok := get(t, re, "other"); !ok || v != "durable" {
		t.Errorf("after the crash other = %q, %v", v, ok)
	}
	mustVerify(t, re)
	re.Close()

	g.open()
	released = true
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, db, "k"); !ok || v != "early" {
		t.Fatalf("k = %q, %v", v, ok)
	}
	if db.Stats().Heap.HintBitsSet == hintsBefore {
		t.Fatal("no hint set once the commit record was durable")
	}
}

// TestEarlyLockReleaseCrashLadderSkippingWork is the early lock release
// crash ladder with vacuum freezing and setting map bits in a loop, a
// 16-page buffer pool and readers listing keys from the visibility map:
// a frozen version, a map bit or a hint that reached disk ahead of a
// commit record, or a listing answered from a bit for a commit not yet
// durable, would recover without a commit that was acknowledged or that
// a committed reader had seen.
func TestEarlyLockReleaseCrashLadderSkippingWork(t *testing.T) {
	elrCrashLadder(t, true, false)
}

var modelSteps = flag.Int("freeze.steps", 500, "TestFreezeTruncateModel: steps per run (250 by default under -race)")

// TestFreezeTruncateModel runs random transactions over a few keys (puts,
// deletes, rollbacks, out-of-line values), REPEATABLE READ snapshots held
// across other steps, xid jumps of up to two CLOG segments, vacuums with a
// random vacuum_freeze_min_age and vacuum_freeze_table_age (lazy and
// aggressive runs, freezing and truncating the CLOG), checkpoints and
// reopens, and compares every read path with a model: the database, and
// each snapshot with the state it began in. Verify after every vacuum
// checks that no tuple names an xid below the truncation point unfrozen.
func TestFreezeTruncateModel(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	steps := *modelSteps
	if raceEnabled && steps == 500 {
		steps = 250
	}
	rng := rand.New(rand.NewPCG(seed, 13))
	m := memDB(t)
	opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 16 * heap.PageSize}
	db := openTest(t, "/db", opts)
	defer func() { db.Close() }()
	ctx := context.Background()
	model := ladderState{}
	type held struct {
		tx   *Txn
		want ladderState
	}
	var snaps []held
	checkSnap := func(h held, when string) {
		t.Helper()
		got := ladderState{}
		if err := h.tx.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
			t.Fatalf("seed %d, %s: snapshot Scan: %v", seed, when, err)
		}
		if d := diffState(got, h.want); d != "" {
			t.Fatalf("seed %d, %s: snapshot Scan: %s", seed, when, d)
		}
		if n, err := h.tx.Count(nil, nil); err != nil || n != len(h.want) {
			t.Fatalf("seed %d, %s: snapshot Count = %d, %v; want %d", seed, when, n, err, len(h.want))
		}
	}
	var vacuums, truncations, frozen, aggressive, crashes int
	for step := range steps {
		when := fmt.Sprintf("step %d", step)
		switch r := rng.IntN(100); {
		case r < 45:
			tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			next := maps.Clone(model)
			for range 1 + rng.IntN(3) {
				k := fmt.Sprintf("k%02d", rng.IntN(30))
				switch {
				case rng.IntN(5) == 0:
					err = tx.Delete([]byte(k))
					delete(next, k)
				case rng.IntN(15) == 0:
					v := fmt.Sprintf("%d:%s", step, strings.Repeat("L", 9000))
					err = tx.Put([]byte(k), []byte(v))
					next[k] = v
				default:
					v := fmt.Sprintf("%d:%s", step, k)
					err = tx.Put([]byte(k), []byte(v))
					next[k] = v
				}
				if err != nil {
					t.Fatalf("seed %d, %s: %v", seed, when, err)
				}
			}
			if rng.IntN(7) == 0 {
				tx.Rollback()
				continue
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("seed %d, %s: commit: %v", seed, when, err)
			}
			model = next
		case r < 52 && len(snaps) < 2:
			tx, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exists([]byte("k00")); err != nil {
				t.Fatal(err)
			}
			snaps = append(snaps, held{tx, maps.Clone(model)})
		case r < 60 && len(snaps) > 0:
			checkSnap(snaps[0], when)
			snaps[0].tx.Rollback()
			snaps = snaps[1:]
		case r < 70:
			db.procs.mu.Lock()
			db.procs.nextXid += uint64(rng.Int64N(int64(2*clogSegXids))) + clog.XidsPerPage/2
			db.procs.mu.Unlock()
		case r < 85:
			// The settings as Open resolved them (no vacuum runs now).
			minAge := []int64{0, 3, 1_000_000}[rng.IntN(3)]
			tableAge := []int64{0, 2_000_000_000}[rng.IntN(2)]
			db.opts.VacuumFreezeMinAge, db.opts.VacuumFreezeTableAge = minAge, tableAge
			before := db.clog.OldestXid()
			vs, err := db.Vacuum(ctx)
			if err != nil {
				t.Fatalf("seed %d, %s: vacuum: %v", seed, when, err)
			}
			vacuums++
			frozen += int(vs.TuplesFrozen)
			if vs.Aggressive {
				aggressive++
			}
			if db.clog.OldestXid() > before {
				truncations++
			}
			rep, err := db.Verify()
			if err != nil || !rep.OK() {
				t.Fatalf("seed %d, %s: verify after vacuum (min age %d, table age %d): %v %v", seed, when, minAge, tableAge, err, rep.Problems)
			}
			for _, h := range snaps {
				checkSnap(h, when)
			}
		case r < 90:
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		case r < 93:
			for _, h := range snaps {
				checkSnap(h, when)
				h.tx.Rollback()
			}
			snaps = nil
			if rng.IntN(2) == 0 {
				// A power loss instead of a Close: every commit was
				// synchronous, so the copy must hold the model.
				opts.FS = m.CrashCopy(vfs.DropUnsynced, nil)
				m = opts.FS.(*vfs.MemFS)
				crashes++
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, "/db", opts)
		}
		if step%25 == 24 || step == steps-1 {
			got, err := scanState(db)
			if err != nil {
				t.Fatalf("seed %d, %s: %v", seed, when, err)
			}
			if d := diffState(got, model); d != "" {
				t.Fatalf("seed %d, %s: %s", seed, when, d)
			}
			if _, count := countKeys(nil, db); count != len(model) {
				t.Fatalf("seed %d, %s: Count %d, model %d", seed, when, count, len(model))
			}
		}
	}
	for _, h := range snaps {
		checkSnap(h, "end")
		h.tx.Rollback()
	}
	if truncations == 0 || frozen == 0 || aggressive == 0 || aggressive == vacuums {
		t.Fatalf("seed %d: %d vacuums (%d aggressive), %d versions frozen, %d truncations: the test tests too little", seed, vacuums, aggressive, frozen, truncations)
	}
	t.Logf("seed %d: %d steps, %d vacuums (%d aggressive), %d versions frozen, %d CLOG truncations (point %d), %d crash copies reopened", seed, steps, vacuums, aggressive, frozen, truncations, db.clog.OldestXid(), crashes)
}
