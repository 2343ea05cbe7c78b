package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// elrPathCase is one way a transaction can observe an early-released
// commit. op calls publish at the point where that commit must become
// visible (it returns once the commit is visible and its row locks are
// free, its flush held), then observes it, and returns what its caller
// would be told. want is what op returns once the flush has succeeded.
type elrPathCase struct {
	name    string
	op      func(db *DB, publish func()) error
	want    error
	retries int // Options.MaxRetries; 1 if 0
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
		{
			// The same failure, returned (wrapped with the context's
			// error) because the context ended before the rerun.
			name: "DB.Update whose context ends before a rerun after a serialization failure", want: ErrSerializationFailure, retries: 2,
			op: func(db *DB, publish func()) error {
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				return db.Update(cctx, func(tx *Txn) error {
					if _, err := tx.Get([]byte("b")); err != nil {
						return err
					}
					publish()
					err := tx.Put([]byte("a"), []byte("mine"))
					cancel()
					return err
				})
			},
		},
		{
			// The same, with the context ending just after the pause,
			// so that the rerun's Begin is what refuses it.
			name: "DB.Update whose context ends as the rerun begins after a serialization failure", want: ErrSerializationFailure, retries: 2,
			op: func(db *DB, publish func()) error {
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				db.testRetryWait = func(int, time.Duration) time.Duration {
					cancel()
					return 0 // no pause, which would see the context end
				}
				return db.Update(cctx, func(tx *Txn) error {
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
	// One run of DB.Update unless the case says, so that a serialization
	// failure is returned.
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on, MaxRetries: max(1, c.retries)})
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
		for deadline := time.Now().Add(time.Minute); db.earlyCommits.Load() == early; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				// On the operation's goroutine, where the test cannot
				// stop: it fails, and the operation goes on to meet
				// the loop below's bound.
				t.Errorf("the commit did not become visible while its flush waited")
				return
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.op(db, publish) }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
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
			t.Fatal("not waiting for the flush after a minute")
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

// TestEarlyLockReleaseFailedFlushAfterOverwrite fails the WAL sync of an
// early-released commit after a second transaction has taken its row
// lock, overwritten the row and committed early too, and a View has read
// the overwrite: all three fail with ErrWALSyncFailed, a transaction
// begun after the failure that reads the row fails too, and a write is
// refused. A power loss then recovers the state before both commits;
// reopening the same files (no power loss) recovers a state holding a
// prefix of them, which Verify finds sound.
func TestEarlyLockReleaseFailedFlushAfterOverwrite(t *testing.T) {
	m, ffs := faultMemDir(t)
	g := newWALGate(ffs)
	on := true
	opts := Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on}
	db := openTest(t, "/db", opts)
	defer func() { g.open(); db.Close() }()
	ctx := context.Background()
	mustPut(t, db, "a", "old")
	early := db.earlyCommits.Load()
	waitEarly := func(n uint64) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); db.earlyCommits.Load() < early+n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d commits visible after a minute", db.earlyCommits.Load()-early, n)
			}
		}
	}

	g.shut()
	first := make(chan error, 1)
	go func() {
		first <- db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("new")) })
	}()
	waitEarly(1)
	second := make(chan error, 1)
	go func() {
		second <- db.Update(ctx, func(tx *Txn) error {
			return tx.Update([]byte("a"), func(old []byte, _ bool) ([]byte, error) { return append(old, '+'), nil })
		})
	}()
	waitEarly(2)
	before := db.Stats()
	var viewed string
	view := make(chan error, 1)
	go func() {
		view <- db.View(ctx, func(tx *Txn) error {
			v, err := tx.Get([]byte("a"))
			viewed = string(v)
			return err
		})
	}()
	for deadline := time.Now().Add(time.Minute); db.Stats().Txn.DependencyWaits == before.Txn.DependencyWaits; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the View did not wait for the flush")
		}
	}
	for name, ch := range map[string]chan error{"the first commit": first, "the overwrite": second, "the View": view} {
		if err, ok := returned(ch); ok {
			t.Fatalf("%s returned %v before the flush", name, err)
		}
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	g.open()
	for name, ch := range map[string]chan error{"the first commit": first, "the overwrite": second, "the View": view} {
		if err := <-ch; !errors.Is(err, ErrWALSyncFailed) {
			t.Fatalf("%s after the WAL sync failed: %v; want ErrWALSyncFailed", name, err)
		}
	}
	if viewed != "new+" {
		t.Fatalf("the View read a = %q; want new+ (the overwrite, visible early)", viewed)
	}
	// After the failure: the overwrite is still visible in memory, and
	// what reads it is never acknowledged; writes are refused.
	var later string
	if err := db.View(ctx, func(tx *Txn) error {
		v, err := tx.Get([]byte("a"))
		later = string(v)
		return err
	}); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("a View begun after the failure read a = %q and returned %v; want ErrWALSyncFailed", later, err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("z"), []byte("1")) }); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("a write after the failure: %v; want ErrWALSyncFailed", err)
	}

	got, err := memState(m.CrashCopy(vfs.DropUnsynced, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "old" || got["z"] != "" {
		t.Fatalf("a power loss after the failed sync recovered %v; want a = old alone", got)
	}
	ffs.Clear()
	db.Close()
	db = openTest(t, "/db", opts)
	v, _ := get(t, db, "a")
	if v != "old" && v != "new" && v != "new+" {
		t.Fatalf("reopened after the failed sync: a = %q; want old, new or new+", v)
	}
	t.Logf("reopened on the same files: a = %q", v)
	if _, ok := get(t, db, "z"); ok {
		t.Fatal("reopened after the failed sync: z, refused, is there")
	}
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("Verify after reopening: %v\n%s", err, rep)
	}
	// And it takes writes again.
	mustPut(t, db, "a", "again")
}

