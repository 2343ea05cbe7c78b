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
// cut off the loaded pages, which no record rebuilds. Also when a
// checkpoint between the cut and the load failed (its index file could not
// be created), which moved the redo pointer but not the control file's.
func TestBulkLoadAfterTruncateCrash(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprintf("failedCheckpoint=%v", failed), func(t *testing.T) { bulkLoadAfterTruncateCrash(t, failed) })
	}
}

func bulkLoadAfterTruncateCrash(t *testing.T, failedCheckpoint bool) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	ffs := vfs.NewFaultFS(m)
	opts := Options{FS: ffs, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize}
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
	if failedCheckpoint {
		ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpCreate), Base: "index.tmp", Nth: 1})
		if err := db.Checkpoint(); err == nil {
			t.Fatal("the checkpoint succeeded although its index file could not be created")
		}
		ffs.Clear()
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
