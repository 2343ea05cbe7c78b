package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mvkv/clog"
	"mvkv/internal/bufpool"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/visibility"
	"mvkv/wal"
)

// Subdirectories and files of a data directory (see docs/DESIGN.md).
const (
	lockName = "LOCK"
	walDir   = "wal"
	heapDir  = "heap"
	clogDir  = "clog"
	vmDir    = "vm"
)

// DB is an open database. All methods are safe for concurrent use.
type DB struct {
	dir  string
	opts Options
	// openCtx is OpenContext's context, looked at by recovery's loops
	// (openStopped); nil after Open returns.
	openCtx context.Context
	fs      vfs.FS
	logger  *slog.Logger
	lock    io.Closer

	wal     *wal.Writer
	clog    *clog.CLOG
	storage *heap.Storage
	pool    *bufpool.Pool
	vm      *visibility.Map
	idx     *index
	// pins are the versions vacuum's second pass is about to make index
	// heads; pruning keeps them as it keeps heads (vacuum.go, revisit).
	pins    headPins
	locks   *lockManager
	procs   *procArray
	targets insertTargets
	snaps   snapshotRegistry // open snapshots, for the vacuum horizon (vacuum.go)
	fsm     freeSpaceMap     // pages with room for new tuples (fsm.go)
	vac     vacuumState      // vacuum's serialization and results (vacuum.go)
	av      autovacuumState  // dead-tuple counts and the worker (autovacuum.go)
	// testHeadRead, if set by a test while no other goroutine reads the
	// database, runs in an index-only check between reading a key's head
	// and testing its map bit (keyVisible).
	testHeadRead func()

	syncCommit atomic.Int32 // SynchronousCommit default for new transactions
	// elr is Options.EarlyLockRelease, changeable at run time;
	// visibleLSN the highest end of a commit record made visible before
	// it was durable (elr.go).
	elr atomic.Bool
	// zeroDamaged is Options.ZeroDamagedPages, changeable at run time;
	// afterRedo is set once redo is over, from when it applies.
	zeroDamaged, afterRedo atomic.Bool
	visibleLSN             atomic.Uint64
	// earlyCommits counts commits made visible before their flush,
	// dependencyWaits the transactions that waited for a flush of
	// commits they depended on.
	earlyCommits, dependencyWaits atomic.Uint64
	// committingEarly counts the early-lock-release commits that have
	// left the running table and wait for their flush: still open
	// transactions to their callers, and so to commit_siblings, which
	// counts open transactions as PostgreSQL's does.
	committingEarly atomic.Int64
	// commitDelay and commitSiblings mirror the WAL writer's knobs for
	// the getters.
	commitDelay, commitSiblings atomic.Int64

	// ckptInterlock is held shared by committers from the commit record's
	// insertion until the CLOG is set, and exclusively by a checkpoint while
	// it chooses its redo point (PostgreSQL's DELAY_CHKPT_START).
	ckptInterlock sync.RWMutex
	// pruneMu is tried shared by pruning outside vacuum, and held
	// exclusively by Verify so that no page changes under its scan.
	// Pruning never waits for it: it skips the page.
	pruneMu sync.RWMutex
	// pending counts, per heap block (hashed), the xmaxes set on it since
	// it was last pruned (pruneheap.go).
	pending pendingCounts
	// ckptMu lets one checkpoint run at a time; a bulk load, a Backup and
	// a vacuum's truncation step hold it too. A runLock, so that a bulk
	// load or Backup waiting for a long holder (a Backup copying the
	// database, a bulk load) gives up when its context ends or Close
	// begins.
	ckptMu   runLock
	lastCkpt atomic.Int64 // unix nanoseconds of the last checkpoint's end
	// ckptCommits is stats.commits read at the last checkpoint's redo
	// point (CheckpointStats.CommitsAtRedo).
	ckptCommits atomic.Uint64
	// lastRedo is the redo LSN of the last completed checkpoint, read by
	// the checkpointer to measure WAL volume (max_wal_size).
	lastRedo atomic.Uint64
	// redoPtr is the redo pointer full-page-image decisions compare page
	// LSNs with (PostgreSQL's RedoRecPtr): written under ckptInterlock held
	// exclusively, read under it held shared.
	redoPtr atomic.Uint64

	// closeMu is held shared by operations that use the WAL, CLOG and
	// buffer pool, and exclusively by Close, so Close never tears them down
	// under a running operation. It is never held across a row-lock wait
	// or the caller's code (a callback), which may wait for one or take
	// it again: with Close waiting for the write side, a second read lock
	// waits too.
	closeMu sync.RWMutex
	closed  atomic.Bool
	// noCloseCheckpoint makes Close skip its checkpoint
	// (SetCheckpointOnClose).
	noCloseCheckpoint atomic.Bool
	// longOps counts the long operations that cannot hold closeMu
	// throughout (Backup): Close waits for them, after it has set closed,
	// which they check as they go.
	longOps sync.WaitGroup
	// bulkRuns are the bulk loads in progress, which Close stops before it
	// takes closeMu (bulkRun: a load runs the caller's code, which may
	// call Close, and a write may wait for a load with closeMu held).
	// Once closeBegun is closed, under bulkMu, no new one registers.
	// Guarded by bulkMu.
	bulkMu   sync.Mutex
	bulkRuns []*bulkRun
	// closeBegun is closed by Close's first step, before it takes closeMu
	// (closing comes after): it ends a bulk load's wait for the checkpoint
	// lock, which the load makes with its bulkRun held, and a Backup's
	// copy, which a Checkpoint may wait for with closeMu held, so that
	// Close is not kept waiting behind either.
	closeBegun chan struct{}
	// closeDone is closed when the first Close returns; a second one
	// waits for it.
	closeDone chan struct{}
	// bulkRunning is a channel closed when the bulk load under way ends,
	// nil when none is (waitBulkLoad).
	bulkRunning atomic.Pointer[chan struct{}]
	// failure is the first fsync/write failure; once set, writes are refused.
	failure atomic.Pointer[error]
	// failed is closed when failure is set: it wakes the transactions
	// waiting for a row lock that a transaction whose commit failed keeps
	// for good (it stays in the running table until recovery decides).
	failed chan struct{}

	// testRetryWait, if set by a test, is given each backoff of DB.Update's
	// and DB.View's retry loop (the rerun's number and the wait drawn) and
	// returns the wait to use.
	testRetryWait func(n int, d time.Duration) time.Duration
	// testAutovacuumNap, if set by a test, is called by the autovacuum
	// worker at each nap with what autovacuumDue said, before it acts.
	testAutovacuumNap func(due bool)
	// testBulkWait, if set by a test, is called when waitBulkLoad is
	// about to wait for a bulk load.
	testBulkWait func()
	// testWriteStep, if set by a test, is called by a write holding
	// closeMu shared, having found no bulk load under way: with "lookup"
	// before it looks its key up, and with "place" before it places its
	// version.
	testWriteStep func(step string)

	stopBG chan struct{}
	bgWG   sync.WaitGroup
	// closing is closed by Close, waking row-lock waiters so that no
	// goroutine waits forever on a transaction Close abandoned.
	closing chan struct{}

	stats struct {
		commits, aborts, checkpoints, fpis atomic.Uint64
		hintBitsSet, hintHits              atomic.Uint64
		indexFileKeys, indexFileBytes      atomic.Uint64
		zeroedPages                        atomic.Uint64
		// prunesByUpdate and prunesByRead count pages pruned by a writer
		// that found a page full and by a reader (pruneheap.go),
		// prunedByUpdate and prunedByRead the versions they freed,
		// chunksByUpdate and chunksByRead the chunks of aborted writes.
		prunesByUpdate, prunedByUpdate, prunesByRead, prunedByRead atomic.Uint64
		chunksByUpdate, chunksByRead                               atomic.Uint64
		// indexOnlyVisible and indexOnlyHeapFetches count index-only
		// lookups answered from the visibility map and from the heap.
		indexOnlyVisible, indexOnlyHeapFetches atomic.Uint64
	}
	// horizon is the highest vacuum horizon computed for
	// pruning so far (computeHorizon).
	horizon atomic.Uint64
	// horizonAt is when a reader last recomputed horizon (UnixNano), so
	// that readers do it at most once a millisecond (recentHorizon).
	horizonAt atomic.Int64
	recovery  RecoveryInfo
	// systemID names the database (the control file's system identifier);
	// every index file carries it.
	systemID uint64
	// ckptEnd is the WAL position just past the last checkpoint's record:
	// while nothing is inserted after it, a checkpoint has nothing to do.
	ckptEnd atomic.Uint64
	// mapBitsCleared is set when Open's check of the visibility map
	// cleared wrong bits (countWrongMapBits), which no WAL record logs:
	// the next checkpoint writes the map pages even if nothing was logged
	// since the last one, and clears it before it does.
	mapBitsCleared atomic.Bool
	// ckptID is the identifier of the last checkpoint's record, which its
	// index file carries too (0 for a record written before identifiers).
	ckptID atomic.Uint64
	// ckptRequested asks the checkpointer for a checkpoint at once: set
	// by recovery for its end-of-recovery checkpoint.
	ckptRequested atomic.Bool
	// ckptWake wakes the checkpointer before its next tick, to look at
	// the WAL's volume (a segment switch, wakeCheckpointer).
	ckptWake chan struct{}
	// scanDone is closed when Open's background scan of the heap ends
	// (finished, or stopped by Close), after its log lines and
	// statistics; nil when none was started.
	scanDone chan struct{}
	// damage is what DamageInfo reports (damage.go).
	damage damageLog
	// redoTouched maps each block redo changed to its free space after
	// the last change (-1 for a page left new), during Open only.
	redoTouched map[uint32]int
	// redoTruncations are the HEAP_TRUNCATE records from the redo point
	// on, in WAL order, found before redo (truncate.go).
	redoTruncations []heapTruncation
	// redoPeakBlocks is the longest the heap was before a truncation
	// redo replayed (0: none): the index file, written before it, may
	// name blocks up to there.
	redoPeakBlocks uint32
	// lastTruncate is the start LSN of the newest HEAP_TRUNCATE logged or
	// replayed (0: none): a bulk load checkpoints first while it is at or
	// past the redo pointer (bulkLoadLocked).
	lastTruncate atomic.Uint64
}

