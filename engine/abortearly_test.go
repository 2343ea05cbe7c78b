package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"mvkv/clog"
)

// An error that aborts a transaction rolls it back before the call
// returns, as PostgreSQL's AbortTransaction runs at the ERROR: its xid is
// aborted in the CLOG, it has left the running table, and its row locks
// are free, whether or not its caller ever rolls back.

// untilWaiting returns true once n transactions are blocked on row locks,
// false if they are not within 30 seconds. It polls a counter; it orders
// nothing by time.
func untilWaiting(db *DB, n int64) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if db.locks.waiting.Load() >= n {
			return true
		}
	}
	return false
}

// receive returns what ch delivers. Only a hang fails here: the deadline
// is far past any real wait.
func receive(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

// writer begins a READ COMMITTED transaction that has written key, and so
// holds its row lock and has an xid.
func writer(t *testing.T, db *DB, key string) *Txn {
	t.Helper()
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte(key), []byte("w")); err != nil {
		t.Fatal(err)
	}
	return tx
}

// lockHolder returns the transaction holding key's row lock, or nil.
func lockHolder(db *DB, key string) *txnState {
	sh := db.locks.shard([]byte(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.holders[key]
}

// checkAborted fails unless the victim, whose state was st, has ended:
// its xid has left the running table, the CLOG records it aborted, it no
// longer holds keys (a waiter may hold them now), and its end was
// signaled to its waiters (no key of it is free with waiters
// still queued).
func checkAborted(t *testing.T, db *DB, st *txnState, keys ...string) {
	t.Helper()
	xid := st.xid.Load()
	if xid == 0 {
		t.Fatal("the victim had no xid")
	}
	if db.procs.isRunning(xid) {
		t.Errorf("xid %d is still in the running table", xid)
	}
	if s, err := db.clog.Status(xid); err != nil || s != clog.StatusAborted {
		t.Errorf("CLOG status of xid %d: %v, %v; want aborted", xid, s, err)
	}
	for _, k := range keys {
		if lockHolder(db, k) == st {
			t.Errorf("key %q is still locked by the victim", k)
		}
	}
	for _, k := range keys {
		sh := db.locks.shard([]byte(k))
		sh.mu.Lock()
		_, queued := sh.queues[k]
		free := sh.holders[k] == nil
		sh.mu.Unlock()
		if free && queued {
			t.Errorf("key %q is free while transactions wait for it: its release woke no waiter", k)
		}
	}
}

// checkVictim checks what every test leaves: the victim's own key
// "c" is not visible and "a" holds the survivor's value; the victim's
// later calls fail with its error.
func checkVictim(t *testing.T, db *DB, v *Txn, cause error) {
	t.Helper()
	if _, ok := get(t, db, "c"); ok {
		t.Error("the victim's write of c is visible")
	}
	if got, _ := get(t, db, "a"); got != "s" {
		t.Errorf("a = %q, want the survivor's s", got)
	}
	if err := v.Put([]byte("d"), []byte("v")); !errors.Is(err, cause) {
		t.Errorf("a later Put of the victim: %v, want one wrapping %v", err, cause)
	}
	if _, err := v.Get([]byte("a")); !errors.Is(err, cause) {
		t.Errorf("a later Get of the victim: %v, want one wrapping %v", err, cause)
	}
	if v.XID() != 0 {
		t.Errorf("the victim's XID() = %d after its abort, want 0", v.XID())
	}
}

func TestDeadlockVictimReleasesLocksWithoutRollback(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	before := db.Stats().Txn.Aborts
	v, _ := db.Begin(ctx, TxnOptions{})
	s, _ := db.Begin(ctx, TxnOptions{})
	for _, k := range []string{"a", "c"} {
		if err := v.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put([]byte("b"), []byte("s")); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.Put([]byte("a"), []byte("s")) }()
	waitUntilWaiting(t, db)
	vst := v.st
	if err := v.Put([]byte("b"), []byte("v")); !errors.Is(err, ErrDeadlock) {
		t.Fatalf("closing the cycle: %v, want ErrDeadlock", err)
	}
	checkAborted(t, db, vst, "a", "c")
	// The survivor's wait ends though the victim has not rolled back.
	if err := receive(t, waited, "the survivor's Put"); err != nil {
		t.Fatalf("survivor: %v", err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	checkVictim(t, db, v, ErrDeadlock)
	if err := v.Rollback(); err != nil {
		t.Fatalf("Rollback after the abort: %v, want nil", err)
	}
	if err := v.Rollback(); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("a second Rollback: %v, want ErrTxnDone", err)
	}
	if err := v.Commit(); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("Commit after Rollback: %v, want ErrTxnDone", err)
	}
	if n := db.Stats().Txn.Aborts - before; n != 1 {
		t.Fatalf("%d aborts counted, want 1", n)
	}
}

// A lock timeout frees the victim's locks at once: the next writer of its
// key takes the lock without waiting (it would time out too otherwise),
// and the victim's Commit returns the timeout.
func TestLockTimeoutReleasesLocksWithoutRollback(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{LockTimeout: 20 * time.Millisecond})
	defer db.Close()
	ctx := context.Background()
	h := writer(t, db, "x")
	v, _ := db.Begin(ctx, TxnOptions{})
	for _, k := range []string{"a", "c"} {
		if err := v.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	vst := v.st
	if err := v.Put([]byte("x"), []byte("v")); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("waiting for h: %v, want ErrLockTimeout", err)
	}
	checkAborted(t, db, vst, "a", "c")
	s, _ := db.Begin(ctx, TxnOptions{})
	if err := s.Put([]byte("a"), []byte("s")); err != nil {
		t.Fatalf("the next writer of a: %v", err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	checkVictim(t, db, v, ErrLockTimeout)
	if err := v.Commit(); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("Commit after the timeout: %v, want one wrapping ErrLockTimeout", err)
	}
	if err := v.Rollback(); !errors.Is(err, ErrTxnDone) {
		t.Fatalf("Rollback after Commit: %v, want ErrTxnDone", err)
	}
	if err := h.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// A context canceled during a row-lock wait frees the transaction's other
// locks at once, waking their waiters.
func TestCanceledLockWaitReleasesLocksWithoutRollback(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	ctx := context.Background()
	h := writer(t, db, "x")
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v, _ := db.Begin(vctx, TxnOptions{Isolation: RepeatableRead})
	for _, k := range []string{"a", "c"} {
		if err := v.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	vst := v.st
	s, _ := db.Begin(ctx, TxnOptions{})
	waited := make(chan error, 1)
	go func() { waited <- s.Put([]byte("a"), []byte("s")) }()
	waitUntilWaiting(t, db)
	go func() {
		untilWaiting(db, 2) // s, and v below (else v's Put fails below)
		cancel()
	}()
	if err := v.Put([]byte("x"), []byte("v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting for h: %v, want context.Canceled", err)
	}
	checkAborted(t, db, vst, "a", "c")
	if err := receive(t, waited, "the survivor's Put"); err != nil {
		t.Fatalf("survivor: %v", err)
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	checkVictim(t, db, v, context.Canceled)
	if err := v.Commit(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit after the cancel: %v, want one wrapping context.Canceled", err)
	}
	if err := h.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The abort record, never flushed, or none: either way recovery
	// finds the victim's versions aborted.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{})
	defer db.Close()
	if _, ok := get(t, db, "c"); ok {
		t.Error("the victim's write of c is visible after a reopen")
	}
	if v, _ := get(t, db, "a"); v != "s" {
		t.Errorf("a = %q after a reopen, want s", v)
	}
}

// A serialization failure aborts at once as well.
func TestSerializationFailureReleasesLocksWithoutRollback(t *testing.T) {
	// The lock timeout only keeps a failure from hanging.
	db := openTest(t, t.TempDir(), Options{LockTimeout: time.Minute})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "x", "0")
	v, _ := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead})
	if _, err := v.Get([]byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "c"} {
		if err := v.Put([]byte(k), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	vst := v.st
	mustPut(t, db, "x", "1")
	if err := v.Put([]byte("x"), []byte("v")); !errors.Is(err, ErrSerializationFailure) {
		t.Fatalf("%v, want ErrSerializationFailure", err)
	}
	checkAborted(t, db, vst, "a", "c", "x")
	// Its snapshot, taken by the first Get, no longer holds the
	// horizon: nothing else is open.
	if h, next := db.oldestXmin(), db.procs.next(); h != next {
		t.Errorf("vacuum horizon %d after the abort, want the next xid %d: the snapshot is still registered", h, next)
	}
	mustPut(t, db, "a", "s")
	checkVictim(t, db, v, ErrSerializationFailure)
	if err := v.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// An error met by a call the caller's Update function makes aborts the
// transaction only when Update returns: until then Update still holds
// its key's row lock, and once it returns it has written nothing.
func TestNestedFailureAbortsWhenOutermostCallReturns(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{LockTimeout: 20 * time.Millisecond})
	defer db.Close()
	h := writer(t, db, "x")
	v := writer(t, db, "c")
	vst := v.st
	var inner error
	err := v.Update([]byte("a"), func([]byte, bool) ([]byte, error) {
		inner = v.Put([]byte("x"), []byte("v"))
		if lockHolder(db, "a") != vst || lockHolder(db, "c") != vst {
			t.Error("the nested failure released the locks while Update runs")
		}
		if !db.procs.isRunning(vst.xid.Load()) {
			t.Error("the nested failure ended the transaction while Update runs")
		}
		return []byte("v"), nil // going on regardless
	})
	if !errors.Is(inner, ErrLockTimeout) {
		t.Fatalf("the nested Put: %v, want ErrLockTimeout", inner)
	}
	if !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("Update: %v, want one wrapping ErrLockTimeout", err)
	}
	checkAborted(t, db, vst, "a", "c")
	if _, ok := get(t, db, "a"); ok {
		t.Error("Update wrote a after its transaction was aborted")
	}
	if err := v.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := h.Rollback(); err != nil {
		t.Fatal(err)
	}
}

// A write of a Scan's (or ScanKeys', DeleteRange's) function that aborts
// the transaction ends the call there: the function is not called for the
// keys after it, and the call returns an error wrapping the write's
// instead of nil, also when the function kept the write's error to itself
// and asked to stop, and when the failing write came at the last key.
func TestScanEndsAtAbortInItsFunction(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{LockTimeout: 20 * time.Millisecond})
	defer db.Close()
	keys := []string{"k1", "k2", "k3"}
	h := writer(t, db, "x")
	defer h.Rollback()
	// each is the function's body; it returns whether to go on.
	scans := map[string]func(v *Txn, each func() bool) error{
		"Scan": func(v *Txn, each func() bool) error {
			return v.Scan([]byte("k"), []byte("l"), func(_, _ []byte) bool { return each() })
		},
		"ScanPrefix": func(v *Txn, each func() bool) error {
			return v.ScanPrefix([]byte("k"), []byte("l"), 1, func(_, _ []byte, _ int) bool { return each() })
		},
		"ScanKeys": func(v *Txn, each func() bool) error {
			return v.ScanKeys([]byte("k"), []byte("l"), func([]byte) bool { return each() })
		},
		"DeleteRange": func(v *Txn, each func() bool) error {
			_, err := v.DeleteRange([]byte("k"), []byte("l"), func(_, _ []byte) { each() })
			return err
		},
		"DeleteRangePrefix": func(v *Txn, each func() bool) error {
			_, err := v.DeleteRangePrefix([]byte("k"), []byte("l"), 1, func(_, _ []byte, _ int, _ error) { each() })
			return err
		},
	}
	for name, scan := range scans {
		for _, tc := range []struct {
			name string
			at   int  // the call of the function whose write fails
			stop bool // the function then returns false (stop)
		}{{"first", 1, false}, {"first-stops", 1, true}, {"last", len(keys), false}} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				for _, k := range keys {
					mustPut(t, db, k, "v")
				}
				v := writer(t, db, "c")
				vst := v.st
				calls := 0
				var inner error
				err := scan(v, func() bool {
					calls++
					if calls == tc.at {
						inner = v.Put([]byte("x"), []byte("v"))
						return !tc.stop
					}
					return true
				})
				if !errors.Is(inner, ErrLockTimeout) {
					t.Fatalf("the nested Put: %v, want ErrLockTimeout", inner)
				}
				if !errors.Is(err, ErrLockTimeout) {
					t.Errorf("%s: %v, want one wrapping ErrLockTimeout", name, err)
				}
				if calls != tc.at {
					t.Errorf("%s called its function %d times, want %d: the abort ends the call", name, calls, tc.at)
				}
				checkAborted(t, db, vst, "c")
				if err := v.Rollback(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// OnAbort's function runs once, when the abort has made the writes
// invisible and before the row locks go; never on commit.
func TestOnAbort(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{LockTimeout: 20 * time.Millisecond})
	defer db.Close()
	ctx := context.Background()
	h := writer(t, db, "x")
	v := writer(t, db, "a")
	vst := v.st
	xid := vst.xid.Load()
	runs := 0
	v.OnAbort(func() {
		runs++
		if s, err := db.clog.Status(xid); err != nil || s != clog.StatusAborted {
			t.Errorf("in OnAbort, CLOG status %v, %v; want aborted", s, err)
		}
		if lockHolder(db, "a") != vst {
			t.Error("in OnAbort, a is unlocked already")
		}
	})
	if err := v.Put([]byte("x"), []byte("v")); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("%v, want ErrLockTimeout", err)
	}
	if runs != 1 {
		t.Fatalf("OnAbort ran %d times at the error, want 1", runs)
	}
	v.Rollback()
	if runs != 1 {
		t.Fatalf("OnAbort ran %d times after Rollback, want 1", runs)
	}
	h.OnAbort(func() { t.Error("OnAbort ran on commit") })
	if err := h.Commit(); err != nil {
		t.Fatal(err)
	}
	// By Rollback, also of a transaction that placed nothing.
	for _, write := range []bool{true, false} {
		r, _ := db.Begin(ctx, TxnOptions{})
		if write {
			if err := r.Put([]byte("b"), []byte("r")); err != nil {
				t.Fatal(err)
			}
		}
		ran := false
		r.OnAbort(func() { ran = true })
		if err := r.Rollback(); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Errorf("OnAbort did not run on Rollback (write %v)", write)
		}
	}
}

// An OnAbort function that panics does not keep the row locks: they
// are released as the panic goes up, whether the transaction had an xid
// (a Put) or only row locks (a delete of a missing key), so the next
// writer of the key is not kept waiting for ever.
func TestOnAbortPanicReleasesLocks(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	ctx := context.Background()
	for _, write := range []string{"put", "delete of a missing key"} {
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if write == "put" {
			err = tx.Put([]byte("k"), []byte("v"))
		} else {
			err = tx.Delete([]byte("missing"))
		}
		if err != nil {
			t.Fatal(err)
		}
		tx.OnAbort(func() { panic("in OnAbort") })
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s: Rollback did not pass the panic on", write)
				}
			}()
			tx.Rollback()
		}()
		for _, k := range []string{"k", "missing"} {
			if h := lockHolder(db, k); h != nil {
				t.Fatalf("%s: %s still locked after the panic", write, k)
			}
		}
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("k"), []byte("after")) }); err != nil {
		t.Fatal(err)
	}
}

