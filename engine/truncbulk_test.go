package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// TestBulkLoadAfterTruncateCrash: vacuum cuts the heap to nothing, a bulk
// load then writes its pages at the same block numbers and commits, and
// the process dies before the load's checkpoint finishes. Redo replays the
// HEAP_TRUNCATE, which comes before the BULK_LOAD in the WAL: it must not
// cut off the loaded pages, which no record rebuilds.
func TestBulkLoadAfterTruncateCrash(t *testing.T) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for i := range 300 {
		mustPut(t, db, fmt.Sprintf("t%03d", i), strings.Repeat("t", 1900))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		mustDelete(t, db, fmt.Sprintf("t%03d", i))
	}
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PagesTruncated == 0 || db.pool.NBlocks() != 0 {
		t.Fatalf("vacuum truncated %d pages, %d blocks left", st.PagesTruncated, db.pool.NBlocks())
	}
	// Kill -9 at the load's checkpoint, after its commit is durable:
	// the last write of the index file, before the control file names
	// the new checkpoint.
	var killed *vfs.MemFS
	m.SetOpHook(func(p vfs.CrashPoint) {
		if p.Op.Kind == vfs.OpWrite && strings.Contains(p.Op.Path, "index") {
			killed = p.Clone()
		}
	})
	const n = 2000
	if _, err := db.BulkLoad(ctx, bulkRows(n, 100)); err != nil {
		t.Fatal(err)
	}
	m.SetOpHook(nil)
	if killed == nil {
		t.Fatal("the load's checkpoint wrote no index file")
	}
	o := opts
	o.FS = killed
	db2, err := Open("/db", o)
	if err != nil {
		t.Fatalf("open after a crash at the bulk load's checkpoint: %v", err)
	}
	defer db2.Close()
	if scan, _ := countKeys(t, db2); scan != n {
		t.Fatalf("%d keys after the crash, want the %d the load committed", scan, n)
	}
	if rep, err := db2.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}
