package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// walDelta is what one function wrote to the WAL and how often it asked for
// or made a flush.
func walDelta(db *DB, fn func()) Stats {
	before := db.Stats()
	fn()
	return db.Stats().Sub(before)
}

// A transaction whose only write was a delete of a missing key placed
// nothing: it gets no xid and commits as a read-only transaction does,
// with no commit record and no wait for a flush. A delete of a live key
// still writes and flushes.
func TestDeleteMissingKeyWritesNothing(t *testing.T) {
	off := false
	db := openTest(t, t.TempDir(), Options{Autovacuum: &off})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "live", "1")

	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		d := walDelta(db, func() {
			tx, err := db.Begin(ctx, TxnOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Delete([]byte("missing")); err != nil {
				t.Fatalf("isolation %v: delete of a missing key: %v", iso, err)
			}
			if x := tx.XID(); x != 0 {
				t.Errorf("isolation %v: delete of a missing key assigned xid %d", iso, x)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("isolation %v: commit: %v", iso, err)
			}
		})
		if d.WAL.Records != 0 || d.WAL.FlushRequests != 0 || d.WAL.Syncs != 0 || d.Txn.Commits != 0 {
			t.Errorf("isolation %v: delete of a missing key wrote %d WAL records, made %d flush requests and %d syncs, counted %d commits; want none",
				iso, d.WAL.Records, d.WAL.FlushRequests, d.WAL.Syncs, d.Txn.Commits)
		}
	}

	// The same through CommitAsync, and for an Update whose function
	// fails (it too places nothing).
	d := walDelta(db, func() {
		tx, _ := db.Begin(ctx, TxnOptions{})
		errNo := errors.New("no")
		if err := tx.Update([]byte("live"), func([]byte, bool) ([]byte, error) { return nil, errNo }); !errors.Is(err, errNo) {
			t.Fatalf("Update: %v, want the function's error", err)
		}
		if err := tx.Delete([]byte("missing")); err != nil {
			t.Fatal(err)
		}
		w, err := tx.CommitAsync(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx); err != nil || w.LSN() != 0 {
			t.Fatalf("CommitAsync: Wait %v, LSN %#x; want nil, 0", err, w.LSN())
		}
	})
	if d.WAL.Records != 0 || d.WAL.FlushRequests != 0 || d.WAL.Syncs != 0 {
		t.Errorf("CommitAsync of writes that placed nothing: %d WAL records, %d flush requests, %d syncs; want none",
			d.WAL.Records, d.WAL.FlushRequests, d.WAL.Syncs)
	}

	// Rolling back writes nothing either (no abort record).
	d = walDelta(db, func() {
		tx, _ := db.Begin(ctx, TxnOptions{})
		if err := tx.Delete([]byte("missing")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	})
	if d.WAL.Records != 0 || d.Txn.Aborts != 0 {
		t.Errorf("rollback of a delete of a missing key: %d WAL records, %d aborts; want none", d.WAL.Records, d.Txn.Aborts)
	}

	d = walDelta(db, func() {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("live")) }); err != nil {
			t.Fatal(err)
		}
	})
	if d.WAL.Records < 2 || d.WAL.FlushRequests == 0 || d.Txn.Commits != 1 {
		t.Errorf("delete of a live key: %d WAL records, %d flush requests, %d commits; want a delete and a commit record, a flush, a commit",
			d.WAL.Records, d.WAL.FlushRequests, d.Txn.Commits)
	}
	if _, ok := get(t, db, "live"); ok {
		t.Error("deleted key still found")
	}
}