// RecoveryInfo describes what Open found and replayed. It is also logged
// (at Info, and a cut tail at Warn) through Options.Logger.
type RecoveryInfo struct {
	RedoLSN uint64 // where redo started (byte position in the WAL)
	EndLSN  uint64 // end of the valid WAL
	Records int    // records replayed
	// DroppedBytes is the length of the torn WAL tail cut off after EndLSN:
	// from EndLSN to the last non-zero byte of its segment, zeros inside
	// included. A tail torn by a crash was never durable, so it can hold
	// only commits that were not acknowledged, or asynchronous commits
	// (synchronous_commit=off) that a crash is allowed to lose. Damage to
	// durable WAL that a later valid record proves durable fails Open
	// with ErrCorruption instead; but durable WAL zeroed from some point
	// to the end of what was written reads exactly like a tail that was
	// never written, and is cut the same way (PostgreSQL cannot tell the
	// two apart either): the commits it held are lost and DroppedBytes
	// counts only the non-zero bytes after the cut.
	DroppedBytes int64
	// DroppedRecords is how many valid records (each naming its own
	// position, its CRC holding) the dropped tail holds after the bytes
	// that ended the log, and DroppedCommits how many of them are commit
	// records (bulk load commits included); DroppedRecordsFrom is the LSN
	// of the first (0 if none), so the bytes from EndLSN to it are the
	// damage. Both are 0 for a tail that is torn only at its end. A crash's
	// torn write (later sectors on disk, earlier ones not) leaves records
	// after the damage too, but so does durable WAL zeroed or damaged in
	// the middle, and then those commits were acknowledged: the warning
	// Open logs counts them, as PostgreSQL's "invalid record length at"
	// names where its log ends.
	DroppedRecords, DroppedCommits int
	DroppedRecordsFrom             uint64
	// Duration is the wall time of recovery, from reading the WAL to the
	// key index being ready; the end-of-recovery checkpoint is not in it.
	Duration time.Duration
	// IndexFromFile says the key index was loaded from the index file
	// written by the last checkpoint and brought up to date from the WAL;
	// false means it was rebuilt by reading every heap page, and
	// IndexRebuildReason says why (no file, a file from another
	// checkpoint, damage).
	IndexFromFile      bool
	IndexRebuildReason string
	// IndexKeys is the number of keys in the index after Open: live,
	// deleted (until a vacuum drops their entries) or never committed,
	// as IndexStats.Keys counts them, so not the number of keys a scan
	// finds.
	IndexKeys int
	// WrittenBlocks is the heap length the last checkpoint wrote; pages
	// of zeros below it are damage. CheckedBlocks of them were read for
	// that before Open returned: all with a heap scan, none with the
	// index file, in which case a background scan reads them after Open
	// and logs any it finds, and any that fails its checksum or header
	// checks, with the keys the index places on them.
	WrittenBlocks, CheckedBlocks uint32
	// ScanTime is the time spent on the first pass over the WAL, which
	// finds its end and makes it durable; RedoTime the time spent
	// replaying it; IndexTime the time spent loading the index file (or
	// rebuilding the index from the heap). All three lie within Duration.
	ScanTime, RedoTime, IndexTime time.Duration
	// BulkLoadCutFrom and BulkLoadCutBlocks describe the pages of a bulk
	// load that did not commit, removed before redo (DB.BulkLoad): the
	// heap was cut back to BulkLoadCutFrom blocks, BulkLoadCutBlocks
	// fewer than the files held. Both 0 when there was none.
	BulkLoadCutFrom, BulkLoadCutBlocks uint32
	// FilledSegments names the heap segment files that a crash left
	// shorter than 1 GiB before a later one and that recovery filled
	// with FilledBlocks empty pages in all before redo (the pages were
	// extended after the last checkpoint; redo rewrote the ones that
	// held data). Empty when there was none.
	FilledSegments []string
	FilledBlocks   uint64
	// EmptiedBlocks counts the pages of zeros past the last checkpoint's
	// heap length, inside the files, that no WAL record rebuilds (pages
	// extended and not written before a crash) and that recovery wrote
	// as empty pages before redo, so that the next checkpoint, whose heap
	// length covers them, does not make them damage.
	EmptiedBlocks uint32
	// EmptiedSegmentsFrom, when not 0, is the heap length recovery cut
	// the heap back to: a segment was short before later ones that a
	// crash left holding only pages of zeros (a partial page at a
	// file's end reads as one) no WAL record writes, and
	// those later files were emptied (not filled up to them).
	EmptiedSegmentsFrom uint32
	// ControlFileMissing says the control file was missing though the
	// WAL shows a checkpoint had run (which writes it) and the heap held
	// pages, so redo replayed the whole WAL from its first record
	// (logged as a warning; Open fails with ErrCorruption if the WAL no
	// longer reaches back that far).
	ControlFileMissing bool
	// CLOGTornPages names the CLOG pages ("file at offset", by the page)
	// that failed their checksum after a crash and were accepted as torn
	// by it (a page written again after the checkpoint and cut
	// mid-write), because every commit and abort record the WAL still
	// holds for them agrees with their bits and redo set again every
	// status decided since the redo point; logged as a warning. Empty
	// when there was none.
	CLOGTornPages []string
	// RemovedWALSegments names the WAL segment files past the end of the
	// valid log that Open removed (oldest first): written after the end
	// a crash left, or put in the directory by hand; nothing in them was
	// durable log. Logged at info level. Empty when there was none.
	RemovedWALSegments []string
	// RemovedCLOGSegments names the CLOG segment files past the one
	// holding the last xid recovered that Open removed after a crash: a
	// checkpoint wrote them for xids handed out just before the crash,
	// whose records were lost with it, and nothing durable names those
	// xids. Logged as a warning. Empty when there was none.
	RemovedCLOGSegments []string
}

