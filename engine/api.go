package engine

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"mvkv/vfs"
)

// Sentinel errors. Every error the engine returns wraps one of these where a
// caller could act on it; test with errors.Is.
var (
	// ErrNotFound: the key has no version visible to the transaction's snapshot.
	ErrNotFound = errors.New("mvkv: key not found")
	// ErrSerializationFailure: under REPEATABLE READ, the row was changed by a
	// transaction that committed after this transaction's snapshot was taken
	// (first updater wins, as PostgreSQL's "could not serialize access due to
	// concurrent update"). The transaction must be rolled back and retried.
	// With early lock release that commit may not be durable yet: a
	// caller that reports the failure rather than retrying calls
	// Txn.WaitObserved first (DB.Update does).
	ErrSerializationFailure = errors.New("mvkv: could not serialize access due to concurrent update")
	// ErrDeadlock: waiting for a row lock would close a cycle of waiters; this
	// transaction was chosen to fail. Roll back and retry.
	ErrDeadlock = errors.New("mvkv: deadlock detected")
	// ErrLockTimeout: a row lock was not granted within Options.LockTimeout.
	ErrLockTimeout = errors.New("mvkv: canceling statement due to lock timeout")
	// ErrOpenStopped: OpenContext's context ended while it recovered; the
	// error wraps the context's error too. The next Open recovers the
	// directory from the same checkpoint.
	ErrOpenStopped = errors.New("mvkv: open stopped before recovery ended")
	// ErrNestedWrite: the function given to Txn.Update (or UpdatePrefix)
	// placed a version of the key being updated (a Put, an Update) in the
	// same transaction; Update's own version would hide it, so the
	// transaction is aborted instead. A delete of the key there is not
	// refused: it places no version, and Update's value follows it.
	// Write other keys there, or the key itself after Update. PostgreSQL
	// refuses the like (a row its UPDATE is changing that a trigger of
	// that UPDATE changed first) with "tuple to be updated was already
	// modified by an operation triggered by the current command".
	ErrNestedWrite = errors.New("mvkv: update function wrote its own key")
	// ErrTxnDone: the transaction was already committed or rolled back.
	ErrTxnDone = errors.New("mvkv: transaction already committed or rolled back")
	// ErrTxnManaged: Commit, CommitAsync or Rollback was called on the
	// transaction of DB.Update or DB.View, which end it themselves (fn
	// returns nil to commit, an error to roll back). Nothing was done.
	ErrTxnManaged = errors.New("mvkv: the transaction of DB.Update or DB.View is ended by them: return from the function instead")
	// ErrClosed: the database is closed.
	ErrClosed = errors.New("mvkv: database is closed")
	// ErrTooLarge: a key longer than MaxKeySize or a value longer than MaxValueSize.
	ErrTooLarge = errors.New("mvkv: key or value too large")
	// ErrEmptyKey: keys must be at least one byte long.
	ErrEmptyKey = errors.New("mvkv: empty key")
	// ErrReadOnly: a write in a transaction begun with TxnOptions.ReadOnly.
	ErrReadOnly = errors.New("mvkv: cannot write in a read-only transaction")
	// ErrCorruption: a file failed a consistency check; the message names the
	// file and offset.
	ErrCorruption = errors.New("mvkv: data corruption")
	// ErrLocked: the data directory is open elsewhere (another process, or
	// another DB in this process).
	ErrLocked = errors.New("mvkv: data directory is in use")
	// ErrNotDataDirectory: Open was given a directory that holds other
	// files and is not a data directory (no WAL segments, and no control
	// file beginning with this engine's magic number), in which it will
	// not make one, as initdb refuses a directory that is not empty; or a
	// path that is a file, not a directory. Nothing is created or changed.
	ErrNotDataDirectory = errors.New("mvkv: not an mvkv data directory")
	// ErrWALSyncFailed: an fsync of the WAL failed; the database accepts no
	// more writes until it is reopened. Reads keep working with early lock
	// release off; with it on (the default) a read fails too when it may
	// have seen a commit whose record the failed sync did not make durable
	// (one made visible before the failure and not yet flushed), which a
	// reopen's recovery would not find: after a failure under load, every
	// read. A commit that fails this way is in doubt: its record may have
	// reached the disk, and then the reopen's recovery finds it committed,
	// as PostgreSQL's would after a failed commit.
	ErrWALSyncFailed = errors.New("mvkv: WAL sync failed; the database takes no writes until reopened")
	// ErrIOFailure: an fsync or write of a data file failed; the database
	// accepts no more writes until it is reopened (reads keep working, as
	// for ErrWALSyncFailed). Both wrap the failure's cause as well, so
	// errors.Is(err, syscall.ENOSPC) matches a full disk.
	ErrIOFailure = errors.New("mvkv: I/O failure; the database takes no writes until reopened")
	// ErrWriteFailed: a write of a heap page failed (no space left on the
	// device, say) while a checkpoint or an eviction from the buffer pool
	// wrote it. Nothing is lost: the page stays in the pool, dirty, and
	// the database goes on taking writes; the operation that needed the
	// write (a checkpoint, or a statement that needed a free buffer) fails
	// and a later one tries again, as PostgreSQL's checkpointer does. A
	// failed fsync is ErrIOFailure instead, and stops writes; so, on the
	// safe side, is a failed write of a visibility map page, of a page
	// a bulk load builds, or a heap segment file that cannot be created.
	// A failed write or fsync of the index file is ErrWriteFailed too:
	// that file is only a copy of what the heap and the WAL hold, so the
	// checkpoint fails, writes go on, and the next checkpoint writes a
	// new one.
	ErrWriteFailed = errors.New("mvkv: write of a data file failed")
	// ErrNoFreeBuffer: the statement needed a page that is not in the
	// buffer pool, and every buffer of it was pinned by the statements
	// running at once, so none could be evicted (PostgreSQL's "no unpinned
	// buffers available"). The statement fails and the database goes on:
	// it may be retried, and a shared_buffers of more than a few pages
	// per concurrent statement avoids it. The visibility map's own cache
	// (32 pages, each covering 255 MiB of heap) fails the same way when
	// every one of its pages is pinned.
	ErrNoFreeBuffer = errors.New("mvkv: no unpinned buffer available (shared_buffers is too small for the statements running at once)")

	// The settings interface (Setting.Set, DB.SetConfig,
	// DB.CurrentSetting), after PostgreSQL's SET and SHOW:

	// ErrUnknownSetting: no setting has the name (PostgreSQL's
	// "unrecognized configuration parameter").
	ErrUnknownSetting = errors.New("mvkv: unrecognized configuration parameter")
	// ErrInvalidSetting: the value is not one the setting takes; the
	// message says what it takes.
	ErrInvalidSetting = errors.New("mvkv: invalid value for parameter")
	// ErrSettingFixed: the setting is fixed when the database opens and
	// cannot be changed on an open one (PostgreSQL's "cannot be changed
	// without restarting the server").
	ErrSettingFixed = errors.New("mvkv: parameter cannot be changed on an open database")

	// DB.BulkLoad:

	// ErrBulkLoadNotEmpty: DB.BulkLoad needs a database whose key index is
	// empty, and no other writer of the loaded keys during the load.
	ErrBulkLoadNotEmpty = errors.New("mvkv: bulk load needs an empty database")
	// ErrBulkLoadOrder: the keys given to DB.BulkLoad were not in strictly
	// increasing byte order.
	ErrBulkLoadOrder = errors.New("mvkv: bulk load keys are not in strictly increasing order")

	// ErrNilFunction: a method that calls back into the caller's code
	// (DB.Update, DB.View, Txn.Update, Txn.Scan and the other scans,
	// DB.StatTuple, DB.BulkLoad) was given a nil function.
	ErrNilFunction = errors.New("mvkv: nil function")
)