// TestBackupOfEarlyReleasedCommit takes a Backup while an early-released
// commit's WAL sync is held: Backup does not return before that commit is
// durable; then the copy holds it. When the sync fails instead, Backup
// fails and leaves no copy, rather than hand out a copy holding (or
// claiming) a commit the database itself may lose.
func TestBackupOfEarlyReleasedCommit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync fails %v", fail), func(t *testing.T) {
			m, ffs := faultMemDir(t)
			g := newWALGate(ffs)
			on := true
			db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
			defer db.Close()
			defer g.open()
			ctx := context.Background()
			mustPut(t, db, "a", "old")
			early := db.earlyCommits.Load()
			g.shut()
			writer := make(chan error, 1)
			go func() {
				writer <- db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("new")) })
			}()
			<-g.blocked
			for deadline := time.Now().Add(time.Minute); db.earlyCommits.Load() == early; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the commit did not become visible while its flush waited")
				}
			}
			before := db.Stats()
			backup := make(chan error, 1)
			go func() { _, err := db.Backup(ctx, "/bk"); backup <- err }()
			// The Backup's checkpoint asks for a flush, which waits for
			// the held sync.
			for deadline := time.Now().Add(time.Minute); db.Stats().WAL.FlushRequests == before.WAL.FlushRequests; time.Sleep(time.Millisecond) {
				if err, ok := returned(backup); ok {
					t.Fatalf("Backup returned %v while the commit's flush is held", err)
				}
				if time.Now().After(deadline) {
					t.Fatal("Backup asked for no flush in a minute")
				}
			}
			if err, ok := returned(backup); ok {
				t.Fatalf("Backup returned %v while the commit's flush is held", err)
			}
			if fail {
				ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
			}
			g.open()
			err, werr := <-backup, <-writer
			if fail {
				if !errors.Is(err, ErrWALSyncFailed) || !errors.Is(werr, ErrWALSyncFailed) {
					t.Fatalf("after the WAL sync failed: Backup %v, the commit %v; want ErrWALSyncFailed", err, werr)
				}
				for _, d := range []string{"/bk", "/bk.partial"} {
					if _, err := m.Stat(d); err == nil {
						t.Fatalf("a failed Backup left %s", d)
					}
				}
				return
			}
			if err != nil || werr != nil {
				t.Fatalf("Backup %v, the commit %v", err, werr)
			}
			c := m.CrashCopy(vfs.DropUnsynced, nil)
			bk, err := Open("/bk", Options{FS: c, CheckpointTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer bk.Close()
			if v, _ := get(t, bk, "a"); v != "new" {
				t.Fatalf("the copy holds a = %q; want new", v)
			}
		})
	}
}