// Open opens (creating if needed) the database in dir and runs crash
// recovery: redo from the last checkpoint's redo point to the end of the
// valid WAL, cutting off a torn tail, then marking transactions that have no
// commit record as aborted, then loading the key index from the index file
// of the last checkpoint and applying the key changes redo met (or, if the
// file is missing, damaged or from another checkpoint, rebuilding the index
// by reading every heap page, which is logged with the reason), and
// starting the end-of-recovery checkpoint, which runs in the background
// (Open waits for it only after rebuilding the index or removing an
// unfinished bulk load's pages). Open's time depends on the index file's
// size and the WAL written since the last checkpoint, not on the heap's
// size; Recovery reports where it went.
//
// Open returns an error wrapping ErrLocked if another process has dir open,
// ErrCorruption (naming the file and offset) if a page or the control
// file fails its checks, and a *SettingError (matching ErrInvalidSetting)
// if an option is out of its range or shared_buffers exceeds the
// machine's memory. It makes a new data directory only in a directory that
// is missing or empty (as initdb): one holding other files, with no
// control file, is refused with ErrNotDataDirectory. An Open that fails
// after it began making a new data directory removes what it made (the
// directory itself, and missing parents, if it made them), so that the
// directory is not taken for a database the next time; nothing that was
// there before is removed, and nothing at all from an existing data
// directory.
func Open(dir string, opts Options) (*DB, error) {
	return OpenContext(context.Background(), dir, opts)
}