// IsRetryable reports whether err says that the transaction lost a race
// with another one and would likely succeed if run again from the start
// (after Rollback): it wraps ErrSerializationFailure (a REPEATABLE READ
// write to a row a later-committed transaction changed) or ErrDeadlock
// (this transaction was chosen to break a cycle of lock waits). These are
// PostgreSQL's SQLSTATE class 40 errors, which clients are expected to
// retry. Nothing else is: ErrLockTimeout means a lock holder stayed too
// long and a rerun would likely wait as long again, and the other
// sentinels describe the request or the database, not a race. DB.Update
// and DB.View retry exactly these errors; one they return because their
// context ended while they paused before a rerun wraps the context's error
// and the last of these, so IsRetryable is true for it: a caller that
// retries should look at its context first.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrSerializationFailure) || errors.Is(err, ErrDeadlock)
}

// Size limits, in bytes. A value that makes its tuple longer than 2,032
// bytes (about 2 KiB with the key and header) is stored out of
// line, in chunks of a page each (PostgreSQL's TOAST); MaxValueSize leaves
// room above Redis's 512 MiB strings for what a server stores beside a value.
const (
	MaxKeySize   = 1 << 10 // 1 KiB
	MaxValueSize = 1 << 30 // 1 GiB
)

// IsolationLevel selects how a transaction sees concurrent commits.
type IsolationLevel int