// A Scan's (or ScanKeys', DeleteRange's) function that ends its own
// transaction with Commit or Rollback ends the call there with
// ErrTxnDone, as Update's does: the scan went on reading with the ended
// transaction's released snapshot.
func TestScanEndsWhenItsFunctionEndsTheTxn(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	for _, k := range []string{"k1", "k2", "k3"} {
		mustPut(t, db, k, "v")
	}
	calls := map[string]func(v *Txn, each func()) error{
		"Scan": func(v *Txn, each func()) error {
			return v.Scan([]byte("k"), []byte("l"), func(_, _ []byte) bool { each(); return true })
		},
		"ScanKeys": func(v *Txn, each func()) error {
			return v.ScanKeys([]byte("k"), []byte("l"), func([]byte) bool { each(); return true })
		},
		"DeleteRange": func(v *Txn, each func()) error {
			_, err := v.DeleteRange([]byte("k"), []byte("l"), func(_, _ []byte) { each() })
			return err
		},
	}
	for name, call := range calls {
		for _, iso := range []IsolationLevel{ReadCommitted, RepeatableRead} {
			for _, end := range []string{"Commit", "Rollback"} {
				t.Run(name+"/"+iso.String()+"/"+end, func(t *testing.T) {
					v, err := db.Begin(context.Background(), TxnOptions{Isolation: iso})
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					err = call(v, func() {
						if n++; n == 1 {
							if end == "Commit" {
								_ = v.Commit()
							} else {
								_ = v.Rollback()
							}
						}
					})
					if !errors.Is(err, ErrTxnDone) {
						t.Errorf("%s: %v, want ErrTxnDone", name, err)
					}
					if n != 1 {
						t.Errorf("%s called its function %d times after it ended the transaction, want 1", name, n)
					}
				})
			}
		}
	}
}