// A delete of a missing key still takes the key's row lock until the
// transaction ends, with no xid: a writer of the key waits for it.
func TestDeleteMissingKeyHoldsRowLock(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	t1, _ := db.Begin(ctx, TxnOptions{})
	if err := t1.Delete([]byte("k")); err != nil {
		t.Fatal(err)
	}
	t2, _ := db.Begin(ctx, TxnOptions{})
	errc := make(chan error, 1)
	go func() { errc <- t2.Put([]byte("k"), []byte("2")) }()
	waitUntilWaiting(t, db)
	select {
	case err := <-errc:
		t.Fatalf("Put did not wait for the deleter's row lock: %v", err)
	default:
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Put after the deleter ended: %v", err)
	}
	if t2.XID() == 0 {
		t.Error("a Put that placed a version has no xid")
	}
	if err := t2.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := get(t, db, "k"); v != "2" {
		t.Fatalf("k = %q, want 2", v)
	}
}

// Under REPEATABLE READ a delete of a key deleted, or created, since the
// snapshot still fails with ErrSerializationFailure, though it places
// nothing and has no xid.
func TestDeleteMissingKeyRepeatableReadConflicts(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "gone", "1")
	tx, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if _, err := tx.Get([]byte("other")); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(u *Txn) error { return u.Delete([]byte("gone")) }); err != nil {
		t.Fatal(err)
	}
	mustPut(t, db, "new", "1")
	if err := tx.Delete([]byte("gone")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("delete of a key deleted since the snapshot: %v, want ErrSerializationFailure", err)
	}
	tx.Rollback()

	tx, _ = db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	tx.Get([]byte("other"))
	mustPut(t, db, "new", "2")
	if err := tx.Delete([]byte("new")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("delete of a key written since the snapshot: %v, want ErrSerializationFailure", err)
	}
	tx.Rollback()
}

// A panic in the function given to DB.Update or DB.View rolls its
// transaction back before going on up: the key it wrote is free for the
// next writer at once, and nothing it wrote is visible.
func TestUpdatePanicRollsBack(t *testing.T) {
	off := false
	db := openTest(t, t.TempDir(), Options{Autovacuum: &off})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "before")

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the function's panic", r)
			}
		}()
		db.Update(ctx, func(tx *Txn) error {
			if err := tx.Put([]byte("k"), []byte("lost")); err != nil {
				t.Fatal(err)
			}
			panic("boom")
		})
	}()
	func() {
		defer func() { recover() }()
		db.View(ctx, func(*Txn) error { panic("boom") })
	}()

	// With the row lock leaked the next writer would wait for ever;
	// the deadline makes that a failure instead of a hang.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.Update(wctx, func(tx *Txn) error { return tx.Put([]byte("k"), []byte("after")) }); err != nil {
		t.Fatalf("write after the panic: %v", err)
	}
	if s := db.procs.snapshot(); len(s.Xip) != 0 {
		t.Errorf("transactions %v still running after both returned", s.Xip)
	}
	if v, _ := get(t, db, "k"); v != "after" {
		t.Errorf("k = %q, want %q", v, "after")
	}
}