// TestVacuumOfEarlyReleasedCommitWhoseSyncFails runs a freezing vacuum,
// with a buffer pool of 16 pages, while an early-released commit that
// overwrote and deleted keys waits for its WAL sync: vacuum may prune the
// versions it made dead, freeze its versions and set map bits, since no
// snapshot can see past it, but every one of those changes is logged
// after the commit record, so none may reach disk before it. The sync
// fails; a power loss then recovers the state before the commit, which
// Verify finds sound (no map bit or frozen tuple of the lost commit on
// disk).
func TestVacuumOfEarlyReleasedCommitWhoseSyncFails(t *testing.T) {
	m, ffs := faultMemDir(t)
	g := newWALGate(ffs)
	on := true
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on,
		SharedBuffers: 16 * heap.PageSize, VacuumFreezeMinAge: -1, Autovacuum: noAutovacuum})
	defer db.Close()
	defer g.open()
	ctx := context.Background()
	val := strings.Repeat("v", 500)
	const keys = 300 // about 20 pages: more than the pool holds
	for i := 0; i < keys; i += 50 {
		if err := db.Update(ctx, func(tx *Txn) error {
			for j := i; j < i+50; j++ {
				if err := tx.Put([]byte(fmt.Sprintf("k%03d", j)), []byte(val)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// The changes with the gate open (the small pool writes pages out
	// meanwhile, each after its records), the commit with it shut.
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for j := 0; j < keys; j++ {
		k := []byte(fmt.Sprintf("k%03d", j))
		if j%2 == 0 {
			err = tx.Delete(k)
		} else {
			err = tx.Put(k, []byte("new"))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.wal.Flush(db.wal.InsertLSN()); err != nil {
		t.Fatal(err)
	}
	early := db.earlyCommits.Load()
	g.shut()
	writer := make(chan error, 1)
	go func() { writer <- tx.Commit() }()
	for deadline := time.Now().Add(time.Minute); db.earlyCommits.Load() == early; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the commit did not become visible while its flush waited")
		}
	}
	before := db.Stats()
	vacuum := make(chan error, 1)
	go func() { _, err := db.Vacuum(ctx); vacuum <- err }()
	// Vacuum works until it needs the WAL durable: to write out a page
	// it changed (the pool is small) or at its end.
	for deadline := time.Now().Add(time.Minute); db.Stats().WAL.FlushRequests == before.WAL.FlushRequests; time.Sleep(time.Millisecond) {
		if err, ok := returned(vacuum); ok {
			t.Fatalf("vacuum returned %v while the commit's flush is held", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("vacuum asked for no flush in a minute")
		}
	}
	d := db.Stats().Sub(before)
	t.Logf("before the failure: %+v, %+v", d.Buffers, d.Vacuum)
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	g.open()
	if err := <-writer; !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("the commit after its WAL sync failed: %v; want ErrWALSyncFailed", err)
	}
	if err := <-vacuum; err == nil {
		t.Log("vacuum ended before it needed a flush")
	}
	// Whatever vacuum and the pool wrote before and after the failure.
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	re, err := Open("/db", Options{FS: c, CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	n := 0
	if err := re.View(ctx, func(tx *Txn) error {
		return tx.Scan(nil, nil, func(k, v []byte) bool {
			if string(v) != val {
				t.Errorf("recovered %s = %q: a change of the lost commit", k, v)
			}
			n++
			return true
		})
	}); err != nil {
		t.Fatal(err)
	}
	if n != keys {
		t.Fatalf("recovered %d keys; want %d", n, keys)
	}
	if err := re.View(ctx, func(tx *Txn) error {
		c, err := tx.Count(nil, nil)
		if err == nil && c != keys {
			t.Errorf("Count, from the map where it allows: %d keys; want %d", c, keys)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, re)
}