// OpenContext is Open whose recovery stops when ctx ends: its reading of
// the WAL, its redo, its load of the index file and its rebuild of the key
// index look at ctx every 1,024 records, 16,384 keys or 64 heap pages,
// and stop there, as a crash at that point would. Nothing that recovery
// has not finished is made durable in the control file, so the next Open
// starts recovery over from the same checkpoint and finishes it (what the
// stopped one wrote, the WAL's torn tail zeroed, pages that redo changed
// and wrote back, an index file it would not use removed, is what a crash
// during recovery leaves, which recovery takes); a new data directory
// whose first Open stopped is removed, as after any failed first Open.
// The error wraps ErrOpenStopped and ctx's error. The end-of-recovery
// checkpoint that Open waits for (after an index rebuild) does not look
// at ctx. Other errors are Open's. Use it where a signal must end a long
// recovery, as `mvkv serve` does, and as PostgreSQL's startup process
// exits on a shutdown request in the middle of crash recovery, its next
// start redoing from the same checkpoint.
func OpenContext(ctx context.Context, dir string, opts Options) (*DB, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if dir == "" {
		return nil, errors.New("mvkv: Open needs a data directory; the empty path names none")
	}
	// Lexically, as PostgreSQL's canonicalize_path: "d/new/.." is d, and
	// is judged (missing, empty, ours or foreign) as d, not as a missing
	// directory that MkdirAll would then resolve to d.
	dir = filepath.Clean(dir)
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := opts.FS
	fresh, err := checkForeignDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	// What a new data directory's Open makes, it removes if it fails
	// (newdir.go); an existing data directory is left to recovery.
	var made *newDirUndo
	if fresh {
		if made, err = noteNewDir(fsys, dir); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, walDir), filepath.Join(dir, heapDir), filepath.Join(dir, clogDir), filepath.Join(dir, vmDir)} {
		if err := fsys.MkdirAll(d); err != nil {
			return nil, made.undo(nil, wrapf(err, "create %s", d))
		}
	}
	lk, err := fsys.Lock(filepath.Join(dir, lockName))
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			// Another process has the directory: what it holds is that
			// process's, whoever made it.
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return nil, made.undo(nil, wrapf(err, "lock %s", dir))
	}
	// The directory's own entry must be durable too, or a crash could lose
	// a new data directory with every commit in it (initdb's
	// fsync_parent_path), and so must the entry of every parent Open made:
	// a parent's entry lost takes the data directory with it. After the
	// lock, so that its file's entry is covered, and so that an Open that
	// fails here removes what it made while no other Open can have begun
	// using it.
	for _, d := range dirsToSync(dir, made) {
		if err := fsys.SyncDir(d); err != nil {
			return nil, made.undo(lk, wrapf(err, "fsync %s", d))
		}
	}
	db := &DB{
		dir:      dir,
		opts:     opts,
		fs:       fsys,
		logger:   opts.Logger,
		lock:     lk,
		idx:      newIndex(),
		locks:    newLockManager(),
		stopBG:   make(chan struct{}),
		ckptWake: make(chan struct{}, 1),
		failed:   make(chan struct{}),
	}
	db.syncCommit.Store(int32(opts.SynchronousCommit))
	db.elr.Store(opts.EarlyLockRelease == nil || *opts.EarlyLockRelease)
	db.zeroDamaged.Store(opts.ZeroDamagedPages)
	db.commitDelay.Store(int64(opts.CommitDelay))
	db.commitSiblings.Store(int64(opts.CommitSiblings))
	db.targets.reset()
	db.snaps.init()
	db.fsm.init()
	db.vac.mu.init()
	db.ckptMu.init()
	db.closing = make(chan struct{})
	db.closeBegun = make(chan struct{})
	db.closeDone = make(chan struct{})
	db.openCtx = ctx
	err = db.open()
	db.openCtx = nil
	if err != nil {
		if errors.Is(err, ErrOpenStopped) {
			db.logger.Warn("recovery stopped before its end: the next Open starts it over from the same checkpoint", "dir", dir, "err", err)
		}
		// Nothing of the CLOG is written back: a page recovery accepted
		// as torn and then found damaged would otherwise be rewritten
		// with a valid checksum, and the next Open would trust it.
		if db.clog != nil {
			db.clog.Abandon()
			db.clog = nil
		}
		db.lock = nil // released by made.undo, after what it made is gone
		db.closeFiles(false)
		return nil, made.undo(lk, asCorruption(err))
	}
	db.bgWG.Add(1)
	go db.checkpointer()
	if db.recovery.IndexFromFile {
		// Nothing read the heap pages while opening, so neither damage
		// nor a map bit without PD_ALL_VISIBLE on its page has been
		// looked for: the background scan does both, and until it has
		// passed a block its bits are not trusted (checkMapBits). The
		// unlogged map's wrong bits after a crash are the experiment it
		// exists for, and PostgreSQL before 9.2 had no such check.
		if !db.vm.Unlogged() {
			db.vm.Distrust(0)
		}
		db.bgWG.Add(1)
		db.scanDone = make(chan struct{})
		go func() {
			defer close(db.scanDone)
			db.scanForDamagedPages(db.recovery.WrittenBlocks, db.pool.NBlocks())
		}()
	}
	if opts.Autovacuum == nil || *opts.Autovacuum {
		db.bgWG.Add(1)
		go db.autovacuumWorker()
	}
	return db, nil
}