// A panic in the function given to Txn.Update, which runs with the
// database's close interlock let go, takes the interlock back on its way
// up: the panic reaches the caller as itself (not as a fatal unlock of an
// unlocked mutex), nothing is written, and the database stays usable and
// closes.
func TestTxnUpdatePanicInFunction(t *testing.T) {
	off := false
	db := openTest(t, t.TempDir(), Options{Autovacuum: &off})
	ctx := context.Background()
	mustPut(t, db, "k", "before")
	boom := func([]byte, bool) ([]byte, error) { panic("boom") }
	recovered := func(f func()) (r any) {
		defer func() { r = recover() }()
		f()
		return nil
	}
	if r := recovered(func() {
		db.Update(ctx, func(tx *Txn) error { return tx.Update([]byte("k"), boom) })
	}); r != "boom" {
		t.Fatalf("DB.Update: recovered %v, want the function's panic", r)
	}
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := recovered(func() { tx.Update([]byte("k"), boom) }); r != "boom" {
		t.Fatalf("Txn.Update: recovered %v, want the function's panic", r)
	}
	// The transaction is still usable and still holds k's row lock.
	if err := tx.Put([]byte("k"), []byte("mine")); err != nil {
		t.Fatalf("write in the transaction after the panic: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.Update(wctx, func(tx *Txn) error { return tx.Put([]byte("k"), []byte("after")) }); err != nil {
		t.Fatalf("write after the panics: %v", err)
	}
	if v, _ := get(t, db, "k"); v != "after" {
		t.Errorf("k = %q, want %q", v, "after")
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close after the panics: %v", err)
	}
}

// Every method that calls the caller's function refuses a nil one with
// ErrNilFunction rather than panicking on the call.
func TestNilFunctionRefused(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "v")
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNilFunction) {
			t.Errorf("%s with a nil function: %v, want ErrNilFunction", what, err)
		}
	}
	check("DB.Update", db.Update(ctx, nil))
	check("DB.View", db.View(ctx, nil))
	_, _, err := db.StatTuple(ctx, nil)
	check("DB.StatTuple", err)
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	check("Txn.Update", tx.Update([]byte("k"), nil))
	check("Txn.Scan", tx.Scan(nil, nil, nil))
	check("Txn.ScanPrefix", tx.ScanPrefix(nil, nil, 4, nil))
	check("Txn.ScanKeys", tx.ScanKeys(nil, nil, nil))
	// None of them aborted the transaction.
	if err := tx.Put([]byte("k"), []byte("w")); err != nil {
		t.Fatalf("write after the refusals: %v", err)
	}
}

