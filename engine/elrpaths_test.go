package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

// elrPathCase is one way a transaction can observe an early-released
// commit. op calls publish at the point where that commit must become
// visible (it returns once the commit is visible and its row locks are
// free, its flush held), then observes it, and returns what its caller
// would be told. want is what op returns once the flush has succeeded.
type elrPathCase struct {
	name string
	op   func(db *DB, publish func()) error
	want error
}

// elrPathCases are the read and write paths of TestEarlyLockReleaseEveryPathWaits.
// Before publish the database holds a=old, b=y and d=x; the commit
// publish makes sets a=new, deletes d and creates n.
func elrPathCases() []elrPathCase {
	ctx := context.Background()
	view := func(db *DB, publish func(), fn func(*Txn) error) error {
		publish()
		return db.View(ctx, fn)
	}
	// own runs fn in a transaction of the given options begun after
	// publish, and commits it.
	own := func(db *DB, publish func(), o TxnOptions, fn func(*Txn) error) error {
		publish()
		tx, err := db.Begin(ctx, o)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	off := SyncCommitOff
	return []elrPathCase{
		{name: "Get at REPEATABLE READ", op: func(db *DB, publish func()) error {
			return own(db, publish, TxnOptions{Isolation: RepeatableRead, ReadOnly: true}, func(tx *Txn) error {
				_, err := tx.Get([]byte("a"))
				return err
			})
		}},
		{name: "GetPrefix", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { _, _, err := tx.GetPrefix([]byte("a"), 2); return err })
		}},
		{name: "Scan", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { return tx.Scan(nil, nil, func(_, _ []byte) bool { return true }) })
		}},
		{name: "ScanPrefix", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error {
				return tx.ScanPrefix(nil, nil, 1, func(_, _ []byte, _ int) bool { return true })
			})
		}},
		{name: "ScanKeys", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { return tx.ScanKeys(nil, nil, func([]byte) bool { return true }) })
		}},
		{name: "Exists", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { _, err := tx.Exists([]byte("n")); return err })
		}},
		{name: "Count", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { _, err := tx.Count(nil, nil); return err })
		}},
		{name: "RandomKey", op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { _, _, _, err := tx.RandomKey(1); return err })
		}},
		{name: "View returning ErrNotFound for a key the commit deleted", want: ErrNotFound, op: func(db *DB, publish func()) error {
			return view(db, publish, func(tx *Txn) error { _, err := tx.Get([]byte("d")); return err })
		}},
		{name: "Delete of a key the commit deleted (row lock only)", op: func(db *DB, publish func()) error {
			return own(db, publish, TxnOptions{}, func(tx *Txn) error { return tx.Delete([]byte("d")) })
		}},
		{name: "Lock", op: func(db *DB, publish func()) error {
			return own(db, publish, TxnOptions{}, func(tx *Txn) error { return tx.Lock([]byte("a")) })
		}},
		{name: "DeleteRange", op: func(db *DB, publish func()) error {
			return own(db, publish, TxnOptions{}, func(tx *Txn) error { _, err := tx.DeleteRange([]byte("m"), nil, nil); return err })
		}},
		{name: "asynchronous commit of an Update", op: func(db *DB, publish func()) error {
			return own(db, publish, TxnOptions{SynchronousCommit: &off}, func(tx *Txn) error {
				return tx.Update([]byte("a"), func(old []byte, _ bool) ([]byte, error) { return append(old, '+'), nil })
			})
		}},
		{name: "CommitAsync of a read", op: func(db *DB, publish func()) error {
			publish()
			tx, err := db.Begin(ctx, TxnOptions{ReadOnly: true})
			if err != nil {
				return err
			}
			if _, err := tx.Get([]byte("a")); err != nil {
				return err
			}
			w, err := tx.CommitAsync(nil)
			if err != nil {
				return err
			}
			return w.Wait(ctx)
		}},
		{
			// A REPEATABLE READ transaction whose snapshot predates
			// the commit, and which then writes the key it changed,
			// loses (first updater wins) on every run: the
			// serialization failure tells that the key was changed,
			// by a commit that a crash could still take away.
			name: "DB.Update out of retries after a serialization failure", want: ErrSerializationFailure,
			op: func(db *DB, publish func()) error {
				return db.Update(ctx, func(tx *Txn) error {
					if _, err := tx.Get([]byte("b")); err != nil {
						return err
					}
					publish()
					return tx.Put([]byte("a"), []byte("mine"))
				})
			},
		},
	}
}