// openStopped returns an error wrapping ErrOpenStopped and the context's
// error once OpenContext's context has ended. Recovery's loops call it
// once a record or a page, n counting from 0; it looks at the context when
// n is a multiple of every.
func (db *DB) openStopped(n, every int) error {
	if db.openCtx == nil || n%every != 0 {
		return nil
	}
	if err := db.openCtx.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrOpenStopped, db.dir, err)
	}
	return nil
}

// waitBulkLoad returns once no bulk load is under way, ErrClosed once Close
// has begun, or ctx's error. Writers, commits and
// aborts call it before they take closeMu: a load holds the checkpoint
// interlock exclusively, and one of them waiting for the interlock while
// holding closeMu would keep Close waiting until the load ended, and for
// ever if the load's rows waited for it.
func (db *DB) waitBulkLoad(ctx context.Context) error {
	ch := db.bulkRunning.Load()
	if ch == nil {
		return nil
	}
	if db.testBulkWait != nil {
		db.testBulkWait()
	}
	select {
	case <-*ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-db.closing:
		return ErrClosed
	}
}

// checkForeignDir refuses to make a new data directory in dir when dir
// already holds files that are not a data directory's (another program's
// store, a home directory given by mistake), as initdb refuses a
// directory that is not empty: the engine's files would be written among
// them, and later nothing could tell whose they are. A directory whose
// WAL directory holds segments is a data directory (damaged or not, which
// the rest of Open judges), and so is one whose control file begins with
// the control file's magic number, or whose first heap page passes this
// engine's checks; a missing or empty one is new, and so
// is one holding only what a first Open cut short makes before the first
// WAL segment (the lock file, empty subdirectories, the CLOG's own file).
// Anything else (a file named control that is not ours, an index or heap
// file without any WAL) is another program's, and nothing is created or
// overwritten. fresh reports a directory that is missing or new (no data
// directory yet), in which Open makes one.
func checkForeignDir(fsys vfs.FS, dir string) (fresh bool, err error) {
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil // missing: Open creates it
	}
	if errors.Is(err, syscall.ENOTDIR) {
		// A file where the directory should be (or in its path).
		return false, fmt.Errorf("%w: %s is not a directory", ErrNotDataDirectory, dir)
	}
	if err != nil {
		// Unreadable (permissions): nothing can tell whether it is
		// empty, so nothing is created in it.
		return false, wrapf(err, "read %s", dir)
	}
	foreign := func(n string) error {
		return fmt.Errorf("%w: %s is not empty (it holds %s, and no control file of this engine or WAL beside it): give a new or empty directory", ErrNotDataDirectory, dir, n)
	}
	if slices.Contains(names, walDir) {
		// Other programs keep a wal/ too; a segment of ours makes it
		// a data directory, its control file present or not: recovery
		// judges it (ControlFileMissing, or damage), and Verify names
		// any stranger beside the segments.
		segs, _ := fsys.ReadDir(filepath.Join(dir, walDir))
		if slices.ContainsFunc(segs, wal.IsSegmentName) {
			return false, nil
		}
	}
	if slices.Contains(names, controlName) && hasControlMagic(fsys, filepath.Join(dir, controlName)) {
		return false, nil // ours; readControl judges the rest of it
	}
	if slices.Contains(names, heapDir) && heapLooksOurs(fsys, filepath.Join(dir, heapDir, "00000000")) {
		// A heap of ours whose control file and WAL are gone: Open
		// names that damage.
		return false, nil
	}
	for _, n := range names {
		switch n {
		case lockName, controlTmpName:
			continue // a data directory that Open began and a crash cut short
		case walDir, heapDir, clogDir, vmDir:
			// Before the first WAL segment exists, nothing but the
			// CLOG's own file is written in them.
			sub, err := fsys.ReadDir(filepath.Join(dir, n))
			if err != nil {
				return false, foreign(strconv.Quote(n))
			}
			for _, f := range sub {
				if n == clogDir && clog.IsOwnFile(f) {
					continue
				}
				return false, foreign(strconv.Quote(filepath.Join(n, f)))
			}
			continue
		}
		return false, foreign(strconv.Quote(n))
	}
	return true, nil
}

// heapLooksOurs reports whether the heap file at name begins with a
// written page that passes this engine's checksum and header checks.
func heapLooksOurs(fsys vfs.FS, name string) bool {
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		return false
	}
	defer f.Close()
	p := make([]byte, heap.PageSize)
	if _, err := f.ReadAt(p, 0); err != nil {
		return false
	}
	return !heap.IsNew(p) && heap.VerifyPage(p, 0) == nil
}

// hasControlMagic reports whether the file at name begins with the control
// file's magic number: a file of ours, however damaged its other bytes.
func hasControlMagic(fsys vfs.FS, name string) bool {
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		return true // unreadable: readControl says why
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		// Shorter than the magic number: not ours. Unreadable (a
		// directory in its place): readControl says why.
		return !errors.Is(err, io.EOF)
	}
	return binary.LittleEndian.Uint64(b[:]) == controlMagic
}

