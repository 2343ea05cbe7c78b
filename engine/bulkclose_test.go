package engine

import (
	"context"
	"errors"
	"testing"
)

// TestBulkLoadRowsClosesDB: a bulk load's rows function that calls Close,
// itself or on a goroutine it waits for, does not deadlock: Close ends the
// load (nothing loaded) and closes the database, rows's next yield returns
// false, and BulkLoad returns ErrClosed. Reopened, the database is empty
// and takes a load. The Close comes after some pages were written (and
// with them a background fsync and the index goroutine started), and
// also before the first row.
func TestBulkLoadRowsClosesDB(t *testing.T) {
	for _, tc := range []struct {
		name    string
		at      int
		spawned bool
	}{
		{"direct", 9000, false},
		{"goroutine", 9000, true},
		{"first-row", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
			var closeErr error
			closed, yieldedAfter := false, false
			rows := func(yield func(k, v []byte) bool) {
				for i := 0; i < 12000; i++ {
					if i == tc.at {
						if tc.spawned {
							done := make(chan error, 1)
							go func() { done <- db.Close() }()
							closeErr = <-done
						} else {
							closeErr = db.Close()
						}
						closed = true
					}
					if !yield(bulkKey(i), bulkVal(i, 100)) {
						if closed {
							yieldedAfter = true
						}
						return
					}
				}
			}
			_, err := db.BulkLoad(context.Background(), rows)
			if !closed {
				t.Fatal("rows did not reach its Close")
			}
			if closeErr != nil {
				t.Fatalf("Close from rows: %v", closeErr)
			}
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("BulkLoad = %v; want ErrClosed", err)
			}
			if !yieldedAfter {
				t.Fatal("yield did not stop rows after the Close")
			}
			db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
			defer db.Close()
			if n := db.idx.len(); n != 0 {
				t.Fatalf("%d keys after the reopen; want none", n)
			}
			if _, err := db.BulkLoad(context.Background(), bulkRows(100, 10)); err != nil {
				t.Fatalf("BulkLoad after the reopen: %v", err)
			}
			checkState(t, db, bulkState(100, 10))
		})
	}
}
