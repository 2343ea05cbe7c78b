package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// gateFS calls onCreate (outside any lock of the file system below) before
// each Create, so a test can hold a Backup at a chosen file.
type gateFS struct {
	vfs.FS
	onCreate func(name string)
}

func (g gateFS) Create(name string) (vfs.File, error) {
	g.onCreate(name)
	return g.FS.Create(name)
}

// gatedDB opens a database on m whose Creates of files named with prefix
// wait, the first time, until release is closed; reached is closed when
// that first Create arrives.
func gatedDB(t *testing.T, m *vfs.MemFS, prefix string, o Options) (db *DB, reached, release chan struct{}) {
	t.Helper()
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	o.FS = gateFS{m, func(name string) {
		if strings.HasPrefix(name, prefix) {
			once.Do(func() {
				close(reached)
				<-release
			})
		}
	}}
	if o.SharedBuffers == 0 {
		o.SharedBuffers = 2 << 20
	}
	o.WALSegmentSize = 1 << 20
	o.CheckpointTimeout = -1
	db, err := Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 300 {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(fmt.Appendf(nil, "k%d", i), make([]byte, 300)) }); err != nil {
			t.Fatal(err)
		}
	}
	return db, reached, release
}

func checkNoBackupLeft(t *testing.T, m *vfs.MemFS, dir string) {
	t.Helper()
	for _, d := range []string{dir, dir + ".partial"} {
		if _, err := m.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s left behind (%v)", d, err)
		}
	}
}

// TestBackupCloseMidway closes the database while a Backup is copying the
// heap: Backup ends with ErrClosed and removes its ".partial" directory,
// and Close returns once it has.
func TestBackupCloseMidway(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/heap/", Options{})
	done := make(chan error, 1)
	go func() {
		_, err := db.Backup(context.Background(), "/bk")
		done <- err
	}()
	<-reached
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	<-db.closing
	close(release)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Backup: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkNoBackupLeft(t, m, "/bk")
}

// TestBackupCanceledMidway cancels a Backup's context while it copies the
// CLOG, with writes going on meanwhile: Backup returns the context's error
// and removes its ".partial" directory, and the database goes on.
func TestBackupCanceledMidway(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/clog/", Options{})
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.Backup(ctx, "/bk")
		done <- err
	}()
	<-reached
	// Writes go on while the Backup is held.
	for i := range 50 {
		if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put(fmt.Appendf(nil, "w%d", i), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	close(release)
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Backup: %v, want context.Canceled", err)
	}
	checkNoBackupLeft(t, m, "/bk")
	if f := db.Failure(); f != nil {
		t.Fatal(f)
	}
}

// TestBackupFailedRemovesNewParents: a Backup that fails removes the
// parent directories it created for its target, and leaves those that
// were there. They used to stay, empty.
func TestBackupFailedRemovesNewParents(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/srv"); err != nil {
		t.Fatal(err)
	}
	db, reached, release := gatedDB(t, m, "/srv/backups/new/bk.partial/clog/", Options{})
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.Backup(ctx, "/srv/backups/new/bk")
		done <- err
	}()
	<-reached
	cancel()
	close(release)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Backup: %v, want context.Canceled", err)
	}
	if _, err := m.Stat("/srv/backups"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/srv/backups after the failed Backup: %v, want it removed", err)
	}
	if _, err := m.Stat("/srv"); err != nil {
		t.Errorf("/srv, there before: %v", err)
	}
}

// TestBackupCanceledWhileWaiting cancels (or closes the database under) a
// Backup while it waits for a running vacuum (its lock held here): it
// returns the context's error (ErrClosed) without running a checkpoint or
// creating anything, whether it notices while waiting or once it has the
// locks. After a cancel it used to run its checkpoint first and stop only
// at its first page.
func TestBackupCanceledWhileWaiting(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			m := vfs.NewMemFS()
			var made atomic.Bool
			db, err := Open("/db", Options{FS: mkdirHookFS{m, "/bk", &made}, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			mustPut(t, db, "k", "v")
			before := db.Stats().Checkpoint.Count
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db.vac.mu.Lock()
			done := make(chan error, 1)
			go func() {
				_, err := db.Backup(ctx, "/bk")
				done <- err
			}()
			want, closes := error(context.Canceled), 0
			closed := make(chan error, 1)
			if how == "cancel" {
				cancel()
			} else {
				// Close waits for the Backup; its own checkpoint is
				// the one expected.
				want, closes = ErrClosed, 1
				go func() { closed <- db.Close() }()
				<-db.closing
			}
			db.vac.mu.Unlock()
			if err := <-done; !errors.Is(err, want) {
				t.Fatalf("Backup: %v, want %v", err, want)
			}
			if closes == 1 {
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
			}
			if after := db.Stats().Checkpoint.Count; after != before+uint64(closes) {
				t.Errorf("checkpoints %d, then %d: the stopped Backup ran one", before, after)
			}
			if made.Load() {
				t.Error("the stopped Backup created its directory")
			}
			checkNoBackupLeft(t, m, "/bk")
		})
	}
}

