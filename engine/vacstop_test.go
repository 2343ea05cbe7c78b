package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"mvkv/internal/heap"
)

// cancelAfter is a context whose Err reports context.Canceled from its
// n+1st call on: vacuum asks it before each page of each pass, so the run
// stops at a page the test chooses, whatever the timing.
type cancelAfter struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// damageTuple makes the tuple at tid undecodable in the buffer pool (its
// key length past the tuple, as rewriteTuple's damage), without marking
// the page dirty, and returns the function that undoes it.
func damageTuple(t *testing.T, db *DB, tid heap.TID) (repair func()) {
	t.Helper()
	edit := func(fn func(raw []byte)) {
		buf, err := db.pool.Get(tid.Block)
		if err != nil {
			t.Fatal(err)
		}
		defer buf.Release()
		buf.Lock()
		defer buf.Unlock()
		raw, err := heap.Tuple(buf.Page(), tid.Slot)
		if err != nil {
			t.Fatal(err)
		}
		fn(raw)
	}
	var saved [2]byte
	edit(func(raw []byte) { copy(saved[:], raw[24:26]); raw[24], raw[25] = 0xff, 0xff })
	return func() { edit(func(raw []byte) { copy(raw[24:26], saved[:]) }) }
}

// queuedNamed fails the test if vacuum's debt of chunks to free holds a
// chunk that a version still on the heap names with its xmin.
func queuedNamed(t *testing.T, db *DB) {
	t.Helper()
	queued := make(map[chunkID]bool)
	for _, c := range db.vac.debt.list() {
		queued[c] = true
	}
	eachHeapTuple(t, db, func(tid heap.TID, raw []byte) {
		h, _, val, err := heap.DecodeTuple(raw)
		if err != nil || h.Infomask&heap.External == 0 || h.Infomask&heap.Chunk != 0 {
			return
		}
		ctids, err := chunkTIDs(val)
		if err != nil {
			return
		}
		for _, c := range ctids {
			if queued[chunkID{c, h.Xmin}] {
				t.Errorf("chunk %s is queued for freeing, but version %s still names it", c, tid)
			}
		}
	})
}

// TestVacuumStoppedKeepsChunks: a run that stops during its first pass
// (canceled before a later page, or at a damaged tuple on a later page or
// further down the same page) after removing an overwritten out-of-line
// version hands that version's chunks to the next run, which frees them:
// no orphans. What it hands on is never named by a version it did not
// remove.
func TestVacuumStoppedKeepsChunks(t *testing.T) {
	for _, stop := range []string{"canceled", "damaged later page", "damaged same page"} {
		t.Run(stop, func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
			defer db.Close()
			mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
			old := db.idx.get([]byte("big")).headTID()
			mustPut(t, db, "big", "small now")
			// The tuple to damage on the same page: the new version, after
			// the old one; on a later page: a filler key's.
			same := db.idx.get([]byte("big")).headTID()
			if same.Block != old.Block || same.Slot <= old.Slot {
				t.Fatalf("layout: the new version is at %s, the old at %s", same, old)
			}
			var later heap.TID
			for i := 0; later.Block <= old.Block; i++ {
				if i == 1000 {
					t.Fatalf("layout: no filler key went past block %d", old.Block)
				}
				k := fmt.Sprintf("k%04d", i)
				mustPut(t, db, k, strings.Repeat("v", 100))
				later = db.idx.get([]byte(k)).headTID()
			}
			var ctx context.Context = context.Background()
			repair := func() {}
			switch stop {
			case "canceled":
				// Err is asked before each page of pass 1: cancel once
				// the old version's page is done.
				c := &cancelAfter{Context: ctx}
				c.n.Store(int64(old.Block) + 1)
				ctx = c
			case "damaged later page":
				repair = damageTuple(t, db, later)
			case "damaged same page":
				repair = damageTuple(t, db, same)
			}
			st, err := db.Vacuum(ctx)
			wantErr := ErrCorruption
			if stop == "canceled" {
				wantErr = context.Canceled
			}
			if !errors.Is(err, wantErr) {
				t.Fatalf("vacuum: %+v, %v; want %v", st, err, wantErr)
			}
			removed := uint64(1)
			if stop == "damaged same page" {
				removed = 0 // the page's record was never logged
			}
			if st.TuplesRemoved != removed {
				t.Fatalf("the stopped run removed %d versions, want %d: %+v", st.TuplesRemoved, removed, st)
			}
			queuedNamed(t, db)
			repair()
			checkFreed(t, db)
		})
	}
}