func (db *DB) open() error {
	fsys, dir := db.fs, db.dir
	// A crash while the control file or the index file was being replaced
	// can leave its temporary file behind; the real file is intact either
	// way, and the next replacement would overwrite it anyway.
	for _, tmp := range []string{controlTmpName, indexFileTmpName} {
		if err := fsys.Remove(filepath.Join(dir, tmp)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return wrapf(err, "remove a leftover temporary file")
		}
	}
	ctrl, _, err := readControl(fsys, dir)
	if err != nil {
		if errors.Is(err, ErrCorruption) {
			// What a user can do: the control file names the checkpoint
			// recovery starts from, and nothing else holds that.
			return fmt.Errorf("%w (the control file names the checkpoint recovery starts from; nothing rebuilds a damaged one: restore the data directory from a copy)", err)
		}
		return err
	}
	// A new directory, or one whose control file predates identifiers,
	// gets its identifier now; the next checkpoint writes it.
	db.systemID = ctrl.SystemID
	if db.systemID == 0 {
		db.systemID = newIdentifier()
	}
	if db.storage, err = heap.OpenStorage(fsys, filepath.Join(dir, heapDir)); err != nil {
		return err
	}
	if db.clog, err = clog.Open(fsys, filepath.Join(dir, clogDir), clog.Options{
		Buffers:     db.opts.CLOGBuffers,
		Locking:     string(db.opts.CLOGLocking),
		GroupUpdate: db.opts.CLOGGroupUpdate == nil || *db.opts.CLOGGroupUpdate,
		FlushWAL:    db.flushWAL,
		Logger:      db.logger,
		// A damaged CLOG page is rebuilt by redo only when it holds
		// nothing but xids handed out after the redo point, whose
		// every status redo replays; any other is corruption (the
		// clog package's "Crash contract").
		Recovery: true,
		RedoXid:  ctrl.NextXid,
	}); err != nil {
		return err
	}
	// As the CLOG bounded and rounded it, for CurrentSetting.
	db.opts.CLOGBuffers = db.clog.Buffers()
	db.pool = bufpool.New(poolStorage{db.storage, db}, int(db.opts.SharedBuffers/heap.PageSize), db.flushWAL, heap.PageLSN)
	db.pool.SetNoFreeBufferError(ErrNoFreeBuffer)
	if db.vm, err = visibility.Open(fsys, filepath.Join(dir, vmDir), visibility.Options{
		FlushWAL: db.flushWAL,
		Unlogged: db.opts.VisibilityMap == VisibilityMapUnlogged,
		// A statement that needs a map page while every buffer of the
		// map's own cache is pinned fails as one that needs a heap page
		// does with the heap's pool full.
		NoFreeBufferError: errNoFreeMapBuffer,
		// A damaged map page is read as one with no bit set (always
		// safe: a reader or vacuum then looks at the heap page itself),
		// as PostgreSQL's ZERO_ON_ERROR read of map pages; said once
		// per read, which the map's cache makes rare.
		OnDamage: func(err error) {
			db.logger.Warn("visibility map page failed its checks and is read as one with no bit set; vacuum sets the bits again", "err", err)
		},
		// A map page newer than the log was written by another copy
		// of the database; its bits are not this heap's, and its LSN
		// would fail every WAL flush before writing it.
		EndOfWAL: func() uint64 {
			if w := db.wal; w != nil {
				return uint64(w.InsertLSN())
			}
			return 0
		},
	}); err != nil {
		return err
	}
	return db.recover(ctrl)
}

// flushWAL makes the WAL durable up to lsn; the buffer pool and the CLOG
// call it before writing a page whose LSN is lsn (WAL before data).
func (db *DB) flushWAL(lsn uint64) error {
	w := db.wal
	if w == nil || lsn == 0 {
		return nil
	}
	if wal.LSN(lsn) > w.InsertLSN() {
		return fmt.Errorf("%w: page LSN %#x is beyond the end of the WAL %#x", ErrCorruption, lsn, uint64(w.InsertLSN()))
	}
	if err := w.FlushData(wal.LSN(lsn)); err != nil {
		return db.fail(err)
	}
	return nil
}