// An empty end bounds nothing, as a nil one: no key is empty, so the range
// [start, "") would always be empty, and a Go caller often cannot tell an
// empty slice from nil (a []byte of an empty string is not nil).
func TestScanEmptyEndIsUnbounded(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	for _, k := range []string{"a", "b", "c"} {
		mustPut(t, db, k, "v")
	}
	err := db.View(context.Background(), func(tx *Txn) error {
		for _, end := range [][]byte{nil, {}, []byte("")} {
			var scanned, keys []string
			if err := tx.Scan([]byte("b"), end, func(k, _ []byte) bool { scanned = append(scanned, string(k)); return true }); err != nil {
				return err
			}
			if err := tx.ScanKeys([]byte("b"), end, func(k []byte) bool { keys = append(keys, string(k)); return true }); err != nil {
				return err
			}
			n, err := tx.Count(nil, end)
			if err != nil {
				return err
			}
			if !slices.Equal(scanned, []string{"b", "c"}) || !slices.Equal(keys, scanned) || n != 3 {
				t.Errorf("end %#v: Scan %q, ScanKeys %q, Count %d; want [b c], [b c], 3", end, scanned, keys, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBeginRefusesBadOptions: an isolation level or synchronous_commit that
// is not one of the constants is refused (a bad synchronous_commit would
// otherwise read as off and lose durability silently), and so is a
// context already done.
func TestBeginRefusesBadOptions(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	bad := SynchronousCommit(99)
	// The caller passed a Go value, not text: the error names the
	// constants to use, not the words CONFIG SET takes.
	const wantSync = `"SynchronousCommit(99)": want the constant SyncCommitOn or SyncCommitOff`
	if _, err := db.Begin(context.Background(), TxnOptions{SynchronousCommit: &bad}); !errors.Is(err, ErrInvalidSetting) || !strings.HasSuffix(err.Error(), wantSync) {
		t.Errorf("Begin with synchronous_commit 99: %v, want ErrInvalidSetting ending %s", err, wantSync)
	}
	const wantIso = `"IsolationLevel(42)": want the constant ReadCommitted or RepeatableRead`
	if _, err := db.Begin(context.Background(), TxnOptions{Isolation: 42}); !errors.Is(err, ErrInvalidSetting) || !strings.HasSuffix(err.Error(), wantIso) {
		t.Errorf("Begin with isolation 42: %v, want ErrInvalidSetting ending %s", err, wantIso)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Begin(ctx, TxnOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin with a cancelled context: %v, want context.Canceled", err)
	}
	if err := db.SetSynchronousCommit(bad); !errors.Is(err, ErrInvalidSetting) || !strings.HasSuffix(err.Error(), wantSync) || db.SynchronousCommit() != SyncCommitOn {
		t.Errorf("SetSynchronousCommit(99): %v, then %v; want ErrInvalidSetting and on", err, db.SynchronousCommit())
	}
}

// TestRandomKey: picks spread over every key (a common prefix, which a
// pick by key order makes nearly constant, changes nothing), deleted keys
// are never returned, and an empty database has none.
func TestRandomKey(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	tx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	if _, _, _, err := tx.RandomKey(0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RandomKey of an empty database: %v, want ErrNotFound", err)
	}
	tx.Rollback()
	const n = 1000
	if err := db.Update(ctx, func(tx *Txn) error {
		for i := range n {
			if err := tx.Put(fmt.Appendf(nil, "user:%04d", i), []byte("value")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	if err := db.View(ctx, func(tx *Txn) error {
		for range 5 * n {
			k, prefix, length, err := tx.RandomKey(2)
			if err != nil {
				return err
			}
			if string(prefix) != "va" || length != 5 {
				t.Fatalf("RandomKey(2) of %s: %q, %d", k, prefix, length)
			}
			seen[string(k)]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Uniform picks would leave about n/e^5, 7 keys, unseen.
	if len(seen) < n*9/10 {
		t.Fatalf("5000 picks saw %d of %d keys", len(seen), n)
	}
	// All but one deleted: only that one comes back.
	if err := db.Update(ctx, func(tx *Txn) error {
		for i := range n {
			if i != 777 {
				if err := tx.Delete(fmt.Appendf(nil, "user:%04d", i)); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.View(ctx, func(tx *Txn) error {
		for range 20 {
			k, _, _, err := tx.RandomKey(0)
			if err != nil || string(k) != "user:0777" {
				t.Fatalf("RandomKey with one key left: %q, %v", k, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestScanSeesFnWritesBeforeFirstWrite: a scan whose fn writes keys ahead
// of its position sees those keys as fn left them (Scan's documentation),
// also when fn's write is the transaction's first, which gives it its xid
// in the middle of the scan. The scan once read the xid before its first
// key, took the transaction's own new versions for another's uncommitted
// ones and showed the old values.
func TestScanSeesFnWritesBeforeFirstWrite(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	for i := range 100 {
		mustPut(t, db, fmt.Sprintf("k%03d", i), "old")
	}
	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		for _, keysOnly := range []bool{false, true} {
			tx, err := db.Begin(ctx, TxnOptions{Isolation: iso})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			var werr error
			visit := func(k, v []byte) bool {
				got[string(k)] = string(v)
				if string(k) == "k010" {
					if werr = tx.Put([]byte("k050"), []byte("new")); werr == nil {
						werr = tx.Delete([]byte("k060"))
					}
				}
				return werr == nil
			}
			if keysOnly {
				err = tx.ScanKeys(nil, nil, func(k []byte) bool { return visit(k, nil) })
			} else {
				err = tx.Scan(nil, nil, visit)
			}
			if err != nil || werr != nil {
				t.Fatalf("%v, keys only %v: scan: %v, write in fn: %v", iso, keysOnly, err, werr)
			}
			if _, ok := got["k060"]; ok {
				t.Errorf("%v, keys only %v: the scan saw k060, which its fn had deleted", iso, keysOnly)
			}
			if v, ok := got["k050"]; !ok || (!keysOnly && v != "new") {
				t.Errorf("%v, keys only %v: k050 = %q, %v; want fn's new value", iso, keysOnly, v, ok)
			}
			if len(got) != 99 {
				t.Errorf("%v, keys only %v: %d keys seen; want 99", iso, keysOnly, len(got))
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A write that Update's function makes in the same transaction, before
// the transaction has an xid, gives it its xid; the version Update then
// places carries the same one, so the commit makes both writes visible
// and leaves nothing in the running table.
func TestUpdateFunctionWriteBeforeFirstWrite(t *testing.T) {
	for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
		db := openTest(t, t.TempDir(), Options{})
		mustPut(t, db, "a", "1")
		mustPut(t, db, "b", "1")
		tx, _ := db.Begin(context.Background(), TxnOptions{Isolation: iso})
		err := tx.Update([]byte("a"), func([]byte, bool) ([]byte, error) {
			return []byte("2"), tx.Put([]byte("b"), []byte("2"))
		})
		if err != nil {
			t.Fatalf("%v: Update: %v", iso, err)
		}
		xid := tx.XID()
		if err := tx.Commit(); err != nil {
			t.Fatalf("%v: Commit: %v", iso, err)
		}
		for _, k := range []string{"a", "b"} {
			if v, _ := get(t, db, k); v != "2" {
				t.Errorf("%v: %s = %q after the commit, want 2", iso, k, v)
			}
		}
		if n := db.procs.active.Load(); n != 0 {
			t.Errorf("%v: %d transactions left running after the commit of xid %d", iso, n, xid)
		}
		db.Close()
	}
}

// A function of Update that ends its own transaction (Commit or Rollback
// in it) leaves Update nothing to place: it returns ErrTxnDone, and the
// key keeps its value.
func TestUpdateFunctionEndsTransaction(t *testing.T) {
	for _, end := range []string{"commit", "rollback"} {
		for _, wroteFirst := range []bool{false, true} {
			db := openTest(t, t.TempDir(), Options{})
			mustPut(t, db, "a", "1")
			tx, _ := db.Begin(context.Background(), TxnOptions{})
			if wroteFirst {
				if err := tx.Put([]byte("b"), []byte("2")); err != nil {
					t.Fatal(err)
				}
			}
			err := tx.Update([]byte("a"), func([]byte, bool) ([]byte, error) {
				if end == "commit" {
					return []byte("2"), tx.Commit()
				}
				return []byte("2"), tx.Rollback()
			})
			if !errors.Is(err, ErrTxnDone) {
				t.Errorf("%s in the function (wrote first %v): Update returned %v, want ErrTxnDone", end, wroteFirst, err)
			}
			if v, _ := get(t, db, "a"); v != "1" {
				t.Errorf("%s in the function (wrote first %v): a = %q, want 1", end, wroteFirst, v)
			}
			if n := db.procs.active.Load(); n != 0 {
				t.Errorf("%s in the function (wrote first %v): %d transactions left running", end, wroteFirst, n)
			}
			db.Close()
		}
	}
}

// An Update of a new key whose function ends its own transaction has
// released the key's row lock by the time it returns: another writer of
// the key may hold the lock then, and may have taken the key's index
// entry, still without a version. Update used to drop that entry as one
// its own failed write had left, and the other writer's version then went
// on an entry no longer in the index: its commit succeeded and the key
// read as missing.
func TestUpdateFunctionEndsTransactionKeepsOtherWritersEntry(t *testing.T) {
	for _, end := range []string{"commit", "rollback"} {
		db := openTest(t, t.TempDir(), Options{})
		ctx := context.Background()
		tx, _ := db.Begin(ctx, TxnOptions{})
		in2, go2 := make(chan struct{}), make(chan struct{})
		done2 := make(chan error, 1)
		err := tx.Update([]byte("k"), func([]byte, bool) ([]byte, error) {
			var err error
			if end == "commit" {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				return nil, err
			}
			// The lock is free: a second writer takes it and the key's
			// entry, and waits in its own function until this Update
			// has returned.
			go func() {
				w, _ := db.Begin(ctx, TxnOptions{})
				err := w.Update([]byte("k"), func([]byte, bool) ([]byte, error) {
					close(in2)
					<-go2
					return []byte("w"), nil
				})
				if err == nil {
					err = w.Commit()
				}
				done2 <- err
			}()
			<-in2
			return []byte("t"), nil
		})
		if !errors.Is(err, ErrTxnDone) {
			t.Errorf("%s in the function: Update returned %v, want ErrTxnDone", end, err)
		}
		close(go2)
		if err := receive(t, done2, "the second writer"); err != nil {
			t.Fatalf("%s in the function: the second writer: %v", end, err)
		}
		if v, ok := get(t, db, "k"); !ok || v != "w" {
			t.Errorf("%s in the function: k = %q (found %v) after the second writer committed w", end, v, ok)
		}
		db.Close()
	}
}

// A function of Update that writes the key being updated in the same
// transaction (a misuse) fails the Update with ErrNestedWrite and aborts
// the transaction, instead of Update's version hiding the function's and
// leaving it unreachable: after the Rollback the key holds what it held
// before, and its chain reads clean. (A delete places no version: of the
// present key it only marks the version Update then replaces, as an
// update marks it, and of a missing key it deletes nothing; Update's
// value wins, in the order the two ran; TestUpdateFunctionDeletesOwnKey,
// TestUpdateFunctionDeletesMissingOwnKey.)
func TestUpdateFunctionWritesOwnKey(t *testing.T) {
	for _, c := range []struct {
		name    string
		present bool
		inner   func(tx *Txn) error
	}{
		{"put over a present key", true, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("inner")) }},
		{"put of a missing key", false, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("inner")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{})
			defer db.Close()
			if c.present {
				mustPut(t, db, "a", "1")
			}
			tx, _ := db.Begin(context.Background(), TxnOptions{})
			err := tx.Update([]byte("a"), func([]byte, bool) ([]byte, error) {
				if err := c.inner(tx); err != nil {
					t.Errorf("the inner write: %v", err)
				}
				return []byte("outer"), nil
			})
			if !errors.Is(err, ErrNestedWrite) {
				t.Fatalf("Update: %v, want ErrNestedWrite", err)
			}
			if err := tx.Commit(); !errors.Is(err, ErrNestedWrite) {
				t.Fatalf("Commit after it: %v, want the ErrNestedWrite that aborted the transaction", err)
			}
			v, ok := get(t, db, "a")
			switch {
			case c.present && v != "1":
				t.Errorf("a = %q, %v after the abort; want 1", v, ok)
			case !c.present && ok:
				t.Errorf("a = %q after the abort; want no key", v)
			}
			mustPut(t, db, "a", "2")
			if v, _ := get(t, db, "a"); v != "2" {
				t.Errorf("a = %q after a later Put, want 2", v)
			}
			if rep, err := db.Verify(); err != nil || !rep.OK() {
				t.Fatalf("Verify: %v, %+v", err, rep)
			}
		})
	}
}

// A function of Update that deletes the key being updated, in the same
// transaction, places no version: of a present key it sets the xmax
// Update's own version sets anyway, and of a missing key it deletes
// nothing, whether the key never had a version or its delete is still on
// the page for vacuum (the outcome must not depend on whether vacuum has
// run). Update places its value after the delete, in the order they ran,
// and the chain reads clean.
func TestUpdateFunctionDeletesOwnKey(t *testing.T) {
	for _, before := range []string{"present", "never written", "deleted"} {
		t.Run(before, func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{})
			defer db.Close()
			if before != "never written" {
				mustPut(t, db, "a", "1")
			}
			if before == "deleted" {
				mustDelete(t, db, "a")
			}
			tx, _ := db.Begin(context.Background(), TxnOptions{})
			if err := tx.Update([]byte("a"), func(_ []byte, found bool) ([]byte, error) {
				if found != (before == "present") {
					t.Errorf("Update's function: found %v", found)
				}
				return []byte("outer"), tx.Delete([]byte("a"))
			}); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if v, _ := get(t, db, "a"); v != "outer" {
				t.Errorf("a = %q, want outer", v)
			}
			if rep, err := db.Verify(); err != nil || !rep.OK() {
				t.Fatalf("Verify: %v, %+v", err, rep)
			}
		})
	}
}
