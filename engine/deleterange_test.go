package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// DeleteRange against a model: random keys, random ranges, batches of a
// few keys so that a call takes several, values handed to fn, and the
// keys outside the range untouched, before and after a reopen.
func TestDeleteRangeMatchesModel(t *testing.T) {
	defer func(n int) { deleteRangeBatch = n }(deleteRangeBatch)
	deleteRangeBatch = 7
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	ctx := context.Background()
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		k := fmt.Sprintf("k%04d", rng.IntN(1000))
		v := fmt.Sprintf("v%d", i)
		mustPut(t, db, k, v)
		model[k] = v
	}
	for round := range 20 {
		a, b := fmt.Sprintf("k%04d", rng.IntN(1000)), fmt.Sprintf("k%04d", rng.IntN(1100))
		start, end := []byte(a), []byte(b)
		if round%5 == 0 {
			start = nil
		}
		if round%7 == 0 {
			end = nil
		}
		want := map[string]string{}
		for k, v := range model {
			if (start == nil || k >= string(start)) && (end == nil || k < string(end)) {
				want[k] = v
			}
		}
		got := map[string]string{}
		var n int
		err := db.Update(ctx, func(tx *Txn) error {
			var err error
			n, err = tx.DeleteRange(start, end, func(k, old []byte) {
				if _, dup := got[string(k)]; dup {
					t.Errorf("key %q handed to fn twice", k)
				}
				got[string(k)] = string(old)
			})
			return err
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n != len(want) || !maps.Equal(got, want) {
			t.Fatalf("round %d [%q, %q): deleted %d %v, want %v", round, start, end, n, got, want)
		}
		for k := range want {
			delete(model, k)
		}
		// Put some back, so that later rounds find deleted and live
		// versions side by side.
		for range 15 {
			k := fmt.Sprintf("k%04d", rng.IntN(1000))
			v := fmt.Sprintf("r%d", round)
			mustPut(t, db, k, v)
			model[k] = v
		}
	}
	check := func(db *DB) {
		t.Helper()
		var keys []string
		err := db.View(ctx, func(tx *Txn) error {
			return tx.Scan(nil, nil, func(k, v []byte) bool {
				keys = append(keys, string(k))
				if model[string(k)] != string(v) {
					t.Errorf("%s = %q, want %q", k, v, model[string(k)])
				}
				return true
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := slices.Sorted(maps.Keys(model)); !slices.Equal(keys, want) {
			t.Fatalf("keys %v, want %v", keys, want)
		}
	}
	check(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{})
	defer db.Close()
	check(db)
}

// What DeleteRange deletes when other transactions write during it: a key
// updated after the snapshot is deleted with its new value under READ
// COMMITTED and fails the call under REPEATABLE READ; a key created after
// the snapshot is left; a key another transaction deleted is not counted;
// a rollback deletes nothing; a read-only transaction may not call it.
func TestDeleteRangeConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		t.Run(iso.String(), func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{})
			defer db.Close()
			for _, k := range []string{"a", "b", "c", "d"} {
				mustPut(t, db, k, "old-"+k)
			}
			tx, err := db.Begin(ctx, TxnOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			if iso == RepeatableRead {
				// A read first: the snapshot is then older than
				// DeleteRange, which does not lock the range before
				// it (TestDeleteRangeLocksBeforeSnapshot).
				if _, err := tx.Get([]byte("a")); err != nil {
					t.Fatal(err)
				}
			}
			// Between the snapshot and the locks, another transaction
			// updates "c", deletes "d" and creates "e", and commits.
			deleteRangeSnapshotTaken = func() {
				if err := db.Update(ctx, func(o *Txn) error {
					if err := o.Put([]byte("c"), []byte("new-c")); err != nil {
						return err
					}
					if err := o.Delete([]byte("d")); err != nil {
						return err
					}
					return o.Put([]byte("e"), []byte("new-e"))
				}); err != nil {
					t.Errorf("concurrent writer: %v", err)
				}
			}
			defer func() { deleteRangeSnapshotTaken = nil }()
			got := map[string]string{}
			n, err := tx.DeleteRange(nil, nil, func(k, old []byte) {
				got[string(k)] = string(old)
			})
			if iso == RepeatableRead {
				if !errors.Is(err, ErrSerializationFailure) {
					t.Fatalf("REPEATABLE READ: %v, want a serialization failure", err)
				}
				tx.Rollback()
				for k, v := range map[string]string{"a": "old-a", "b": "old-b", "c": "new-c", "e": "new-e"} {
					if got, ok := get(t, db, k); !ok || got != v {
						t.Fatalf("after the rollback %s = %q %v, want %q", k, got, ok, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"a": "old-a", "b": "old-b", "c": "new-c"}
			if n != 3 || !maps.Equal(got, want) {
				t.Fatalf("deleted %d %v, want %v", n, got, want)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"a", "b", "c", "d"} {
				if v, ok := get(t, db, k); ok {
					t.Fatalf("%s = %q after the delete", k, v)
				}
			}
			if v, ok := get(t, db, "e"); !ok || v != "new-e" {
				t.Fatalf("e = %q %v, want the key created after the snapshot", v, ok)
			}
		})
	}
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	mustPut(t, db, "a", "1")
	if err := db.View(ctx, func(tx *Txn) error {
		_, err := tx.DeleteRange(nil, nil, nil)
		return err
	}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only: %v", err)
	}
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := tx.DeleteRange([]byte("a"), []byte("b"), nil); err != nil || n != 1 {
		t.Fatalf("DeleteRange: %d %v", n, err)
	}
	if n, err := tx.DeleteRange([]byte("b"), []byte("a"), nil); err != nil || n != 0 {
		t.Fatalf("an empty range: %d %v", n, err)
	}
	tx.Rollback()
	if v, ok := get(t, db, "a"); !ok || v != "1" {
		t.Fatalf("a = %q %v after a rollback", v, ok)
	}
}

// BenchmarkDeleteRange deletes every key of a heap four times the size of
// shared_buffers, whose keys were written in random order, in one
// transaction: by DeleteRange (heap order), and by ScanKeys and a Delete a
// key (key order), as FLUSHALL did. An op is the whole delete and its
// commit; the loads are not timed.
func BenchmarkDeleteRange(b *testing.B) {
	const n = 200_000
	for _, order := range []string{"heap", "key"} {
		b.Run("order="+order, func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				db := openTest(b, b.TempDir(), Options{SharedBuffers: 8 << 20, SynchronousCommit: SyncCommitOff})
				loadRandomOrder(b, db, n)
				b.StartTimer()
				tx, err := db.Begin(ctx, TxnOptions{})
				if err != nil {
					b.Fatal(err)
				}
				deleted := 0
				if order == "heap" {
					deleted, err = tx.DeleteRange(nil, nil, nil)
				} else {
					var keys [][]byte
					err = tx.ScanKeys(nil, nil, func(k []byte) bool { keys = append(keys, k); return true })
					for _, k := range keys {
						if err == nil {
							err = tx.Delete(k)
							deleted++
						}
					}
				}
				if err == nil {
					err = tx.Commit()
				}
				if err != nil || deleted != n {
					b.Fatalf("deleted %d: %v", deleted, err)
				}
				b.StopTimer()
				db.Close()
				b.StartTimer()
			}
		})
	}
}

// DeleteRange takes its row locks in key order, as MSET does, so that it
// queues behind a transaction writing keys in key order instead of
// deadlocking with it, although it deletes in heap order: here "b" lies
// before "a" in the heap.
func TestDeleteRangeLocksInKeyOrder(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "b", "1")
	mustPut(t, db, "a", "1")
	w, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put([]byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	d, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		n, err := d.DeleteRange(nil, nil, nil)
		if err == nil && n != 2 {
			err = fmt.Errorf("deleted %d keys, want 2", n)
		}
		if err == nil {
			err = d.Commit()
		}
		done <- err
	}()
	waitUntilWaiting(t, db)
	if err := w.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatalf("the key-order writer: %v", err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("DeleteRange: %v", err)
	}
	for _, k := range []string{"a", "b"} {
		if v, ok := get(t, db, k); ok {
			t.Fatalf("%s = %q after DeleteRange", k, v)
		}
	}
}

// An error DeleteRange meets checking whether a key is visible (its
// newest version's page fails its checks) aborts the transaction, as
// the error of a delete does: the keys it deleted before are rolled
// back, and Commit cannot make that part of the range's delete stand.
func TestDeleteRangeVisibilityErrorAborts(t *testing.T) {
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	mustPut(t, db, "r1", "1")
	// Fill pages, so that r2's version lies on a later page than r1's.
	filler := strings.Repeat("f", 1500)
	blk := func(k string) uint32 { return db.idx.get([]byte(k)).headTID().Block }
	for i := 0; ; i++ {
		k := fmt.Sprint("f", i)
		mustPut(t, db, k, filler)
		if blk(k) != blk("r1") {
			break
		}
	}
	mustPut(t, db, "r2", "2")
	b1, b2 := blk("r1"), blk("r2")
	if b2 <= b1 {
		t.Fatalf("r2 on block %d, not after r1's %d", b2, b1)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tearBlock(t, dir, b2)
	db = openTest(t, dir, o)
	defer db.Close()
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := tx.DeleteRange([]byte("r"), []byte("s"), nil)
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("DeleteRange over a damaged page: %d, %v; want ErrCorruption", n, err)
	}
	// r1 was deleted before the error, then rolled back with the
	// transaction: nothing deleted stands.
	if n != 0 {
		t.Errorf("DeleteRange's count after its error = %d, want 0", n)
	}
	if err := tx.Commit(); err == nil {
		t.Error("Commit after DeleteRange failed returned nil")
	}
	if v, ok := get(t, db, "r1"); !ok || v != "1" {
		t.Errorf("r1 = %q, %v after the failed DeleteRange; want it kept", v, ok)
	}
}

// BenchmarkVacuumAfterDeleteRange vacuums a heap four times the size of
// shared_buffers whose every key, written in random order, was deleted by
// one DeleteRange (FLUSHALL's work, then VACUUM): each page's versions all
// go, with their keys' index entries. An op is the vacuum; the load and
// the delete are not timed.
func BenchmarkVacuumAfterDeleteRange(b *testing.B) {
	const n = 200_000
	ctx := context.Background()
	var removed uint64
	for range b.N {
		b.StopTimer()
		db := openTest(b, b.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 8 << 20, SynchronousCommit: SyncCommitOff})
		loadRandomOrder(b, db, n)
		if err := db.Update(ctx, func(tx *Txn) error {
			_, err := tx.DeleteRange(nil, nil, nil)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		removed += mustVacuum(b, db).KeysRemoved
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
	if removed != uint64(b.N)*n {
		b.Fatalf("vacuum removed %d keys in %d runs; want %d a run", removed, b.N, n)
	}
}

// loadRandomOrder puts keys "key:000000000000" to n-1 with 100-byte
// values, in random order, 10,000 a transaction (n a multiple of 10,000).
func loadRandomOrder(b *testing.B, db *DB, n int) {
	val := make([]byte, 100)
	perm := rand.Perm(n)
	for i := 0; i < n; i += 10_000 {
		if err := db.Update(context.Background(), func(tx *Txn) error {
			for _, k := range perm[i : i+10_000] {
				if err := tx.Put(fmt.Appendf(nil, "key:%012d", k), val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// A REPEATABLE READ transaction that has not read yet locks the whole
// range before its snapshot: a writer that got in first is waited for and
// its commit deleted, a writer that comes after waits for the delete's
// commit, and nothing fails with a serialization failure. At READ
// COMMITTED the snapshot comes first: a key created while DeleteRange
// waits for a lock is left, while the newer version of the key it waited
// for is deleted.
func TestDeleteRangeLocksBeforeSnapshot(t *testing.T) {
	ctx := context.Background()
	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		t.Run(iso.String(), func(t *testing.T) {
			defer func(n int) { deleteRangeBatch = n }(deleteRangeBatch)
			deleteRangeBatch = 2
			db := openTest(t, t.TempDir(), Options{})
			defer db.Close()
			for _, k := range []string{"b", "c", "d", "e", "f"} {
				mustPut(t, db, k, "old-"+k)
			}
			// The writer holds "e", in the range's second batch.
			w, err := db.Begin(ctx, TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Rollback()
			if err := w.Put([]byte("e"), []byte("new-e")); err != nil {
				t.Fatal(err)
			}
			d, err := db.Begin(ctx, TxnOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var n int
			go func() {
				var err error
				n, err = d.DeleteRange(nil, nil, nil)
				if err == nil {
					err = d.Commit()
				}
				done <- err
			}()
			waitUntilWaiting(t, db)
			// A new key while the delete waits, then the writer's commit.
			mustPut(t, db, "a", "new-a")
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("DeleteRange: %v", err)
			}
			_, aLeft := get(t, db, "a")
			want := 6
			if iso == ReadCommitted {
				// The snapshot came before "a": it stays.
				want = 5
				if !aLeft {
					t.Fatal("a, created after the snapshot, was deleted")
				}
			} else if aLeft {
				t.Fatal("a, created before the snapshot taken after the locks, was left")
			}
			if n != want {
				t.Fatalf("deleted %d keys, want %d", n, want)
			}
			for _, k := range []string{"b", "c", "d", "e", "f"} {
				if v, ok := get(t, db, k); ok {
					t.Fatalf("%s = %q after DeleteRange", k, v)
				}
			}
		})
	}
}

// A DeleteRange that locked its range before its snapshot does not lock a
// key created after those locks that its snapshot does not see: here the
// key's writer, which has not committed, waits for a key of the range,
// and locking the new key would close a cycle with it (ErrDeadlock).
func TestDeleteRangeSkipsLaterKeys(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	for _, k := range []string{"b", "c", "e"} {
		mustPut(t, db, k, "old-"+k)
	}
	w, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback()
	if err := w.Put([]byte("e"), []byte("new-e")); err != nil {
		t.Fatal(err)
	}
	d, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.DeleteRange(nil, nil, nil)
		if err == nil {
			err = d.Commit()
		}
		done <- err
	}()
	waitUntilWaiting(t, db)
	// m creates "a" (below the range's keys in key order, after they
	// were listed), then waits for "b".
	m, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Rollback()
	if err := m.Put([]byte("a"), []byte("new-a")); err != nil {
		t.Fatal(err)
	}
	mDone := make(chan error, 1)
	go func() { mDone <- m.Put([]byte("b"), []byte("new-b")) }()
	waitUntilWaitingN(t, db, 2)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	// Both ended before either is judged: m is not used on two
	// goroutines at once, even by the deferred Rollback.
	errD, errM := <-done, <-mDone
	if errD != nil {
		t.Fatalf("DeleteRange: %v", errD)
	}
	if errM != nil {
		t.Fatalf("the writer of a and b: %v", errM)
	}
	if err := m.Commit(); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "new-a", "b": "new-b"} {
		if v, ok := get(t, db, k); !ok || v != want {
			t.Fatalf("%s = %q %v, want %q", k, v, ok, want)
		}
	}
	for _, k := range []string{"c", "e"} {
		if v, ok := get(t, db, k); ok {
			t.Fatalf("%s = %q after DeleteRange", k, v)
		}
	}
}