// checkFreed runs vacuum to the end: every chunk is freed, and Verify
// finds nothing, orphans included.
func checkFreed(t *testing.T, db *DB) {
	t.Helper()
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := chunkTuples(t, db); n != 0 {
		t.Fatalf("%d chunk tuples left after vacuum", n)
	}
	mustVerify(t, db)
}

// closeAt is a context whose Err, from its n+1st call on, closes the
// database (once, on another goroutine, since Close waits for the run
// that asks) and returns nil once Close has marked it closed: the run
// then stops at its next page with ErrClosed, as it would if Close came
// at that moment.
type closeAt struct {
	context.Context
	n      atomic.Int64
	db     *DB
	closed chan error
}

func (c *closeAt) Err() error {
	if c.n.Add(-1) == -1 {
		go func() { c.closed <- c.db.Close() }()
		<-c.db.closing
	}
	return nil
}

// TestStoppedVacuumChunksFreedAtClose: a run stopped after its first pass
// removed an out-of-line version (canceled, or by Close) leaves that
// version's chunks in a queue held in memory; Close frees them, with its
// checkpoint and without it, so that the next Open (from the index file,
// which does not list them) finds no chunk that no version names.
func TestStoppedVacuumChunksFreedAtClose(t *testing.T) {
	for _, stop := range []string{"canceled", "canceled, no checkpoint on close", "closed"} {
		t.Run(stop, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, opts)
			mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
			old := db.idx.get([]byte("big")).headTID()
			mustPut(t, db, "big", "small now")
			// Stop once the old version's page is done (Err is asked
			// before each page of pass 1), before pass 2.
			if stop == "closed" {
				c := &closeAt{Context: context.Background(), db: db, closed: make(chan error, 1)}
				c.n.Store(int64(old.Block) + 1)
				if st, err := db.Vacuum(c); !errors.Is(err, ErrClosed) || st.TuplesRemoved != 1 {
					t.Fatalf("vacuum: %+v, %v; want one version removed, then ErrClosed", st, err)
				}
				if err := <-c.closed; err != nil {
					t.Fatal(err)
				}
			} else {
				c := &cancelAfter{Context: context.Background()}
				c.n.Store(int64(old.Block) + 1)
				if st, err := db.Vacuum(c); !errors.Is(err, context.Canceled) || st.TuplesRemoved != 1 {
					t.Fatalf("vacuum: %+v, %v; want one version removed, then context.Canceled", st, err)
				}
				if n := chunkTuples(t, db); n != 3 {
					t.Fatalf("%d chunk tuples after the stopped run; want its 3", n)
				}
				if err := db.SetCheckpointOnClose(stop == "canceled"); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			db = openTest(t, dir, opts)
			defer db.Close()
			if n := chunkTuples(t, db); n != 0 {
				t.Fatalf("%d chunk tuples left after Close and Open: the stopped run's chunks leaked", n)
			}
			mustVerify(t, db)
			if v, _ := get(t, db, "big"); v != "small now" {
				t.Fatalf("big = %q", v)
			}
		})
	}
}

// A Vacuum or Backup waiting for vacuum's lock, held by a run, a Verify
// or a Backup for as long as they take, gives up when its context ends:
// it used to wait for the lock whatever its context said, a deadline of
// a second overrun by the whole of a long backup.
func TestVacuumLockWaitEndsWithContext(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "k", "v")
	db.vac.mu.Lock() // as a run in progress holds it
	locked := true
	defer func() {
		if locked { // a failed wait below: let the waiters and Close go on
			db.vac.mu.Unlock()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	vac := make(chan error, 1)
	go func() {
		_, err := db.Vacuum(ctx)
		vac <- err
	}()
	bk := make(chan error, 1)
	target := filepath.Join(t.TempDir(), "copy")
	go func() {
		_, err := db.Backup(ctx, target)
		bk <- err
	}()
	cancel()
	if err := receive(t, vac, "Vacuum waiting for the lock"); !errors.Is(err, context.Canceled) {
		t.Errorf("Vacuum: %v, want context.Canceled", err)
	}
	if err := receive(t, bk, "Backup waiting for the lock"); !errors.Is(err, context.Canceled) {
		t.Errorf("Backup: %v, want context.Canceled", err)
	}
	db.vac.mu.Unlock()
	locked = false
	if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a canceled Backup left %s: %v", target, err)
	}
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Errorf("Vacuum after the lock was released: %v", err)
	}
}
