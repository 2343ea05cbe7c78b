package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// deleteAllLoad writes n keys, 50 a transaction; with big, every seventh
// value is out of line (about 30 KiB).
func deleteAllLoad(t *testing.T, db *DB, n int, big bool) {
	t.Helper()
	for i := 0; i < n; i += 50 {
		if err := db.Update(context.Background(), func(tx *Txn) error {
			for j := i; j < min(i+50, n); j++ {
				v := strings.Repeat(fmt.Sprint(j%10), 200)
				if big && j%7 == 0 {
					v = strings.Repeat(fmt.Sprint(j%10), 30000+j)
				}
				if err := tx.Put([]byte(fmt.Sprintf("k%06d", j)), []byte(v)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteAllEmpty checks that db, whose heap files are on m, holds nothing:
// no heap block, a heap file of 0 bytes, no key in the index or to Count,
// no visibility map bit left set for the full blocks the heap had, no chunk owed, and Verify clean.
func deleteAllEmpty(t *testing.T, db *DB, m *vfs.MemFS, full uint32, what string) {
	t.Helper()
	st := db.Stats()
	var n int
	if err := db.View(context.Background(), func(tx *Txn) error {
		var err error
		n, err = tx.Count(nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("%s: Verify: %v %v", what, err, rep.Problems)
	}
	size := heapFileSize(t, m)
	if st.Heap.Blocks != 0 || size != 0 || st.Index.Keys != 0 || n != 0 || st.Vacuum.ChunksOwed != 0 || rep.Pages != 0 || rep.Keys != 0 {
		t.Fatalf("%s: %d heap blocks, heap file of %d bytes, %d index keys, Count %d, %d chunks owed; Verify: %d pages, %d keys",
			what, st.Heap.Blocks, size, st.Index.Keys, n, st.Vacuum.ChunksOwed, rep.Pages, rep.Keys)
	}
	r := db.vm.NewReader()
	for blk := range full {
		if bits, err := r.Test(blk); err != nil || bits != 0 {
			t.Fatalf("%s: visibility map bits %v for block %d of an empty heap (%v)", what, bits, blk, err)
		}
	}
}

// TestDeleteRangeAllThenVacuum: DeleteRange of every key (small values and
// out-of-line ones), then one VACUUM, leaves an empty heap file, index and
// visibility map, which Close and Open, and a crash, keep; writing the
// same keys again takes as many pages as the first time.
func TestDeleteRangeAllThenVacuum(t *testing.T) {
	for _, big := range []bool{false, true} {
		t.Run(fmt.Sprintf("outOfLine=%v", big), func(t *testing.T) {
			const n = 700
			m := vfs.NewMemFS()
			m.MkdirAll("/db")
			m.SyncDir("/")
			opts := Options{FS: m, CheckpointTimeout: -1, Autovacuum: noAutovacuum, SharedBuffers: 64 * heap.PageSize, WALSegmentSize: 1 << 20}
			db, err := Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			deleteAllLoad(t, db, n, big)
			full := db.pool.NBlocks()
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if err := db.Update(ctx, func(tx *Txn) error {
				d, err := tx.DeleteRange(nil, nil, nil)
				if err == nil && d != n {
					err = fmt.Errorf("deleted %d keys, want %d", d, n)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			st, err := db.Vacuum(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.PagesTruncated != uint64(full) || st.KeysRemoved != n {
				t.Fatalf("vacuum cut %d of %d pages and removed %d of %d keys", st.PagesTruncated, full, st.KeysRemoved, n)
			}
			deleteAllEmpty(t, db, m, full, "after VACUUM")
			crash := m.CrashCopy(vfs.DropUnsynced, nil)
			db.Close()
			db, err = Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			deleteAllEmpty(t, db, m, full, "reopened")
			deleteAllLoad(t, db, n, big)
			if got := db.pool.NBlocks(); got != full {
				t.Fatalf("the same keys written again take %d blocks, the first time %d", got, full)
			}
			db.Close()
			o := opts
			o.FS = crash
			db, err = Open("/db", o)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			deleteAllEmpty(t, db, crash, full, "after a crash")
		})
	}
}
