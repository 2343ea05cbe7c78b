package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

// hookCtx is a context whose Err runs fn once, on its n-th call. Vacuum
// calls ctx.Err once per block in pass 1 and once per block in pass 2, so
// n = NBlocks()+1 runs fn between the two passes.
type hookCtx struct {
	context.Context
	calls atomic.Int64
	n     int64
	fn    func()
}

func (c *hookCtx) Err() error {
	if c.calls.Add(1) == c.n {
		c.fn()
	}
	return c.Context.Err()
}

// mustHaveRun fails the test if c's function never ran: the interleaving
// the test is about did not happen.
func mustHaveRun(t *testing.T, c *hookCtx) {
	t.Helper()
	if c.calls.Load() < c.n {
		t.Fatalf("the hook never ran: %d calls of Err, wanted %d", c.calls.Load(), c.n)
	}
}

// TestVacuumCountsXidsOfHeadMovedOn: pass 1 finds the deleted key's head P
// and leaves it to pass 2; before pass 2 a writer inserts the key again, so
// pass 2 leaves P on the page, below the new version. P's xids must still
// hold RelFrozenXid back: they did not, the CLOG segment holding them was
// truncated, and the next vacuum failed to read P's status.
func TestVacuumCountsXidsOfHeadMovedOn(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1,
		WALWriterDelay: 10 * time.Second})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "v1") // P, xmin in CLOG segment 0
	off := SyncCommitOff
	// The delete commits asynchronously, so pass 1 cannot hint its xmax
	// (its commit record is not flushed yet).
	if err := db.run(ctx, TxnOptions{Isolation: RepeatableRead, SynchronousCommit: &off}, func(tx *Txn) error {
		return tx.Delete([]byte("k"))
	}); err != nil {
		t.Fatal(err)
	}
	// Many transactions later, as the CLOG truncation tests make it.
	db.procs.setNext(3*clogSegXids + 10)

	hc := &hookCtx{Context: ctx, n: int64(db.pool.NBlocks()) + 1, fn: func() {
		mustPut(t, db, "k", "v2") // re-insert between pass 1 and pass 2
	}}
	st, err := db.Vacuum(hc)
	if err != nil {
		t.Fatal(err)
	}
	mustHaveRun(t, hc)
	t.Logf("vacuum 1: %+v; clog oldest xid now %d", st, db.clog.OldestXid())
	if v, ok := get(t, db, "k"); !ok || v != "v2" {
		t.Fatalf("k = %q, %v", v, ok)
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatalf("second vacuum: %v", err)
	}
}

// TestVacuumCountsXidsOfHeadMovedOnCrash is the same with every commit
// synchronous: pass 1 does hint P's xmax, but the hint is not WAL-logged
// and the page is not written; a crash after the vacuum (its CLOG
// truncation record is durable) loses the hint, and P then needs the CLOG.
func TestVacuumCountsXidsOfHeadMovedOnCrash(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, VacuumFreezeMinAge: -1, CheckpointTimeout: -1}
	db := openTest(t, "/db", opts)
	ctx := context.Background()
	mustPut(t, db, "k", "v1")
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("k")) }); err != nil {
		t.Fatal(err)
	}
	db.procs.setNext(3*clogSegXids + 10)
	if err := db.Checkpoint(); err != nil { // P's page on disk: xmax D, no xmax hint
		t.Fatal(err)
	}
	hc := &hookCtx{Context: ctx, n: int64(db.pool.NBlocks()) + 1, fn: func() { mustPut(t, db, "k", "v2") }}
	st, err := db.Vacuum(hc)
	if err != nil {
		t.Fatal(err)
	}
	mustHaveRun(t, hc)
	t.Logf("vacuum: RelFrozenXid %d, clog oldest xid %d", st.RelFrozenXid, db.clog.OldestXid())
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()

	opts.FS = crashed
	db2 := openTest(t, "/db", opts)
	defer db2.Close()
	if v, ok := get(t, db2, "k"); !ok || v != "v2" {
		t.Fatalf("after crash k = %q, %v", v, ok)
	}
	if _, err := db2.Vacuum(ctx); err != nil {
		t.Fatalf("vacuum after crash: %v", err)
	}
}

// TestVacuumNewHeadNotPrunedMeanwhile: vacuum's second pass moves an
// aborted index head down to the newest committed version below it, found
// with no lock on that version's page, and installs it later, under the
// aborted head's page lock. That version here is a deleted one whose delete
// passes the horizon in between; a prune of its page then freed it (it was
// not a head yet), and the index named a free slot: every read of the key
// failed with ErrCorruption. The interleaving is forced: a checkpoint
// waiting for the checkpoint interlock holds the second pass before it
// installs the head, while the test ends the snapshot that kept the delete
// recent and prunes the version's page, as a read would.
func TestVacuumNewHeadNotPrunedMeanwhile(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	ctx := context.Background()
	mustPut(t, db, "k", "v1") // C

	old, err := db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Get([]byte("k")); err != nil { // snapshot before the delete
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("k")) }); err != nil { // D
		t.Fatal(err)
	}
	a, _ := db.Begin(ctx, TxnOptions{})
	if err := a.Put([]byte("k"), []byte("v2")); err != nil { // A: re-insert, Prev = C
		t.Fatal(err)
	}
	a.Rollback()
	cTID := func() (tid [2]uint32) {
		e := db.idx.get([]byte("k"))
		v, err := db.readVersion(e.headTID(), "k", false)
		if err != nil {
			t.Fatal(err)
		}
		return [2]uint32{v.hdr.Prev.Block, uint32(v.hdr.Prev.Slot)}
	}()
	t.Logf("aborted head %v links to C at %v", db.idx.get([]byte("k")).headTID(), cTID)

	pruned := make(chan int, 1)
	hc := &hookCtx{Context: ctx, n: int64(db.pool.NBlocks()) + 1, fn: func() {
		held := make(chan struct{})
		go func() {
			db.ckptInterlock.RLock()
			close(held)
			time.Sleep(200 * time.Millisecond) // vacuum: latest() done, now blocked on the interlock
			old.Rollback()                     // the delete is now below every snapshot
			db.closeMu.RLock()
			buf, err := db.pool.Get(cTID[0])
			if err != nil {
				t.Error(err)
			} else {
				buf.Lock()
				res, err := db.prunePageLocked(buf, pruneByRead, nil)
				buf.Unlock()
				buf.Release()
				if err != nil {
					t.Error(err)
				}
				pruned <- res.removed
			}
			db.closeMu.RUnlock()
			db.ckptInterlock.RUnlock()
		}()
		<-held
		go db.Checkpoint() // waits for the interlock; new readers of it queue behind
		time.Sleep(50 * time.Millisecond)
	}}
	st, err := db.Vacuum(hc)
	if err != nil {
		t.Fatal(err)
	}
	mustHaveRun(t, hc)
	t.Logf("prune of C's page removed %d; vacuum: %+v", <-pruned, st)
	e := db.idx.get([]byte("k"))
	if e != nil {
		t.Logf("index head of k now %v", e.headTID())
	}
	var v []byte
	err = db.View(ctx, func(tx *Txn) error { var err error; v, err = tx.Get([]byte("k")); return err })
	t.Logf("Get(k) = %q, %v", v, err)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(k) after vacuum: %v", err)
	}
	if vr, err := db.Verify(); err != nil || !vr.OK() {
		t.Fatalf("Verify: %v %v", err, vr.Problems)
	}
}
