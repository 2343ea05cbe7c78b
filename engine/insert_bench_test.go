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
		txn, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := txn.Put([]byte(fmt.Sprint("key", i)), val); err != nil {
			b.Fatal(err)
		}
		if err := txn.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(db.pool.NBlocks())/float64(b.N), "pages/op")
}