// writable returns the failure that stopped writes, if any.
func (db *DB) writable() error {
	if p := db.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Failure returns the error that stopped the database taking writes (an
// fsync or write of the WAL, a heap, visibility-map or CLOG file that
// failed, or damage found where a write needed it: errors.Is matches
// ErrWALSyncFailed, ErrIOFailure or ErrCorruption), or nil while it takes
// them. The state is sticky until the database is closed and reopened,
// when recovery redoes the WAL from the last checkpoint; a health check
// or a server's status report reads it here rather than from a failed
// write. Safe to call concurrently.
func (db *DB) Failure() error { return db.writable() }

// fail records the first fsync or write failure: from then on the database
// refuses writes (and, with early lock release on, reads, which may have
// seen a commit the WAL then failed to make durable) until it is reopened and recovery redoes from
// the last checkpoint (docs/DESIGN.md rule 6). It returns the error to report.
func (db *DB) fail(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, wal.ErrClosed) {
		return ErrClosed
	}
	if errors.Is(err, ErrWriteFailed) {
		// A heap page's write, retried later (ErrWriteFailed).
		db.logger.Warn("a heap page could not be written; it stays in the buffer pool and is written again later", "err", err)
		return err
	}
	// The cause stays matchable (errors.Is(err, syscall.ENOSPC), a
	// *fs.PathError) behind the engine's sentinel.
	wrapped := fmt.Errorf("%w: %w", ErrIOFailure, err)
	if errors.Is(err, ErrIOFailure) {
		wrapped = err // said once is enough
	}
	if errors.Is(err, wal.ErrSyncFailed) {
		wrapped = fmt.Errorf("%w: %w", ErrWALSyncFailed, err)
	}
	if err = asCorruption(err); errors.Is(err, ErrCorruption) {
		wrapped = err
	}
	if db.failure.CompareAndSwap(nil, &wrapped) {
		db.logger.Error("database stopped taking writes", "err", wrapped)
		close(db.failed)
	}
	return *db.failure.Load()
}

// SetSynchronousCommit changes the default synchronous_commit for
// transactions begun afterwards. A value other than SyncCommitOn and
// SyncCommitOff is refused with a *SettingError (matching
// ErrInvalidSetting), the setting unchanged; after Close it returns
// ErrClosed. Safe to call concurrently.
func (db *DB) SetSynchronousCommit(s SynchronousCommit) error {
	if err := checkSynchronousCommit(s); err != nil {
		return err
	}
	if db.closed.Load() {
		return ErrClosed
	}
	db.syncCommit.Store(int32(s))
	return nil
}

// checkSynchronousCommit refuses a SynchronousCommit that is neither on
// nor off, which would otherwise read as off and lose durability.
func checkSynchronousCommit(s SynchronousCommit) error {
	if s != SyncCommitOn && s != SyncCommitOff {
		return &SettingError{Name: "synchronous_commit", Value: s.String(), Want: "want the constant SyncCommitOn or SyncCommitOff"}
	}
	return nil
}

// SetCommitDelay changes commit_delay (microseconds, 0 to 100000, or
// CommitDelayAuto). A value outside that range is refused with a
// *SettingError (matching ErrInvalidSetting); after Close it returns
// ErrClosed. Safe to call concurrently.
func (db *DB) SetCommitDelay(us int) error {
	if db.closed.Load() {
		return ErrClosed
	}
	if err := checkCommitDelay(us); err != nil {
		return err
	}
	if us == CommitDelayAuto {
		db.wal.SetAdaptiveCommitDelay()
	} else {
		db.wal.SetCommitDelay(us)
	}
	db.commitDelay.Store(int64(us))
	return nil
}

// CommitDelay returns commit_delay in microseconds, or CommitDelayAuto.
func (db *DB) CommitDelay() int { return int(db.commitDelay.Load()) }

// CommitSiblings returns commit_siblings.
func (db *DB) CommitSiblings() int { return int(db.commitSiblings.Load()) }

// SynchronousCommit returns the default synchronous_commit for new
// transactions.
func (db *DB) SynchronousCommit() SynchronousCommit { return SynchronousCommit(db.syncCommit.Load()) }

// SetCommitSiblings changes commit_siblings (0 to 1000: the other
// transactions that must be running for commit_delay to apply). A value
// outside that range is refused with a *SettingError (matching
// ErrInvalidSetting); after Close it returns ErrClosed. Safe to call
// concurrently.
func (db *DB) SetCommitSiblings(n int) error {
	if db.closed.Load() {
		return ErrClosed
	}
	if err := checkCommitSiblings(n); err != nil {
		return err
	}
	db.wal.SetCommitSiblings(n)
	db.commitSiblings.Store(int64(n))
	return nil
}

// Recovery returns what the last Open found and replayed.
func (db *DB) Recovery() RecoveryInfo { return db.recovery }

// Dir returns the data directory as Open was given it, cleaned lexically
// as filepath.Clean cleans a path ("d/" and "x/../d" are "d"; relative
// stays relative, symbolic links stay unresolved): PostgreSQL's
// data_directory. Safe for concurrent use.
func (db *DB) Dir() string { return db.dir }

// Close takes a checkpoint (unless a failure stopped writes, or
// SetCheckpointOnClose turned it off) and closes the database. A Vacuum
// or Backup running then stops at its next page, and a BulkLoad once the
// row it is adding is added, or at once when it is running its rows
// function, loading nothing either way (rows
// may call Close itself: see DB.BulkLoad). Bulk loads and Backups are
// stopped before Close waits for the operations under way to leave the
// database, as some of those may be waiting for the load or the copy (see
// the package's documentation, "Lock order"). Before the checkpoint,
// Close frees the out-of-line value chunks of the versions such a run (or
// one stopped earlier by its context) removed and did not get to free,
// which takes a read and a write of each page holding them. Transactions
// still open afterwards get ErrClosed from their reads,
// writes, Commit and Rollback (a Rollback of one that placed no version
// has nothing to undo and returns nil); what they wrote never commits
// (recovery at the next Open finds it aborted). Close does not wait for
// them to end. Close returns
// ErrClosed when called twice; called while another Close is under way,
// once that one has returned. After a failure that stopped writes it
// returns that failure (see Failure), with the files closed all the same;
// the next Open recovers from the last checkpoint.
func (db *DB) Close() error {
	// Bulk loads are ended first, before closeMu, and Backups told to
	// stop (closeBegun): a Checkpoint, Verify or vacuum truncation waits
	// for the checkpoint lock a load or a Backup holds with closeMu held,
	// and so does a write or commit that found no load under way just as
	// one began (for the interlock); the load may wait for this Close (its
	// rows function calls Close, or waits for it, or reads the database
	// and would wait behind Close for closeMu).
	db.stopBulkRuns()
	db.closeMu.Lock()
	if db.closed.Swap(true) {
		db.closeMu.Unlock()
		// Not before the first Close is done: a caller that reopens
		// the directory, or exits, on this return must find the files
		// closed and the checkpoint written. Nothing the first waits
		// for waits for a Close (bulk loads' rows are ended, not
		// waited for).
		<-db.closeDone
		return ErrClosed
	}
	close(db.closing)
	db.closeMu.Unlock()
	defer close(db.closeDone)
	db.longOps.Wait()
	close(db.stopBG)
	db.bgWG.Wait()
	// A Vacuum still running stops at its next page (closed is set),
	// leaving the chunks of versions it removed in vacuum's debt; vac.mu
	// waits for it. Freed here, before the checkpoint, rather than by a
	// run after the next Open, which may be far off (freeChunkDebt).
	db.vac.mu.Lock()
	if db.writable() == nil {
		if ferr := db.freeChunkDebt(); ferr != nil {
			db.logger.Warn("close: freeing the chunks a stopped vacuum left failed; the next vacuum after Open frees them", "err", ferr)
		}
	}
	db.vac.mu.Unlock()
	var err error
	writeCLOG := db.writable() == nil
	if writeCLOG {
		if db.noCloseCheckpoint.Load() {
			// Nothing but the WAL, which closing flushes to its end,
			// as a crash after that flush would leave it: the CLOG
			// pages as well are left to redo.
			writeCLOG = false
		} else {
			err = db.checkpoint()
		}
	}
	if cerr := db.closeFiles(writeCLOG); err == nil {
		err = cerr
	}
	if f := db.writable(); f != nil {
		// What closing the files reported is this failure met again
		// (the WAL's sticky error), unwrapped.
		return f
	}
	return err
}

// SetCheckpointOnClose says whether Close takes its checkpoint: on (the
// default), Close writes every dirty page and moves the control file's
// redo point to its end, so that the next Open has nothing to replay.
// Off, Close makes the WAL durable up to its end (asynchronous commits'
// records included) and closes the files without writing a heap, CLOG or
// visibility map page or a checkpoint record: the control file keeps
// naming the last checkpoint, and the next Open replays the WAL written
// since, as after a crash. Nothing committed is lost either way, since
// every change is in the WAL; off trades the checkpoint's writes on the
// way out for that replay on the way in (Redis's SHUTDOWN NOSAVE, which
// the server maps to it, or PostgreSQL's immediate shutdown with the WAL
// flushed first). After Close it returns ErrClosed. Safe to call
// concurrently.
func (db *DB) SetCheckpointOnClose(on bool) error {
	if db.closed.Load() {
		return ErrClosed
	}
	db.noCloseCheckpoint.Store(!on)
	return nil
}

// closeFiles closes the WAL (flushing it to its end), the CLOG (writing
// its dirty pages first if writeCLOG; abandoning them otherwise), the heap
// and map files and the lock.
func (db *DB) closeFiles(writeCLOG bool) error {
	var errs []error
	if db.wal != nil {
		errs = append(errs, db.wal.Close())
	}
	if db.clog != nil {
		if writeCLOG {
			errs = append(errs, db.clog.Close())
		} else {
			db.clog.Abandon()
		}
	}
	if db.storage != nil {
		errs = append(errs, db.storage.Close())
	}
	if db.vm != nil {
		errs = append(errs, db.vm.Close())
	}
	if db.lock != nil {
		errs = append(errs, db.lock.Close())
	}
	return errors.Join(errs...)
}

// asCorruption makes a corruption error from a lower layer (a WAL record, a
// heap or CLOG page that fails its checks) match ErrCorruption as well.
func asCorruption(err error) error {
	if err == nil || errors.Is(err, ErrCorruption) {
		return err
	}
	if errors.Is(err, wal.ErrCorrupt) || errors.Is(err, heap.ErrCorrupt) || errors.Is(err, clog.ErrCorrupt) || errors.Is(err, visibility.ErrCorrupt) {
		return fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	return err
}

// poolStorage is the heap files as the buffer pool reads them: a page that
// fails its checks (checksum, line pointers, zeros where a checkpoint wrote
// data) is corruption to every caller, matching ErrCorruption.
type poolStorage struct {
	*heap.Storage
	db *DB // counts and logs the damaged pages met (damage.go)
}

// WriteBlock marks a failed write (not a failed fsync) as ErrWriteFailed,
// which leaves the page dirty in the pool and the database taking writes.
// Any other failure stops writes (DESIGN rule 6): a segment file that
// could not be created, or whose name a failed directory fsync may not
// have made durable, which a retry would only seem to mend. Writes of a
// new segment's first page come from the statement that extends the heap
// into it, not only from evictions and checkpoints, so the rule is kept
// here, where every write passes.
func (s poolStorage) WriteBlock(block uint32, p []byte) error {
	err := s.Storage.WriteBlock(block, p)
	switch {
	case err == nil, errors.Is(err, heap.ErrClosed):
		return err
	case errors.Is(err, heap.ErrWriteFailed):
		return fmt.Errorf("%w: %w", ErrWriteFailed, err)
	default:
		return s.db.fail(err)
	}
}

func (s poolStorage) ReadBlock(block uint32, p []byte) error {
	raw := s.Storage.ReadBlock(block, p)
	if raw != nil && errors.Is(raw, heap.ErrCorrupt) && s.db.zeroDamaged.Load() && s.db.afterRedo.Load() {
		// zero_damaged_pages: the page's own checks failed (not an I/O
		// error, nor a valid page from another copy of the database).
		if s.db.noteZeroedOut(block, raw) == nil {
			clear(p)
			return nil
		}
	}
	err := asCorruption(raw)
	if w := s.db.wal; err == nil && w != nil {
		// WAL before data: no page on disk can be newer than the log. One
		// that is was written by another copy of the database (a file put
		// back from a later backup, say), and its versions would be read
		// as this database's. Every read passes here: redo's, the index
		// rebuild's (which so fails Open), and with the index file loaded,
		// the first read of each page after Open.
		if lsn := wal.LSN(heap.PageLSN(p)); lsn > w.InsertLSN() {
			err = fmt.Errorf("%w: %s: page LSN %s is beyond the end of the WAL %s: this database did not write it (a file from another copy?)",
				ErrCorruption, s.db.heapBlockName(block), lsn, w.InsertLSN())
		}
	}
	if err != nil && errors.Is(err, ErrCorruption) {
		s.db.noteDamagedRead(block, err)
	}
	return err
}
