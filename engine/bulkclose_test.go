package engine

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
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

// TestCloseWithWriterBehindBulkLoad: a write that found no bulk load under
// way, then took the close lock just as a load began, waits for the load
// with that lock held (its entry made after the load found the index
// empty; see bulkLoadLocked). Close must not wait for that write first, as
// the write waits for the load, which may wait for Close: its rows
// function calls Close, or waits for a Close on another goroutine to
// return. Close ends the load inside rows, the write goes on and either
// commits or gets ErrClosed, and the reopened database holds the key
// exactly when the write reported success, and nothing of the load.
func TestCloseWithWriterBehindBulkLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spawned bool // Close on another goroutine, which rows waits for
	}{
		{"rows-closes", false},
		{"rows-waits-for-close", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
			holding := make(chan struct{})
			goOn := make(chan struct{})
			placing := make(chan struct{})
			db.testWriteStep = func(step string) {
				switch step {
				case "lookup":
					close(holding)
					<-goOn
				case "place":
					close(placing)
				}
			}
			wrote := make(chan error, 1)
			go func() {
				wrote <- db.Update(context.Background(), func(tx *Txn) error {
					return tx.Put([]byte("w"), []byte("written beside the load"))
				})
			}()
			<-holding // the write holds closeMu shared, no load yet
			closed := make(chan error, 1)
			rows := func(yield func(k, v []byte) bool) {
				for i := 0; i < 100; i++ {
					if i == 10 {
						// The load holds the interlock and found the
						// index empty; the write now looks its key up
						// and, closeMu held, goes to place its version,
						// where it waits for the load.
						close(goOn)
						<-placing
						closeFromRows(db, tc.spawned, closed)
					}
					if !yield(bulkKey(i), bulkVal(i, 100)) {
						return
					}
				}
			}
			if err := bulkLoadLiveness(t, db, rows); !errors.Is(err, ErrClosed) {
				t.Errorf("BulkLoad = %v; want ErrClosed", err)
			}
			if tc.spawned {
				if err := <-closed; err != nil {
					t.Fatalf("Close: %v", err)
				}
			} else if err := <-closed; err != nil {
				t.Fatalf("Close from rows: %v", err)
			}
			var werr error
			select {
			case werr = <-wrote:
			case <-time.After(time.Minute):
				t.Fatal("the write beside the load did not return within a minute")
			}
			if werr != nil && !errors.Is(werr, ErrClosed) {
				t.Fatalf("the write beside the load: %v; want nil or ErrClosed", werr)
			}
			db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
			defer db.Close()
			var got []byte
			found := false
			if err := db.View(context.Background(), func(tx *Txn) error {
				var err error
				got, err = tx.Get([]byte("w"))
				found = err == nil
				if errors.Is(err, ErrNotFound) {
					err = nil
				}
				return err
			}); err != nil {
				t.Fatalf("read after the reopen: %v", err)
			}
			if found != (werr == nil) {
				t.Fatalf("after the reopen the key is found=%v (%q), the write having returned %v", found, got, werr)
			}
			n := 0
			if err := db.View(context.Background(), func(tx *Txn) error {
				return tx.Scan(nil, nil, func(k, v []byte) bool { n++; return true })
			}); err != nil {
				t.Fatalf("scan after the reopen: %v", err)
			}
			if want := map[bool]int{true: 1, false: 0}[found]; n != want {
				t.Fatalf("%d keys after the reopen; want %d (nothing of the load)", n, want)
			}
		})
	}
}

