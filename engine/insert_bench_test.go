package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkInsert measures one transaction that inserts a new key with a
// 100-byte value, synchronous_commit off: about one insert in 50 fills its
// page and extends the heap, so the figure includes the extension's cost.
func BenchmarkInsert(b *testing.B) {
	off := false
	db := openTest(b, b.TempDir(), Options{SynchronousCommit: SyncCommitOff, Autovacuum: &off})
	defer db.Close()
	val := bytes.Repeat([]byte("v"), 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		putOne(b, db, []byte(fmt.Sprint("key", i)), val)
	}
	b.ReportMetric(float64(db.pool.NBlocks())/float64(b.N), "pages/op")
}

// putOne writes key in a transaction of its own, begun, written and
// committed by hand rather than through DB.Update, so that a benchmark
// measures the write path without the retry loop's closure.
func putOne(b *testing.B, db *DB, key, val []byte) {
	txn, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := txn.Put(key, val); err != nil {
		b.Fatal(err)
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
}
