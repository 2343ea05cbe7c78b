package engine

import (
	"context"
	"testing"

	"mvkv/vfs"
)

// A one-key write allocates what its work needs and nothing for its own
// bookkeeping: no row-lock list for its one key (txnState.lock1), no
// commit record payload (txnState.stamp), no error holder on success
// (Txn.write). The server runs one such transaction a request.
func TestOneKeyWriteAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	// No autovacuum or checkpoint: AllocsPerRun counts every goroutine's
	// allocations, and a vacuum of the versions the loop leaves, which a
	// slow run would start a second after Open, would be counted too.
	db, err := Open("db", Options{FS: vfs.NewMemFS(), SynchronousCommit: SyncCommitOff, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key, val := []byte("key:__rand_int__"), []byte("xxx")
	put := func() {
		tx, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put(key, val); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put()
	// The Txn, its txnState, the locked key as the lock table's string,
	// the version read from the chain. (A wait for the row lock takes a
	// wake-up channel from a pool.)
	const want = 4
	if n := testing.AllocsPerRun(1000, put); n > want {
		t.Fatalf("a one-key write made %v allocations, want at most %d", n, want)
	}
}