// TestEarlyLockReleaseEveryPathWaits holds the WAL sync of an
// early-released commit while a transaction observes it by each read or
// write path in turn: none may report its outcome before the commit is
// durable, and when the sync fails each reports ErrWALSyncFailed instead.
func TestEarlyLockReleaseEveryPathWaits(t *testing.T) {
	for _, c := range elrPathCases() {
		for _, fail := range []bool{false, true} {
			name := c.name
			if fail {
				name += ", sync fails"
			}
			t.Run(name, func(t *testing.T) { elrPathWaits(t, c, fail) })
		}
	}
}

func elrPathWaits(t *testing.T, c elrPathCase, fail bool) {
	m, ffs := faultMemDir(t)
	g := newWALGate(ffs)
	on := true
	// One run of DB.Update, so that a serialization failure is returned.
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on, MaxRetries: 1})
	defer db.Close()
	defer g.open() // before Close, which waits for the held commits, when the test fails
	ctx := context.Background()
	for _, kv := range [][2]string{{"a", "old"}, {"b", "y"}, {"d", "x"}} {
		mustPut(t, db, kv[0], kv[1])
	}
	before := db.Stats()

	writer := make(chan error, 1)
	var published atomic.Bool
	publish := func() {
		published.Store(true)
		early := db.earlyCommits.Load()
		g.shut()
		go func() {
			writer <- db.Update(ctx, func(tx *Txn) error {
				if err := tx.Put([]byte("a"), []byte("new")); err != nil {
					return err
				}
				if err := tx.Delete([]byte("d")); err != nil {
					return err
				}
				return tx.Put([]byte("n"), []byte("1"))
			})
		}()
		<-g.blocked // the writer's flush waits for the disk
		for deadline := time.Now().Add(10 * time.Second); db.earlyCommits.Load() == early; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				panic("the commit did not become visible while its flush waited")
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.op(db, publish) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if err, ok := returned(done); ok {
			t.Fatalf("returned %v while the commit it observed waits for its flush (published %v): a crash now would take that commit away", err, published.Load())
		}
		// Waiting for the flush: as a dependency, or (a transaction
		// that holds row locks, or wrote) for a flush of its own
		// beside the writer's.
		st := db.Stats()
		if st.Txn.DependencyWaits > before.Txn.DependencyWaits || st.WAL.FlushRequests >= before.WAL.FlushRequests+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not waiting for the flush after 10 s")
		}
	}
	got, err := memState(m.CrashCopy(vfs.DropUnsynced, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "old" || got["d"] != "x" || got["n"] != "" {
		t.Fatalf("a crash while the flush is held recovered %v; want the state before the commit", got)
	}
	if err, ok := returned(done); ok {
		t.Fatalf("returned %v while the commit it observed waits for its flush", err)
	}
	if fail {
		ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	}
	g.open()
	err = <-done
	werr := <-writer
	switch {
	case fail && !errors.Is(err, ErrWALSyncFailed):
		t.Fatalf("after the WAL sync failed: %v; want ErrWALSyncFailed", err)
	case fail && !errors.Is(werr, ErrWALSyncFailed):
		t.Fatalf("the writer after the WAL sync failed: %v; want ErrWALSyncFailed", werr)
	case !fail && werr != nil:
		t.Fatalf("the writer: %v", werr)
	case !fail && c.want == nil && err != nil:
		t.Fatal(err)
	case !fail && c.want != nil && !errors.Is(err, c.want):
		t.Fatalf("got %v; want %v", err, c.want)
	}
}