const (
	// ReadCommitted takes a new snapshot for every statement (every Get, Scan
	// and Update call). An Update that finds the row changed by a transaction
	// that has since committed re-applies its function to the newest version,
	// as PostgreSQL's UPDATE does under READ COMMITTED (EvalPlanQual).
	ReadCommitted IsolationLevel = iota
	// RepeatableRead uses one snapshot for the whole transaction (snapshot
	// isolation). A write to a row changed by a transaction that committed
	// after the snapshot fails with ErrSerializationFailure.
	RepeatableRead
)

// String returns PostgreSQL's name for the level ("read committed").
func (l IsolationLevel) String() string {
	switch l {
	case ReadCommitted:
		return "read committed"
	case RepeatableRead:
		return "repeatable read"
	}
	return "IsolationLevel(" + strconv.Itoa(int(l)) + ")"
}

// Options configure Open. The zero value gives PostgreSQL's defaults scaled
// to a small engine: every field left at its zero value takes its default
// (see EnsureDefaults), and Settings describes each knob, its range and its
// default as text. Options are copied at Open; knobs that may change at
// run time have setters on DB (and DB.SetConfig).
type Options struct {
	// FS is the file system seam; nil means the operating system's.
	FS vfs.FS
	// Logger receives operational messages (recovery, checkpoints); nil
	// discards them.
	Logger *slog.Logger
	// SharedBuffers is the size of the heap buffer pool in bytes (default
	// 128 MiB, PostgreSQL's shared_buffers default), rounded down to 8 KiB
	// pages, raised to 16 pages and at most the machine's physical memory
	// (Open returns an error above it: the pool is allocated at once).
	SharedBuffers int64
	// FillFactor is PostgreSQL's fillfactor, a percentage from 10 to 100
	// (0 means the default, 100): an insert of a new key goes on a page
	// only if the page keeps 100-FillFactor percent of its bytes free
	// afterwards, so that later versions of the keys on the page fit on it
	// too (an update tries its old version's page first). The chunks of a
	// value stored out of line (over about 2 KiB) keep no such room, as
	// PostgreSQL's TOAST table has none. Open returns an error outside the
	// range.
	FillFactor int
	// SynchronousCommit is the default for transactions (default on).
	SynchronousCommit SynchronousCommit
	// EarlyLockRelease selects the order of a synchronous commit; nil means
	// on. Off is PostgreSQL's order: the commit record is flushed, then
	// the transaction becomes visible and releases its row locks, so a
	// row written by every transaction gets one commit per WAL flush. On
	// (early lock release, as Shore-MT's Aether, made safe for readers by
	// controlled lock violation, Graefe et al. 2013): the transaction
	// becomes visible and releases its row locks as soon as its commit
	// record is in the WAL, then waits for the flush; every transaction
	// that could have seen or overwritten it, read-only ones included,
	// waits in Commit (and DB.View) until the WAL is durable past it. In
	// both orders Commit returns nil only once the commit record is
	// durable, and no successful Commit has seen a commit that a crash
	// can lose; with it on, many commits to one row share a flush. See
	// DB.SetEarlyLockRelease to change it at run time.
	EarlyLockRelease *bool
	// CommitDelay is PostgreSQL's commit_delay in microseconds (0 to 100000):
	// the group-commit leader waits this long for siblings before it writes
	// and syncs the WAL, when at least CommitSiblings other transactions are
	// active. Default 0. CommitDelayAuto selects the adaptive delay.
	CommitDelay int
	// CommitSiblings is PostgreSQL's commit_siblings (default 5; 0 means
	// the default, NoCommitSiblings means 0: delay whatever the number of
	// other active transactions; at most 1000). A transaction counts as
	// active from its first write until its Commit or Rollback returns, so
	// a commit that released its locks early and waits for its flush
	// still counts, as a PostgreSQL backend waiting in its commit does.
	CommitSiblings int
	// WALWriterDelay is PostgreSQL's wal_writer_delay (default 200 ms): how
	// often the background WAL writer flushes asynchronous commits: at
	// least 1 ms (Open refuses less with ErrInvalidSetting: 200 here is
	// 200 ns). The setting's text takes up to 10 s; longer is taken here,
	// to keep the writer out of a test's way, and shown as a number Set
	// then refuses.
	WALWriterDelay time.Duration
	// WALFlusher is the group-commit flusher policy: WALFlusherPipelined
	// (the default, the wal package's DefaultFlusher: the next group's
	// write and sync may start while earlier syncs are outstanding, when
	// measuring shows that commits faster than one sync at a time),
	// WALFlusherSerial (PostgreSQL's leader/follower XLogFlush, one sync
	// at a time) or WALFlusherNone (one sync per commit). Package wal's
	// documentation gives the measurements behind the default.
	WALFlusher WALFlusher
	// WALSegmentSize is the size of a WAL segment file in bytes, a power of
	// two from 1 MiB to 1 GiB (default 16 MiB). It applies to a new data
	// directory; an existing one keeps the size its WAL was written with.
	WALSegmentSize int64
	// CLOGBuffers is the number of 8 KiB CLOG pages cached, PostgreSQL's
	// transaction_buffers, rounded up to a multiple of 16 (clog.BankSize),
	// in banks of 16. Zero derives it from SharedBuffers as PostgreSQL 17
	// does: SharedBuffers/512 pages, a multiple of 16 from 16 to 1024 (32
	// for the default 128 MiB); see clog.AutotuneBuffers.
	CLOGBuffers int
	// CLOGLocking is CLOGLockingBank (one lock per bank of 16 CLOG
	// buffers, as PostgreSQL 17; the default) or CLOGLockingGlobal (one
	// lock for all, as before 17); anything else makes Open fail.
	CLOGLocking CLOGLocking
	// CLOGGroupUpdate turns the CLOG's group update of transaction statuses
	// (PostgreSQL 11's TransactionGroupUpdateXidStatus) on or off; nil
	// means on.
	CLOGGroupUpdate *bool
	// CheckpointTimeout is PostgreSQL's checkpoint_timeout (default 5 min);
	// negative disables time-driven checkpoints (the setting's 0).
	CheckpointTimeout time.Duration
	// MaxWALSize is PostgreSQL's max_wal_size in bytes (default 1 GiB), at
	// least two WAL segments: a checkpoint starts when this much WAL was
	// written since the last one.
	MaxWALSize int64
	// LockTimeout is PostgreSQL's lock_timeout: the longest a write waits for
	// a row lock before ErrLockTimeout; 0 waits as long as the context allows.
	// Open refuses a negative value with a *SettingError. It is fixed while
	// the database is open (PostgreSQL's is per session): for one
	// transaction's own bound, give its context a deadline.
	LockTimeout time.Duration
	// MaxRetries bounds how many times DB.Update and DB.View run their
	// function after serialization failures and deadlocks (default 10; a
	// negative value means the default too). They pause between runs, for
	// 10 µs at first and at most 4 ms (see DB.Update).
	MaxRetries int

	// Autovacuum is PostgreSQL's autovacuum: a background worker that runs
	// DB.Vacuum when enough dead tuples have piled up (see
	// AutovacuumVacuumThreshold) or the frozen horizon lags too far (see
	// AutovacuumFreezeMaxAge). nil means on.
	Autovacuum *bool
	// AutovacuumVacuumThreshold is autovacuum_vacuum_threshold (default
	// 50): vacuum runs once the dead tuples (versions left behind by
	// committed updates and deletes and by aborted writes) exceed this
	// plus AutovacuumVacuumScaleFactor times the live tuples. A negative
	// value stands for 0 (the zero value means the default).
	AutovacuumVacuumThreshold int
	// AutovacuumVacuumScaleFactor is autovacuum_vacuum_scale_factor
	// (default 0.2), a fraction of the live tuples (the keys in the index).
	// 0 means the default; a negative value means 0, so that the threshold
	// alone triggers a run. The keys of every kind share the one heap, so a
	// positive factor makes the trigger grow with keys that are only ever
	// inserted (pgbench's history), where PostgreSQL's grows with the
	// updated table alone.
	AutovacuumVacuumScaleFactor float64
	// AutovacuumNaptime is autovacuum_naptime (default 1 min): how often
	// the worker checks the dead-tuple count (the first check comes a
	// second after Open, or a naptime if that is shorter). Values below
	// PostgreSQL's 1 s are allowed here, for tests and benchmarks, down
	// to 1 ms (Open refuses less with ErrInvalidSetting: 60 here is 60
	// ns).
	AutovacuumNaptime time.Duration
	// AutovacuumFreezeMaxAge is autovacuum_freeze_max_age in transactions
	// (default 200,000,000; 100,000 to 2,000,000,000, as PostgreSQL's):
	// autovacuum runs an aggressive vacuum, whatever the dead-tuple count,
	// once the frozen horizon (VacuumStats.RelFrozenXid) lags the vacuum
	// horizon by this much, as PostgreSQL's anti-wraparound autovacuum.
	// xids here are 64 bits and never wrap; what this bounds is the CLOG,
	// which can be truncated only below the frozen horizon, under a
	// workload that leaves autovacuum no dead tuples to count (inserts
	// only, or updates whose pages prune themselves). The lag is measured
	// from the vacuum horizon, not the next xid, so that a snapshot
	// holding the horizon back cannot make a run start at every nap for
	// nothing. 0 means the default. As PostgreSQL caps the freeze ages by
	// it, a vacuum is aggressive at 95% of this lag even when
	// VacuumFreezeTableAge is larger, and freezes what is older than half
	// of it even when VacuumFreezeMinAge is larger, so that the run this
	// starts advances the frozen horizon well below the lag. The caps
	// hold for every vacuum, a caller's too. With Autovacuum off no run
	// starts by age (PostgreSQL's would start one even then): the CLOG
	// is then truncated only by the caller's Vacuum.
	AutovacuumFreezeMaxAge int64
	// VacuumFreezeMinAge is vacuum_freeze_min_age in transactions (default
	// 50,000,000): vacuum freezes a tuple whose xmin is at least this much
	// older than the vacuum horizon. 0 means the default; a negative value
	// freezes every tuple below the horizon.
	VacuumFreezeMinAge int64
	// VacuumFreezeTableAge is vacuum_freeze_table_age in transactions
	// (default 150,000,000). A vacuum is aggressive, reading every page
	// that is not all-frozen so that it can advance the frozen horizon
	// (and truncate the CLOG), once the horizon has fallen this far behind
	// the oldest running xid; otherwise it skips all-visible pages, as
	// PostgreSQL's lazy vacuum does. 0 means the default; a negative value
	// makes every vacuum aggressive. A vacuum with VacuumFreezeMinAge
	// negative (VACUUM FREEZE) is always aggressive.
	VacuumFreezeTableAge int64
	// VacuumTruncate is PostgreSQL's vacuum_truncate: a vacuum cuts the
	// empty pages at the end of the heap off its files when at least
	// 1,000 of them, or a sixteenth of the heap, end it (see
	// VacuumStats.PagesTruncated). It cuts 2,048 pages (16 MiB) at a
	// time, holding off writers and checkpoints during each step (as
	// PostgreSQL's lazy_truncate_heap under an exclusive lock; about
	// 20 ms a step on a disk whose fsync takes 0.2 ms). nil means on.
	VacuumTruncate *bool
	// ZeroDamagedPages is PostgreSQL's zero_damaged_pages (default off):
	// a heap page that fails its checks when read (checksum, header, line
	// pointers, or zeros below the length the last checkpoint wrote) is
	// taken as a new, empty page, with a warning naming its file, offset
	// and block, instead of failing the read with ErrCorruption. The
	// versions on it are lost: a key whose newest version was there reads
	// as absent (and can be written again), a value with a chunk there
	// fails to read, and vacuum and an Open that rebuilds the key index
	// get past the page. The page on disk stays damaged until a change to
	// it is written. Redo never zeroes a page. For recovering what is left
	// of a damaged database; DB.SetZeroDamagedPages changes it at run
	// time.
	ZeroDamagedPages bool
	// VisibilityMap is how visibility map bits are kept:
	// VisibilityMapCrashSafe (the default; setting a bit is WAL-logged and
	// the map page waits for its record, as PostgreSQL since 9.2) or
	// VisibilityMapUnlogged (bits set without WAL and map pages written
	// without the WAL-before-data interlock, as PostgreSQL 8.4 to 9.1).
	// Unlogged is UNSAFE: after a crash a bit can say a page is
	// all-visible when it is not, and index-only reads then return wrong
	// answers. It exists only to measure what crash safety costs.
	VisibilityMap VisibilityMapMode
}

// TxnOptions configure one transaction.
type TxnOptions struct {
	// Isolation is the isolation level (default ReadCommitted).
	Isolation IsolationLevel
	// ReadOnly rejects writes with ErrReadOnly.
	ReadOnly bool
	// SynchronousCommit overrides the DB default when non-nil.
	SynchronousCommit *SynchronousCommit
}
