package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// returned reports whether ch has a value, without waiting.
func returned(ch <-chan error) (error, bool) {
	select {
	case err := <-ch:
		return err, true
	default:
		return nil, false
	}
}

// memState opens a crash copy and returns every key and value in it.
func memState(c *vfs.MemFS) (map[string]string, error) {
	db, err := Open("/db", Options{FS: c, SharedBuffers: 2 << 20, CheckpointTimeout: -1})
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer db.Close()
	st := map[string]string{}
	err = db.View(context.Background(), func(tx *Txn) error {
		return tx.Scan(nil, nil, func(k, v []byte) bool { st[string(k)] = string(v); return true })
	})
	return st, err
}

// TestEarlyLockReleaseReaderWaits holds the WAL sync with early lock
// release on: a synchronous commit is visible and its row lock free while
// its flush waits, but neither its Commit nor the Commit of a reader that
// saw it, of a writer that overwrote it, nor a View that read it returns
// before the flush; a crash at that moment recovers the state before it,
// which is consistent with every result returned so far.
func TestEarlyLockReleaseReaderWaits(t *testing.T) {
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	g := newWALGate(m)
	on := true
	// No background WAL writer: only the commits flush.
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer db.Close()
	defer g.open() // before Close, which waits for the held commits, when the test fails
	ctx := context.Background()
	mustPut(t, db, "a", "old")
	before := db.Stats()

	early := db.earlyCommits.Load()
	g.shut()
	writer := make(chan error, 1)
	go func() {
		writer <- db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("new")) })
	}()
	<-g.blocked // the writer's flush waits for the disk
	// The flush can start on the commit record before the writer has made
	// its commit visible: wait for that step, which needs no flush.
	for deadline := time.Now().Add(10 * time.Second); db.earlyCommits.Load() == early; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the commit did not become visible while its flush waited")
		}
	}

	// A READ COMMITTED reader sees the early-released commit...
	rtx, err := db.Begin(ctx, TxnOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	v, err := rtx.Get([]byte("a"))
	if err != nil || string(v) != "new" {
		t.Fatalf("a = %q, %v while its commit waits for its flush; want new (visible early)", v, err)
	}
	reader := make(chan error, 1)
	go func() { reader <- rtx.Commit() }()
	// ... and so does DB.View, and a writer takes the row lock at once.
	var viewed string
	view := make(chan error, 1)
	go func() {
		view <- db.View(ctx, func(tx *Txn) error {
			v, err := tx.Get([]byte("a"))
			viewed = string(v)
			return err
		})
	}()
	over := make(chan error, 1)
	go func() {
		over <- db.Update(ctx, func(tx *Txn) error {
			return tx.Update([]byte("a"), func(old []byte, _ bool) ([]byte, error) { return append(old, '+'), nil })
		})
	}()
	// The overwriting writer's commit record follows the first one's; it
	// too ends up waiting for a sync (the same round or the next).
	deadline := time.Now().Add(10 * time.Second)
	for db.Stats().Txn.EarlyCommits-before.Txn.EarlyCommits < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the overwriting writer never committed: it waited for the row lock of a commit whose flush is held")
		}
		time.Sleep(time.Millisecond)
	}
	// The reader's Commit and View wait for the held flush. Checked here,
	// while it is held: a goroutine that a loaded machine runs late could
	// otherwise reach View only after the flush, without waiting, and the
	// count at the end would fall short.
	deadline = time.Now().Add(10 * time.Second)
	for d := uint64(0); d < 2; time.Sleep(time.Millisecond) {
		if d = db.Stats().Txn.DependencyWaits - before.Txn.DependencyWaits; d < 2 && time.Now().After(deadline) {
			t.Fatalf("%d of the reader's Commit and View wait for the flush of the commit they read", d)
		}
	}

	// A crash now loses both commits: nothing that depends on them may
	// have been returned.
	got, err := memState(m.CrashCopy(vfs.DropUnsynced, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "old" {
		t.Fatalf("a crash while the flush is held recovered a = %q; want old", got["a"])
	}
	for name, ch := range map[string]chan error{"the writer's Commit": writer, "the reader's Commit": reader, "View": view, "the overwriting writer's Commit": over} {
		if err, ok := returned(ch); ok {
			t.Fatalf("%s returned (%v) before the commit it depends on is durable; a crash now would lose what it reported", name, err)
		}
	}

	g.open()
	for name, ch := range map[string]chan error{"writer": writer, "reader": reader, "view": view, "overwriting writer": over} {
		if err := <-ch; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if viewed != "new" && viewed != "new+" {
		t.Fatalf("View read a = %q", viewed)
	}
	if v, _ := get(t, db, "a"); v != "new+" {
		t.Fatalf("a = %q; want new+", v)
	}
	if d := db.Stats().Txn.DependencyWaits - before.Txn.DependencyWaits; d < 2 {
		t.Fatalf("%d dependency waits counted; want at least 2 (the reader and View)", d)
	}
}

// TestEarlyLockReleaseSyncFailure fails the WAL sync of an early-released
// commit that readers have seen: the writer, a reader that saw it, a View
// that saw it and a pipelined read (CommitAsync) all fail with
// ErrWALSyncFailed, none reports success, and the recovered state lacks
// the commit.
func TestEarlyLockReleaseSyncFailure(t *testing.T) {
	m, ffs := faultMemDir(t)
	g := newWALGate(ffs)
	on := true
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer db.Close()
	defer g.open()
	ctx := context.Background()
	mustPut(t, db, "a", "old")

	g.shut()
	writer := make(chan error, 1)
	go func() {
		writer <- db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("a"), []byte("lost")) })
	}()
	<-g.blocked
	rtx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	if v, err := rtx.Get([]byte("a")); err != nil || string(v) != "lost" {
		t.Fatalf("a = %q, %v; want the early-released value", v, err)
	}
	reader := make(chan error, 1)
	go func() { reader <- rtx.Commit() }()
	view := make(chan error, 1)
	go func() {
		view <- db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte("a")); return err })
	}()
	ptx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	if _, err := ptx.Get([]byte("a")); err != nil {
		t.Fatal(err)
	}
	pw, err := ptx.CommitAsync(nil)
	if err != nil {
		t.Fatal(err)
	}
	if isDone(pw) {
		t.Fatal("a pipelined read of an undurable commit completed at once")
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	g.open()
	for name, err := range map[string]error{"writer": <-writer, "reader": <-reader, "view": <-view, "pipelined read": pw.Wait(ctx)} {
		if !errors.Is(err, ErrWALSyncFailed) {
			t.Fatalf("%s after the WAL sync failed: %v; want ErrWALSyncFailed", name, err)
		}
	}
	got, err := memState(m.CrashCopy(vfs.DropUnsynced, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != "old" {
		t.Fatalf("recovered a = %q; want old", got["a"])
	}
}

// slowWAL delays every WAL sync, so that commits and readers meet
// early-released commits whose flush is still under way.
type slowWAL struct {
	vfs.FS
	delay time.Duration
}

func (s slowWAL) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(f.Name(), "/wal/") {
		return f, err
	}
	return slowFile{File: f, delay: s.delay}, nil
}

func (s slowWAL) Create(name string) (vfs.File, error) { return s.wrap(s.FS.Create(name)) }
func (s slowWAL) Open(name string) (vfs.File, error)   { return s.wrap(s.FS.Open(name)) }

type slowFile struct {
	vfs.File
	delay time.Duration
}

func (f slowFile) Datasync() error { time.Sleep(f.delay); return f.File.Datasync() }
func (f slowFile) Sync() error     { time.Sleep(f.delay); return f.File.Sync() }

// TestEarlyLockReleaseCrashLadder runs writers of one hot key and readers
// of it concurrently with early lock release on and a slow WAL sync, and
// at sampled file-system operations takes crash copies (unsynced data
// dropped, and the last write torn) and recovers them. Every transaction
// writes a marker key of its own with the hot key, so the copy tells which
// commits it holds. Each copy must hold the marker of every synchronous
// commit acknowledged so far and of every synchronous commit whose value a
// reader had returned (Commit, View or a pipelined read's Wait returned
// nil), and its hot key must carry the value of a commit it holds. Values
// of asynchronous commits are exempt, as PostgreSQL's synchronous_commit
// off allows, and so are results whose transaction had not returned.
func TestEarlyLockReleaseCrashLadder(t *testing.T) {
	elrCrashLadder(t, false, false)
}

// TestEarlyLockReleaseCrashLadderCheckpoints is the early lock release
// crash ladder with checkpoints in a loop racing the commits (each one
// writes heap, map and CLOG pages holding early-released commits whose
// records may not be durable yet, then the index and control files) and
// a buffer pool of 16 pages, which writes pages out between them.
func TestEarlyLockReleaseCrashLadderCheckpoints(t *testing.T) {
	elrCrashLadder(t, false, true)
}

// elrCrashLadder is TestEarlyLockReleaseCrashLadder's workload and checks.
// With ckpt set, a checkpoint runs in a loop beside it, with a buffer
// pool of 16 pages.
// With skip set, the parts that let readers skip work run beside it: a
// buffer pool of 16 pages (evictions write pages between checkpoints), a
// vacuum in a loop that freezes every committed version below the horizon
// and sets map bits, and readers that list the markers with ScanKeys,
// answered from the visibility map where a page is all-visible, and
// require every synchronous commit whose marker a committed listing saw.
func elrCrashLadder(t *testing.T, skip, ckpt bool) {
	seed := testSeed(t, *ladderSeed)
	sample := *ladderSample
	if sample <= 0 {
		sample = 4
		if raceEnabled {
			sample = 12
		}
	}
	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	on := true
	opts := Options{FS: slowWAL{m, 300 * time.Microsecond}, CheckpointTimeout: -1,
		WALWriterDelay: 5 * time.Millisecond, EarlyLockRelease: &on, SharedBuffers: 2 << 20}
	if skip {
		opts.SharedBuffers, opts.VacuumFreezeMinAge, opts.Autovacuum = 16*heap.PageSize, -1, noAutovacuum
	}
	marker := []byte("1")
	if ckpt {
		// Markers of 1 KiB fill more pages than the pool holds.
		opts.SharedBuffers, marker = 16*heap.PageSize, bytes.Repeat([]byte("1"), 1024)
	}
	db := openTest(t, "/db", opts)

	var mu sync.Mutex
	required := map[string]string{} // marker key -> what returned it; guarded by mu
	require := func(marker, why string) {
		mu.Lock()
		if _, ok := required[marker]; !ok {
			required[marker] = why
		}
		mu.Unlock()
	}
	var points, checked int
	var failure error
	rng := rand.New(rand.NewPCG(seed, 3))
	m.SetOpHook(func(p vfs.CrashPoint) {
		points++
		if failure != nil || rng.IntN(sample) != 0 {
			return
		}
		mu.Lock()
		want := make(map[string]string, len(required))
		for k, v := range required {
			want[k] = v
		}
		mu.Unlock()
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			checked++
			got, err := memState(p.CrashCopy(mode, rand.New(rand.NewPCG(seed, uint64(p.Op.Index)))))
			if err != nil {
				failure = fmt.Errorf("crash after %v (%v): %v", p.Op, mode, err)
				return
			}
			for marker, why := range want {
				if _, ok := got[marker]; !ok {
					failure = fmt.Errorf("crash after %v (%v): the recovered state lacks commit %s, which %s before the crash", p.Op, mode, marker, why)
					return
				}
			}
			if h, ok := got["hot"]; ok {
				if _, ok := got["m/"+h]; !ok {
					failure = fmt.Errorf("crash after %v (%v): hot = %s but that commit's marker is missing: a commit recovered in part", p.Op, mode, h)
					return
				}
			}
		}
	})

	ctx := context.Background()
	const writers, readers, perWriter = 3, 3, 40
	var wg, wwg sync.WaitGroup // all, writers
	var stop atomic.Bool
	errc := make(chan error, writers+readers+1)
	for w := range writers {
		wg.Add(1)
		wwg.Add(1)
		go func() {
			defer wg.Done()
			defer wwg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := range perWriter {
				isSync := r.IntN(4) != 0
				mode := map[bool]string{true: "s", false: "a"}[isSync]
				name := fmt.Sprintf("%s%d.%d", mode, w, i)
				sc := SyncCommitOff
				if isSync {
					sc = SyncCommitOn
				}
				tx, err := db.Begin(ctx, TxnOptions{SynchronousCommit: &sc})
				if err != nil {
					errc <- err
					return
				}
				if err := tx.Put([]byte("m/"+name), marker); err != nil {
					errc <- err
					return
				}
				if err := tx.Put([]byte("hot"), []byte(name)); err != nil {
					tx.Rollback()
					errc <- err
					return
				}
				if r.IntN(3) == 0 {
					w, err := tx.CommitAsync(nil)
					if err == nil {
						err = w.Wait(ctx)
					}
					if err != nil {
						errc <- err
						return
					}
				} else if err := tx.Commit(); err != nil {
					errc <- err
					return
				}
				if isSync {
					require("m/"+name, "was acknowledged")
				}
			}
		}()
	}
	var vacuums, frozen, listings, checkpoints atomic.Uint64
	if ckpt {
		wg.Go(func() {
			for last := wal.LSN(0); !stop.Load(); {
				// Paced, not to spin through idle checkpoints on
				// the cores the commits need.
				if end := db.wal.InsertLSN(); end == last {
					time.Sleep(100 * time.Microsecond)
					continue
				} else {
					last = end
				}
				if err := db.Checkpoint(); err != nil {
					errc <- err
					return
				}
				checkpoints.Add(1)
			}
		})
	}
	if skip {
		wg.Go(func() {
			for !stop.Load() {
				vs, err := db.Vacuum(ctx)
				if err != nil {
					errc <- err
					return
				}
				vacuums.Add(1)
				frozen.Add(vs.TuplesFrozen)
			}
		})
	}
	for rd := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				if skip && n%2 == 0 {
					// The markers, from the map where it allows.
					var seen []string
					err := db.View(ctx, func(tx *Txn) error {
						seen = seen[:0]
						return tx.ScanKeys([]byte("m/"), []byte("m0"), func(k []byte) bool {
							seen = append(seen, string(k))
							return true
						})
					})
					if err != nil {
						errc <- err
						return
					}
					listings.Add(1)
					for _, k := range seen {
						if strings.HasPrefix(k, "m/s") {
							require(k, "a committed ScanKeys had listed it")
						}
					}
					continue
				}
				var seen string
				var err error
				switch (rd + n) % 3 {
				case 0: // DB.View, REPEATABLE READ
					err = db.View(ctx, func(tx *Txn) error {
						v, err := tx.Get([]byte("hot"))
						seen = string(v)
						return err
					})
				case 1: // READ COMMITTED, Commit
					tx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
					var v []byte
					if v, err = tx.Get([]byte("hot")); err == nil {
						seen = string(v)
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
				case 2: // a pipelined read, as the server's
					tx, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
					var v []byte
					if v, err = tx.Get([]byte("hot")); err == nil {
						seen = string(v)
						var w *CommitWait
						if w, err = tx.CommitAsync(nil); err == nil {
							err = w.Wait(ctx)
						}
					} else {
						tx.Rollback()
					}
				}
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				if strings.HasPrefix(seen, "s") {
					require("m/"+seen, "a reader had returned its value")
				}
			}
		}()
	}
	// The writers end on their own; then the readers are stopped.
	wwg.Wait()
	if skip {
		// Vacuum and the readers go on after the writers until each has
		// done what this variant is about at least once: on a loaded
		// machine the writers may end before vacuum has run (a liveness
		// bound of a minute; the check below fails if it passes).
		for end := time.Now().Add(time.Minute); time.Now().Before(end) && len(errc) == 0; time.Sleep(time.Millisecond) {
			if vacuums.Load() > 0 && frozen.Load() > 0 && db.Stats().Index.AllVisible > 0 {
				break
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	st := db.Stats()
	db.Close()
	m.SetOpHook(nil)
	select {
	case err := <-errc:
		t.Fatalf("seed %d: %v", seed, err)
	default:
	}
	if failure != nil {
		t.Fatalf("seed %d (-crash.seed reproduces the workload, not the interleaving): %v", seed, failure)
	}
	if st.Txn.EarlyCommits == 0 || st.Txn.DependencyWaits == 0 {
		t.Fatalf("seed %d: %d early commits and %d dependency waits: the workload no longer tests early lock release", seed, st.Txn.EarlyCommits, st.Txn.DependencyWaits)
	}
	t.Logf("seed %d: %d file-system operations, %d crash copies checked, %d results required durable, %d early commits, %d dependency waits",
		seed, points, checked, len(required), st.Txn.EarlyCommits, st.Txn.DependencyWaits)
	if ckpt {
		if checkpoints.Load() == 0 {
			t.Fatalf("seed %d: no checkpoint ran beside the commits", seed)
		}
		t.Logf("seed %d: %d checkpoints, %d buffer evictions", seed, checkpoints.Load(), st.Buffers.Evictions)
	}
	if skip {
		if vacuums.Load() == 0 || frozen.Load() == 0 || st.Index.AllVisible == 0 {
			t.Fatalf("seed %d: %d vacuums froze %d versions, %d keys answered from the map: the workload no longer lets readers skip work",
				seed, vacuums.Load(), frozen.Load(), st.Index.AllVisible)
		}
		t.Logf("seed %d: %d vacuums froze %d versions; %d marker listings, %d keys answered from the map, %d hint bits set",
			seed, vacuums.Load(), frozen.Load(), listings.Load(), st.Index.AllVisible, st.Heap.HintBitsSet)
	}
}

// TestCommitSiblingsCountsEarlyCommitters checks that a transaction whose
// commit released its locks early and waits for its flush still counts as
// open for commit_siblings, as a PostgreSQL backend waiting in its commit
// does: with early lock release every committer leaves the running table
// before it waits, and counting that table alone made commit_delay never
// wait (the leader saw no siblings however many commits queued behind it).
func TestCommitSiblingsCountsEarlyCommitters(t *testing.T) {
	fs := vfs.WithDiskModel(vfs.NewMemFS(), vfs.DiskModel{FsyncLatency: 50 * time.Millisecond})
	db := openTest(t, "/db", Options{FS: fs, WALFlusher: WALFlusherSerial, CommitDelay: 1000, CommitSiblings: 3,
		CheckpointTimeout: -1, WALWriterDelay: time.Hour}) // no background flush to lead the round
	defer db.Close()
	ctx := context.Background()
	put := func(i int) error {
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			return err
		}
		if err := tx.Put(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			return err
		}
		return tx.Commit()
	}
	before := db.Stats().WAL.CommitDelays
	// The first commit leads a round alone; the seven that come while its
	// sync takes 50 ms have all left the running table before the next
	// round's leader, one of them, counts its siblings.
	first := make(chan error, 1)
	go func() { first <- put(0) }()
	time.Sleep(10 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 7)
	for i := 1; i <= 7; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- put(i) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if d := db.Stats().WAL.CommitDelays - before; d == 0 {
		t.Errorf("no round waited commit_delay with 7 commits waiting for one flush and commit_siblings 3: %+v elr=%v", db.Stats().WAL, db.EarlyLockRelease())
	}
}

// TestAsyncCommitAfterWALFailureStaysInvisible: an asynchronous commit
// queued behind a synchronous one whose WAL sync then fails does not
// become visible, and its Wait reports the failure: its record lies in a
// WAL that takes no more writes, as PostgreSQL stops at such a failure
// and commits nothing after it. It used to become visible and its Wait
// returned nil, after the failure had stopped every write.
func TestAsyncCommitAfterWALFailureStaysInvisible(t *testing.T) {
	_, ffs := faultMemDir(t)
	g := newWALGate(ffs)
	on := true
	db := openTest(t, "/db", Options{FS: g, CheckpointTimeout: -1, WALWriterDelay: time.Hour, EarlyLockRelease: &on})
	defer db.Close()
	defer g.open()
	ctx := context.Background()
	mustPut(t, db, "b", "old")

	g.shut()
	a, _ := db.Begin(ctx, TxnOptions{})
	if err := a.Put([]byte("a"), []byte("lost")); err != nil {
		t.Fatal(err)
	}
	aw, err := a.CommitAsync(nil)
	if err != nil {
		t.Fatal(err)
	}
	<-g.blocked // a's flush is under way
	off := SyncCommitOff
	b, _ := db.Begin(ctx, TxnOptions{SynchronousCommit: &off})
	if err := b.Put([]byte("b"), []byte("async")); err != nil {
		t.Fatal(err)
	}
	bw, err := b.CommitAsync(aw)
	if err != nil {
		t.Fatal(err)
	}
	ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpDatasync), Contains: "/wal/"})
	g.open()
	if err := aw.Wait(ctx); !errors.Is(err, ErrWALSyncFailed) {
		t.Fatalf("the synchronous commit: %v; want ErrWALSyncFailed", err)
	}
	if err := bw.Wait(ctx); err == nil {
		t.Fatal("the asynchronous commit after the failure: Wait returned nil")
	}
	r, _ := db.Begin(ctx, TxnOptions{ReadOnly: true})
	defer r.Rollback()
	if v, err := r.Get([]byte("b")); err == nil && string(v) == "async" {
		t.Fatal("the asynchronous commit after the failure is visible")
	}
}