// mkdirHookFS sets made when a directory named with prefix is created.
type mkdirHookFS struct {
	vfs.FS
	prefix string
	made   *atomic.Bool
}

func (h mkdirHookFS) MkdirAll(name string) error {
	if strings.HasPrefix(name, h.prefix) {
		h.made.Store(true)
	}
	return h.FS.MkdirAll(name)
}

// statHookFS calls onStat after each Stat of a name ending in suffix.
type statHookFS struct {
	vfs.FS
	suffix string
	onStat func()
}

func (h statHookFS) Stat(name string) (int64, error) {
	n, err := h.FS.Stat(name)
	if strings.HasSuffix(name, h.suffix) {
		h.onStat()
	}
	return n, err
}

// TestBackupTwiceToOneTarget starts two Backups to the same new directory
// that both find it free before either can start copying (the first
// waits for vacuum's lock, held here): one succeeds, the other is refused
// with ErrBackupTargetExists once it gets the locks, instead of copying
// everything again only to fail at the rename (or, on a file system
// whose rename replaces a directory, replacing the first copy).
func TestBackupTwiceToOneTarget(t *testing.T) {
	m := vfs.NewMemFS()
	checked := make(chan struct{}, 4) // each Backup checks at most twice
	db, err := Open("/db", Options{FS: statHookFS{m, "/bk.partial", func() { checked <- struct{}{} }},
		SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mustPut(t, db, "k", "v")
	db.vac.mu.Lock()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := db.Backup(context.Background(), "/bk")
			errs <- err
		}()
	}
	<-checked
	<-checked
	db.vac.mu.Unlock()
	var ok, exists int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, ErrBackupTargetExists):
			exists++
		default:
			t.Errorf("Backup: %v", err)
		}
	}
	if ok != 1 || exists != 1 {
		t.Fatalf("%d backups succeeded and %d were refused, want one of each", ok, exists)
	}
	c, err := Open("/bk", Options{FS: m, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestCloseWithCheckpointBehindBackup: a Checkpoint waits, with the close
// lock held shared, for the checkpoint lock a Backup holds for its whole
// copy. Close must not wait for the copy to end: the Backup stops at its
// next page once Close has begun (ErrClosed, its partial directory
// removed), the Checkpoint goes on, and Close returns. Before, Close
// could tell the Backup nothing until it had the close lock, so the copy
// ran to its end first.
func TestCloseWithCheckpointBehindBackup(t *testing.T) {
	m := vfs.NewMemFS()
	db, reached, release := gatedDB(t, m, "/bk.partial/heap/", Options{Autovacuum: noAutovacuum})
	backedUp := backupInBackground(db, "/bk")
	<-reached // the Backup holds the checkpoint lock
	checkpointed := make(chan error, 1)
	go func() { checkpointed <- db.Checkpoint() }()
	for db.closeMu.TryLock() { // until the Checkpoint holds it shared
		db.closeMu.Unlock()
		runtime.Gosched()
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	<-db.closeBegun
	close(release)
	if err := <-backedUp; !errors.Is(err, ErrClosed) {
		t.Fatalf("Backup: %v; want ErrClosed (it copied to the end with Close waiting)", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-checkpointed; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("Checkpoint: %v; want nil or ErrClosed", err)
	}
	checkNoBackupLeft(t, m, "/bk")
}

// backupInBackground starts db.Backup into dir on another goroutine and
// returns the channel its error comes on.
func backupInBackground(db *DB, dir string) <-chan error {
	backedUp := make(chan error, 1)
	go func() {
		_, err := db.Backup(context.Background(), dir)
		backedUp <- err
	}()
	return backedUp
}