// TestCloseWithCheckpointBehindBulkLoad: a Checkpoint waits for the
// checkpoint lock a bulk load holds while its rows function runs, with the
// close lock held shared; rows then waits for a Close on another
// goroutine. Close ends the load inside rows, the Checkpoint goes on, and
// Close returns: before, Close waited for the close lock behind the
// Checkpoint, which waited for the load, which waited for Close.
func TestCloseWithCheckpointBehindBulkLoad(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	checkpointed := make(chan error, 1)
	closed := make(chan error, 1)
	rows := func(yield func(k, v []byte) bool) {
		for i := 0; i < 100; i++ {
			if i == 10 {
				go func() { checkpointed <- db.Checkpoint() }()
				// The Checkpoint holds closeMu shared once it is
				// waiting for the load's checkpoint lock: nothing else
				// takes closeMu here.
				for db.closeMu.TryLock() {
					db.closeMu.Unlock()
					runtime.Gosched()
				}
				done := make(chan struct{})
				go func() { closed <- db.Close(); close(done) }()
				<-done
			}
			if !yield(bulkKey(i), bulkVal(i, 100)) {
				return
			}
		}
	}
	if err := bulkLoadLiveness(t, db, rows); !errors.Is(err, ErrClosed) {
		t.Errorf("BulkLoad = %v; want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-checkpointed; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint: %v; want nil or ErrClosed", err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	if _, err := db.BulkLoad(context.Background(), bulkRows(100, 10)); err != nil {
		t.Fatalf("BulkLoad after the reopen: %v", err)
	}
	checkState(t, db, bulkState(100, 10))
}

// bulkLoadLiveness runs db.BulkLoad of rows on another goroutine and
// returns its error, failing the test if it does not return within a
// minute: only a deadlock (of the load, a Close its rows wait for, and what
// waits for them) makes it that long.
func bulkLoadLiveness(t *testing.T, db *DB, rows func(yield func(k, v []byte) bool)) error {
	t.Helper()
	loaded := make(chan error, 1)
	go func() {
		_, err := db.BulkLoad(context.Background(), rows)
		loaded <- err
	}()
	select {
	case err := <-loaded:
		return err
	case <-time.After(time.Minute):
		t.Fatal("BulkLoad did not return within a minute (deadlock)")
		return nil
	}
}

// TestCloseFromLoadWhileAnotherCheckpoints: a bulk load that loaded
// nothing goes on to its checkpoint, which waits for the checkpoint lock a
// second load took as the first released it; the second load's rows calls
// Close. Close ends the second load, the first one's checkpoint goes on,
// and everything returns. Before, the first load ran its checkpoint as
// part of the load Close waits for, so Close waited for that checkpoint,
// which waited for the second load, which waited for Close.
func TestCloseFromLoadWhileAnotherCheckpoints(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	inA, goA := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		_, err := db.BulkLoad(context.Background(), func(yield func(k, v []byte) bool) {
			close(inA)
			<-goA // loads nothing
		})
		doneA <- err
	}()
	select {
	case <-inA: // the first load holds the checkpoint lock
	case err := <-doneA:
		t.Fatalf("the first BulkLoad returned before its rows ran: %v", err)
	}
	closed := make(chan error, 1)
	doneB := make(chan error, 1)
	go func() {
		_, err := db.BulkLoad(context.Background(), func(yield func(k, v []byte) bool) {
			closed <- db.Close()
		})
		doneB <- err
	}()
	// The second load waits for the checkpoint lock: it gets it as the
	// first releases it, before the first one's checkpoint asks for it.
	if !waitBlocked(t, "(*runLock).lockCtx") {
		t.FailNow()
	}
	close(goA)
	select {
	case err := <-doneB:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("second BulkLoad = %v; want ErrClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the second load and its Close did not return within a minute (deadlock)")
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-doneA; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("first BulkLoad = %v; want nil or ErrClosed (from its checkpoint)", err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	if _, err := db.BulkLoad(context.Background(), bulkRows(100, 10)); err != nil {
		t.Fatalf("BulkLoad after the reopen: %v", err)
	}
	checkState(t, db, bulkState(100, 10))
}

// closeFromRows closes db from a bulk load's rows function, as rows may:
// directly, or on another goroutine rows waits for (spawned), sending
// Close's result on closed.
func closeFromRows(db *DB, spawned bool, closed chan<- error) {
	if !spawned {
		closed <- db.Close()
		return
	}
	done := make(chan struct{})
	go func() { closed <- db.Close(); close(done) }()
	<-done
}
