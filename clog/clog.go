package clog

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"mvkv/vfs"
)

// Status is a transaction's 2-bit status, as PostgreSQL's XidStatus.
type Status uint8

// The four statuses. The values are stored on disk; do not change them.
const (
	// StatusInProgress is the status of every xid not yet set, including
	// every xid on a page never written.
	StatusInProgress Status = 0
	// StatusCommitted marks a committed transaction.
	StatusCommitted Status = 1
	// StatusAborted marks an aborted transaction.
	StatusAborted Status = 2
	// StatusSubCommitted marks a subtransaction whose parent has not yet
	// committed (PostgreSQL's TRANSACTION_STATUS_SUB_COMMITTED).
	StatusSubCommitted Status = 3

	statusMask Status = 3
)

// String returns the status name as PostgreSQL's pg_xact_status spells it.
func (s Status) String() string {
	switch s {
	case StatusInProgress:
		return "in progress"
	case StatusCommitted:
		return "committed"
	case StatusAborted:
		return "aborted"
	case StatusSubCommitted:
		return "sub-committed"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

var (
	// ErrCorrupt is wrapped by every error about a CLOG page whose bytes on
	// disk do not check out; the wrapping error names the segment file and
	// the byte offset of the page within it.
	ErrCorrupt = errors.New("clog: corrupt page")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("clog: closed")
	// ErrInvalidStatus is returned by SetStatus for a Status above 3.
	ErrInvalidStatus = errors.New("clog: invalid status")
	// ErrInvalidOptions is returned by Open for an Options.Locking it does
	// not know.
	ErrInvalidOptions = errors.New("clog: invalid options")
)

// SLRU pool sizes, in 8 KiB pages.
const (
	// DefaultBuffers (1 MiB) is used when Options.Buffers is zero, as
	// PostgreSQL's 128-buffer CLOG before version 17's banks.
	DefaultBuffers = 128
	// MinBuffers is one bank: enough slots for concurrent misses and
	// writes to find a victim that is not in I/O.
	MinBuffers = BankSize
	// MaxBuffers bounds the pool at 1 GiB of pages.
	MaxBuffers = 1 << 17
)

// Options configure a CLOG. They are copied at Open.
type Options struct {
	// Buffers is the number of SLRU buffer slots, each holding one 8 KiB
	// page (PostgreSQL's transaction_buffers). Zero means DefaultBuffers;
	// values below MinBuffers are raised to it, above MaxBuffers lowered,
	// and others rounded up to a multiple of BankSize. The slots form
	// Buffers/BankSize banks.
	Buffers int
	// Locking selects how banks are locked: "bank" (or "") gives every
	// bank its own lock, as PostgreSQL 17's SLRU banks; "global" makes all
	// banks share one lock, as PostgreSQL's CLogControlLock before 17.
	// Anything else makes Open fail with ErrInvalidOptions.
	Locking string
	// GroupUpdate makes a SetStatus that finds its bank lock taken join a
	// group whose leader sets every member's status under one acquisition
	// of the lock, as PostgreSQL 11's TransactionGroupUpdateXidStatus.
	// Results are the same with and without it.
	GroupUpdate bool
	// FlushWAL must be non-nil. It makes the WAL durable up to at least lsn
	// (a byte position in the WAL) and returns only when it is, as
	// PostgreSQL's XLogFlush. The CLOG calls it before it writes a page
	// whose group LSN is above the highest LSN FlushWAL has already
	// returned nil for: WAL before data. It is called without any CLOG lock
	// held, possibly from several goroutines at once.
	FlushWAL func(lsn uint64) error
	// Logger receives warnings (a torn page accepted during recovery). Nil
	// discards them.
	Logger *slog.Logger
	// Recovery is set when the CLOG is opened for WAL redo after a crash,
	// which replays every SetStatus since the last checkpoint's redo point;
	// EndRecovery clears it when redo is done. While it is set, a page that
	// fails its checksum and holds only xids at or above RedoXid is rebuilt
	// from the WAL: its bits are discarded (every xid on it reads as in
	// progress until redo sets it again), it is logged, and it is marked
	// dirty so the next Checkpoint writes it back whole. Any other page
	// that fails its checksum is taken to be torn by the crash: its bits
	// are kept (each 512-byte sector holds its old or its new contents,
	// and redo sets every status decided since the redo point again), it
	// is logged and, once EndRecovery was called, rewritten whole the same
	// way: until then neither an eviction nor a Checkpoint writes it, so
	// that a caller whose check of it fails (TornPages) leaves it on disk
	// as it found it. Without Recovery such a
	// page is an ErrCorrupt error; see "Crash contract" in the package
	// documentation, and CheckWritten, which the engine uses to refuse
	// damage that cannot be a tear before recovery begins.
	Recovery bool
	// RedoXid is, with Recovery, the lowest xid whose status redo is sure
	// to set again: the last checkpoint's next xid, read after its redo
	// point was chosen, so that every xid at or above it was handed out,
	// and committed or aborted, after the redo point. Zero (no checkpoint:
	// redo replays the WAL from its beginning) makes every page
	// rebuildable.
	RedoXid uint64
}

// Stats counts CLOG activity since Open. It is a value; use Sub to get the
// activity between two snapshots (as bbolt's Stats).
type Stats struct {
	Lookups    uint64 // Status and SetStatus calls that looked a page up
	Hits       uint64 // lookups that found their page in a buffer
	Misses     uint64 // lookups that had to load their page
	PageReads  uint64 // pages read from segment files (missing files included)
	PageWrites uint64 // pages written to segment files
	// PagesZeroed counts pages Extend started as all zeros in the buffers
	// instead of reading them (one per XidsPerPage xids assigned).
	PagesZeroed uint64
	FileSyncs   uint64 // fsyncs of segment files and of the directory
	IOWaits     uint64 // waits for another goroutine's page read or write
	// LockWaits counts bank lock acquisitions that found the lock taken,
	// and SetStatus calls that found it taken and waited for a group
	// leader instead; LockWaitNanos is their total wait in nanoseconds.
	LockWaits     uint64
	LockWaitNanos uint64
	// GroupUpdates counts group-update leaders (one lock acquisition
	// each); GroupMembers counts the SetStatus calls in their groups,
	// leaders and members that fell back included, so
	// GroupMembers/GroupUpdates is the average group size.
	GroupUpdates uint64
	GroupMembers uint64
	// Truncations counts Truncate calls that advanced the truncation
	// point; SegmentsRemoved the segment files they removed.
	Truncations     uint64
	SegmentsRemoved uint64
}

// Sub returns s minus prev, field by field.
func (s Stats) Sub(prev Stats) Stats {
	return Stats{
		Lookups:     s.Lookups - prev.Lookups,
		Hits:        s.Hits - prev.Hits,
		Misses:      s.Misses - prev.Misses,
		PageReads:   s.PageReads - prev.PageReads,
		PageWrites:  s.PageWrites - prev.PageWrites,
		PagesZeroed: s.PagesZeroed - prev.PagesZeroed,
		FileSyncs:   s.FileSyncs - prev.FileSyncs,
		IOWaits:     s.IOWaits - prev.IOWaits,

		LockWaits:     s.LockWaits - prev.LockWaits,
		LockWaitNanos: s.LockWaitNanos - prev.LockWaitNanos,
		GroupUpdates:  s.GroupUpdates - prev.GroupUpdates,
		GroupMembers:  s.GroupMembers - prev.GroupMembers,

		Truncations:     s.Truncations - prev.Truncations,
		SegmentsRemoved: s.SegmentsRemoved - prev.SegmentsRemoved,
	}
}

// stats holds the counters behind Stats.
type stats struct {
	lookups, hits, misses, pageReads, pageWrites, fileSyncs, lockWaits, ioWaits atomic.Uint64

	lockWaitNanos, groupUpdates, groupMembers atomic.Uint64

	truncations, segmentsRemoved, pagesZeroed atomic.Uint64
}

// CLOG is the commit log: two status bits per 64-bit transaction id, kept in
// 8 KiB pages in segment files under one directory and cached in an SLRU
// buffer pool (PostgreSQL's clog.c over slru.c).
//
// Locking: a page's slot is found and changed under its bank's lock (shared
// by all banks under Locking "global"; see the package documentation). No
// lock is held across a call to FlushWAL or across file I/O; a slot in I/O
// is marked so no other goroutine reloads, rewrites or evicts it meanwhile.
// File handles have their own lock, always taken after, never while
// waiting for, a bank lock.
//
// All methods are safe for concurrent use, except that Close must not run
// concurrently with any other method.
type CLOG struct {
	fs   vfs.FS
	dir  string
	opts Options
	log  *slog.Logger

	banks []bank // fixed at Open

	// group is the head of the lock-free list of SetStatus calls waiting
	// for a group-update leader (PostgreSQL's procglobal->clogGroupFirst):
	// pushed with CompareAndSwap, taken whole by the leader with Swap.
	group atomic.Pointer[groupMember]

	// latestPage is one more than the highest page SetStatus has touched
	// (0: none yet). That page is the one new xids are being written to and
	// is never chosen as a victim (as PostgreSQL's latest_page_number).
	latestPage atomic.Uint64
	// extended is the highest page ExtendTo has made sure of (written, or
	// dirty and so written by the next Checkpoint).
	extended atomic.Uint64

	// flushed is the highest LSN FlushWAL has returned nil for; pages whose
	// group LSN is at or below it are written without calling FlushWAL.
	flushed atomic.Uint64

	files segFiles

	// failed holds the first write or fsync error. Once set, no page is
	// written and Checkpoint returns it: after a failed fsync the kernel may
	// have dropped the dirty data, so a later fsync that succeeds proves
	// nothing (the PostgreSQL fsync-gate lesson). Reads continue.
	failed atomic.Pointer[error]

	// recovering starts as Options.Recovery and is cleared by EndRecovery.
	recovering atomic.Bool

	tornMu sync.Mutex
	torn   map[uint64]string // guarded by tornMu: page -> "file at offset N", accepted as torn in recovery

	closed atomic.Bool

	// oldest is the truncation point (PostgreSQL's oldestClogXid): Status
	// of an xid below it fails with ErrTruncated. It only grows; it is
	// stored in the oldest_xid file before it is raised (truncate.go).
	oldest atomic.Uint64
	// truncMu serializes Truncate calls.
	truncMu sync.Mutex

	stats stats

	// groupLSNs holds, per buffer slot (bank index * BankSize + slot), the
	// group LSNs of its page (grouplsn.go), nil until the first LSN is
	// noted. Each entry is guarded by the owning bank's mu.
	groupLSNs [][]uint64
}

// Open opens the CLOG kept in dir (DATA/clog), creating the directory if it
// is missing (and syncing its parent so the creation is durable). Segment
// files are opened lazily. Open reads no pages: corruption is reported by the
// call that first needs the page. It returns an error if opts.FlushWAL is nil
// or the directory cannot be created.
func Open(fsys vfs.FS, dir string, opts Options) (*CLOG, error) {
	if opts.FlushWAL == nil {
		return nil, errors.New("clog: Options.FlushWAL is nil")
	}
	switch {
	case opts.Buffers == 0:
		opts.Buffers = DefaultBuffers
	case opts.Buffers < MinBuffers:
		opts.Buffers = MinBuffers
	case opts.Buffers > MaxBuffers:
		opts.Buffers = MaxBuffers
	}
	opts.Buffers = (opts.Buffers + BankSize - 1) / BankSize * BankSize
	switch opts.Locking {
	case "":
		opts.Locking = "bank"
	case "bank", "global":
	default:
		return nil, fmt.Errorf("%w: Locking %q (want \"bank\" or \"global\")", ErrInvalidOptions, opts.Locking)
	}
	c := &CLOG{fs: fsys, dir: dir, opts: opts, log: opts.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if _, err := fsys.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := fsys.MkdirAll(dir); err != nil {
			return nil, withPath("create", dir, err)
		}
		if err := fsys.SyncDir(path.Dir(dir)); err != nil {
			return nil, fmt.Errorf("clog: sync parent of %s: %w", dir, err)
		}
	} else if err != nil {
		return nil, withPath("stat", dir, err)
	}
	c.recovering.Store(opts.Recovery)
	if err := c.loadOldest(); err != nil {
		return nil, err
	}
	c.files.init()
	c.banks = make([]bank, opts.Buffers/BankSize)
	c.groupLSNs = make([][]uint64, opts.Buffers)
	global := new(sync.RWMutex)
	for i := range c.banks {
		mu := global
		if opts.Locking == "bank" {
			mu = new(sync.RWMutex)
		}
		c.banks[i].init(BankSize, mu)
	}
	return c, nil
}

// bankFor returns the bank that caches pageno.
func (c *CLOG) bankFor(pageno uint64) *bank {
	return &c.banks[pageno%uint64(len(c.banks))]
}

// SetStatus records xid's status. lsn is the end LSN of the commit or abort
// record that decided it, or 0 when the record is already durable (a
// synchronous commit) or unknown; the page remembers the highest such LSN
// (its group LSN, as PostgreSQL's group_lsn for asynchronous commits) and is
// never written before FlushWAL has covered it. The status is visible to
// Status calls as soon as SetStatus returns; it is durable after the next
// Checkpoint. Errors: ErrInvalidStatus, ErrClosed, ErrTruncated (xid below
// the truncation point; during recovery such a call does nothing and
// returns nil), ErrCorrupt (loading the page), or an I/O or FlushWAL error
// (evicting a dirty page to make room).
func (c *CLOG) SetStatus(xid uint64, s Status, lsn uint64) error {
	if s > statusMask {
		return fmt.Errorf("%w: %d", ErrInvalidStatus, uint8(s))
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.truncatedErr(xid); err != nil {
		if c.recovering.Load() {
			// Redo of a commit record older than a truncation that
			// completed before the crash: the record of that
			// truncation comes later in the WAL, and nobody needs the
			// bit (PostgreSQL's SLRU reads such pages as zeros in
			// recovery for the same reason).
			return nil
		}
		return err
	}
	pageno := xidPage(xid)
	c.noteLatest(pageno)
	b := c.bankFor(pageno)
	if c.opts.GroupUpdate {
		if b.mu.TryLock() {
			defer b.mu.Unlock()
			return c.setStatusLocked(b, pageno, xid, s, lsn)
		}
		if done, err := c.groupUpdate(b, pageno, xid, s, lsn); done {
			return err
		}
	}
	c.lock(b)
	defer b.mu.Unlock()
	return c.setStatusLocked(b, pageno, xid, s, lsn)
}

// Extend makes room in the CLOG for xid, a newly assigned xid, as
// PostgreSQL's ExtendCLOG: when xid is the first of its page, the page
// starts in the buffers as all zeros (every xid on it in progress) without
// being read, and replaces whatever the file holds there at its next write;
// for any other xid it does nothing. So bytes left where no xid has been
// assigned yet (a file cut short and grown again, a stray write, a page
// appended by mistake) never stop commits when xids reach them, and the
// first commits on a new page do not read the file. The caller assigns
// xids in order and calls Extend for each before any status of it is set
// or read, holding whatever serializes the assignment (as ExtendCLOG runs
// under XidGenLock); nothing here is logged: after a crash, a page whose
// xids all lie at or above Options.RedoXid is rebuilt by redo if damaged.
// Errors: ErrClosed, ErrTruncated, or an I/O or FlushWAL error writing out
// a dirty page to make room (the CLOG then writes nothing more).
func (c *CLOG) Extend(xid uint64) error {
	if xid%XidsPerPage != 0 {
		return nil
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.truncatedErr(xid); err != nil {
		return err
	}
	pageno := xidPage(xid)
	c.noteLatest(pageno)
	b := c.bankFor(pageno)
	c.lock(b)
	defer b.mu.Unlock()
	_, _, err := c.slotLocked(b, pageno, true)
	if err == nil {
		c.stats.pagesZeroed.Add(1)
	}
	return err
}

// setStatusLocked is SetStatus with b, the bank of pageno, locked
// exclusively. It may release and retake the lock to load the page.
func (c *CLOG) setStatusLocked(b *bank, pageno, xid uint64, s Status, lsn uint64) error {
	c.stats.lookups.Add(1)
	i, hit, err := c.slotForLocked(b, pageno)
	if err != nil {
		return err
	}
	if hit {
		c.stats.hits.Add(1)
	} else {
		c.stats.misses.Add(1)
	}
	c.setSlotLocked(b, i, xid, s, lsn)
	return nil
}

// setSlotLocked sets xid's status in slot i of b, which must hold xid's page
// in state slotValid, with b.mu held exclusively; lsn raises the page's group
// LSN.
func (c *CLOG) setSlotLocked(b *bank, i int, xid uint64, s Status, lsn uint64) {
	sl := &b.slots[i]
	if setStatus(sl.buf[:], xid, s) {
		sl.dirty = true
	}
	if lsn > sl.lsn {
		sl.lsn = lsn
	}
	c.noteGroupLSNLocked(sl.pageno, i, xid, lsn)
	sl.lastUse.Store(b.clock.Add(1))
}

// noteLatest raises latestPage to cover pageno.
func (c *CLOG) noteLatest(pageno uint64) {
	for {
		cur := c.latestPage.Load()
		if cur > pageno || c.latestPage.CompareAndSwap(cur, pageno+1) {
			return
		}
	}
}

// isLatest reports whether pageno is the page new xids are written to.
func (c *CLOG) isLatest(pageno uint64) bool { return c.latestPage.Load() == pageno+1 }

// Status returns xid's status. An xid never set reads as StatusInProgress.
// A hit takes the bank lock shared; a miss loads the page (evicting another,
// perhaps writing it first). Errors: ErrClosed, ErrTruncated (xid below the
// truncation point, see Truncate), ErrCorrupt, or an I/O or
// FlushWAL error.
func (c *CLOG) Status(xid uint64) (Status, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if err := c.truncatedErr(xid); err != nil {
		return 0, err
	}
	pageno := xidPage(xid)
	c.stats.lookups.Add(1)
	b := c.bankFor(pageno)

	c.rlock(b)
	if i, ok := b.index[pageno]; ok && b.slots[i].state == slotValid {
		sl := &b.slots[i]
		st := getStatus(sl.buf[:], xid)
		sl.lastUse.Store(b.clock.Add(1))
		b.mu.RUnlock()
		c.stats.hits.Add(1)
		return st, nil
	}
	b.mu.RUnlock()

	c.lock(b)
	defer b.mu.Unlock()
	i, hit, err := c.slotForLocked(b, pageno)
	if err != nil {
		return 0, err
	}
	if hit {
		c.stats.hits.Add(1)
	} else {
		c.stats.misses.Add(1)
	}
	sl := &b.slots[i]
	sl.lastUse.Store(b.clock.Add(1))
	return getStatus(sl.buf[:], xid), nil
}

// Checkpoint makes every status set before it was called durable: it writes
// every dirty page (calling FlushWAL with the page's group LSN first; during
// recovery, not the pages accepted as torn, see Options.Recovery), waits
// for page writes already under way, then fsyncs every segment file written
// since the last Checkpoint. New segment files had their directory entry
// synced when they were created. After a write or fsync error the CLOG writes
// nothing more and every later Checkpoint returns that error.
func (c *CLOG) Checkpoint() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return c.checkpoint()
}

func (c *CLOG) checkpoint() error {
	if err := c.failure(); err != nil {
		return err
	}
	for bi := range c.banks {
		if err := c.flushBank(&c.banks[bi]); err != nil {
			return err
		}
	}
	if err := c.syncFiles(); err != nil {
		return c.fail(err)
	}
	return nil
}

// flushBank writes every dirty page of b and waits out writes in progress.
func (c *CLOG) flushBank(b *bank) error {
	c.lock(b)
	defer b.mu.Unlock()
	for i := range b.slots {
		sl := &b.slots[i]
		for sl.writing {
			c.stats.ioWaits.Add(1)
			b.ioDone.Wait()
		}
		if sl.state == slotValid && sl.dirty && !c.heldTorn(sl.pageno) {
			if err := c.writeSlotLocked(b, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// TornPages returns the pages that recovery (Options.Recovery) accepted as
// torn by the crash, keeping their bits, since Open: each page number with
// "FILE at offset N" for messages. A caller that can check statuses on them
// against another record (the engine, against the commit and abort
// records its WAL still holds) tells a tear from damage that way. Safe to
// call concurrently with other methods.
func (c *CLOG) TornPages() map[uint64]string {
	c.tornMu.Lock()
	defer c.tornMu.Unlock()
	return maps.Clone(c.torn)
}

// heldTorn reports whether pageno is a page recovery accepted as torn, not
// to be written until recovery ends: the caller checks the statuses on it
// against the WAL first (TornPages), and a page rewritten before that, with
// a valid checksum, would pass every later Open unchecked. A page held is
// written once EndRecovery is called, by the next eviction or Checkpoint;
// an Open that fails its check leaves it on disk as it found it.
func (c *CLOG) heldTorn(pageno uint64) bool {
	if !c.recovering.Load() {
		return false
	}
	c.tornMu.Lock()
	defer c.tornMu.Unlock()
	_, ok := c.torn[pageno]
	return ok
}

// EndRecovery ends the leniency of Options.Recovery: from now on every page
// that fails its checksum is an ErrCorrupt error. Pages already rebuilt
// stay dirty and are rewritten by the next Checkpoint. Safe to call
// concurrently with other methods.
func (c *CLOG) EndRecovery() { c.recovering.Store(false) }

// Abandon closes every segment file without writing any page: for an
// Open of the database that failed, which must leave the directory as it
// found it (what recovery changed is redone by the next Open). Later calls,
// Close's included, return ErrClosed.
func (c *CLOG) Abandon() error {
	if c.closed.Swap(true) {
		return ErrClosed
	}
	return c.files.closeAll()
}

// Close checkpoints and then closes every segment file. The CLOG must not be
// used concurrently with or after Close; later calls return ErrClosed. The
// files are closed even when the checkpoint fails, whose error is returned.
func (c *CLOG) Close() error {
	if c.closed.Load() {
		return ErrClosed
	}
	err := c.checkpoint()
	c.closed.Store(true)
	if cerr := c.files.closeAll(); err == nil {
		err = cerr
	}
	return err
}

// Buffers returns the number of buffer slots, Options.Buffers as Open
// bounded and rounded it. Safe for concurrent use.
func (c *CLOG) Buffers() int { return c.opts.Buffers }

// Stats returns a snapshot of the counters. Each field is read atomically;
// the fields are not read at one instant.
func (c *CLOG) Stats() Stats {
	return Stats{
		Lookups:     c.stats.lookups.Load(),
		Hits:        c.stats.hits.Load(),
		Misses:      c.stats.misses.Load(),
		PageReads:   c.stats.pageReads.Load(),
		PageWrites:  c.stats.pageWrites.Load(),
		PagesZeroed: c.stats.pagesZeroed.Load(),
		FileSyncs:   c.stats.fileSyncs.Load(),
		IOWaits:     c.stats.ioWaits.Load(),

		LockWaits:     c.stats.lockWaits.Load(),
		LockWaitNanos: c.stats.lockWaitNanos.Load(),
		GroupUpdates:  c.stats.groupUpdates.Load(),
		GroupMembers:  c.stats.groupMembers.Load(),

		Truncations:     c.stats.truncations.Load(),
		SegmentsRemoved: c.stats.segmentsRemoved.Load(),
	}
}

// failure returns the sticky I/O error, if any.
func (c *CLOG) failure() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records err as the sticky I/O error (the first one wins) and returns
// the recorded error.
func (c *CLOG) fail(err error) error {
	c.failed.CompareAndSwap(nil, &err)
	return c.failure()
}

// lock takes b's lock exclusively, counting a wait when it is taken.
func (c *CLOG) lock(b *bank) {
	if !b.mu.TryLock() {
		start := time.Now()
		b.mu.Lock()
		c.noteWait(start)
	}
}

// rlock takes b's lock shared, counting a wait when it is held exclusively.
func (c *CLOG) rlock(b *bank) {
	if !b.mu.TryRLock() {
		start := time.Now()
		b.mu.RLock()
		c.noteWait(start)
	}
}

// noteWait counts one lock wait that began at start.
func (c *CLOG) noteWait(start time.Time) {
	c.stats.lockWaits.Add(1)
	c.stats.lockWaitNanos.Add(uint64(time.Since(start)))
}
