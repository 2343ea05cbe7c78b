package wal

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mvkv/vfs"
)

// FlusherPolicy names how concurrent Flush calls share write+sync rounds.
type FlusherPolicy string

const (
	// FlusherSerial is PostgreSQL's XLogFlush scheme: one write+sync at a
	// time; whoever finds its LSN unflushed becomes the leader and flushes
	// everything inserted so far, the rest wait and find themselves flushed.
	FlusherSerial FlusherPolicy = "serial"
	// FlusherNone gives every Flush call its own write+sync round, one at a
	// time, never sharing one: the baseline group commit is measured against.
	FlusherNone FlusherPolicy = "none"
	// FlusherPipelined lets the next round's write and sync start while
	// earlier rounds' syncs are still outstanding (up to
	// Options.PipelineDepth of them), so a commit that just missed a sync
	// does not wait for it to finish before its own can start. Syncs retire
	// in LSN order: the flushed LSN only advances past a round once it and
	// every earlier round have synced.
	FlusherPipelined FlusherPolicy = "pipelined"
)

// DefaultFlusher is the policy an Options.Flusher of "" selects, and the
// engine's default too: pipelined runs one sync at a time unless
// overlapping them commits faster (see FlusherPipelined and the package
// documentation), so it costs nothing where a device serializes syncs.
const DefaultFlusher = FlusherPipelined

// Bounds of the commit delay knobs, PostgreSQL's: commit_delay is at most
// MaxCommitDelay microseconds, commit_siblings at most MaxCommitSiblings.
const (
	MaxCommitDelay    = 100000
	MaxCommitSiblings = 1000
)

// adaptiveDelay is the commit delay the Writer stores for
// Options.AdaptiveCommitDelay.
const adaptiveDelay = -1

// DefaultPipelineDepth is the default Options.PipelineDepth. On a rotating
// disk every sync issued within one rotation completes at the same
// boundary, so a slot freed there is of no use to a commit that finds them
// all taken before it: it waits for the boundary, and its sync for the next
// one. With 48 committers and no commit_delay a rotation sees up to about
// 20 rounds (groups of two or three), which 16 slots cut short; 64 covers
// them with room to spare, and a device that serializes syncs is kept to
// one at a time whatever the depth.
const DefaultPipelineDepth = 64

// Options configure a Writer. The zero value gives the defaults. Options are
// copied by OpenWriter; CommitDelay and CommitSiblings can be changed later
// with SetCommitDelay and SetCommitSiblings.
type Options struct {
	// SegmentSize is the size of every segment file in bytes: a power of
	// two in [1 MiB, 1 GiB]; 0 means 16 MiB. It must match the existing
	// segments.
	SegmentSize int64
	// Flusher is the group-commit policy; "" means DefaultFlusher.
	Flusher FlusherPolicy
	// PipelineDepth is, for FlusherPipelined, the most syncs outstanding at
	// once (1..1024); 0 means DefaultPipelineDepth. Other policies ignore it.
	PipelineDepth int
	// CommitDelay is PostgreSQL's commit_delay in microseconds (0 to
	// MaxCommitDelay): how long a flush leader waits for more commits to
	// join its round.
	CommitDelay int
	// AdaptiveCommitDelay replaces CommitDelay by the adaptive delay: the
	// flush leader waits for the other active transactions to reach their
	// commit, for at most half the recent average sync latency, and not at
	// all when it is the only active transaction. See the package
	// documentation.
	AdaptiveCommitDelay bool
	// CommitSiblings is PostgreSQL's commit_siblings: the delay applies only
	// when at least this many other transactions are active. 0 means 5 (use
	// SetCommitSiblings(0) to make the delay unconditional).
	CommitSiblings int
	// ActiveTransactions returns how many transactions are running now,
	// counting the committing one (it is still running while it waits for
	// its commit record to be flushed). nil counts 0. It may be called on
	// every flush round, so it must be cheap and must not call the Writer.
	ActiveTransactions func() int
	// WALWriterDelay is PostgreSQL's wal_writer_delay: how often a
	// background goroutine flushes whatever has been inserted (it makes
	// asynchronous commits durable). 0 means 200ms.
	WALWriterDelay time.Duration
	// Logger receives background errors (segment preparation, WAL writer)
	// and, from OpenWriter, a line for each segment past the end and
	// each leftover temporary segment file it removes. nil discards them.
	Logger *slog.Logger
	// OnSegmentSwitch, if not nil, is called each time an insert moves to
	// a new segment, with the WAL position the new segment starts at; the
	// Writer's insertion lock is held, so it must return at once and must
	// not call the Writer (a database wakes its checkpointer with it, as
	// PostgreSQL's XLogWrite requests a checkpoint when the segments since
	// the last one reach max_wal_size).
	OnSegmentSwitch func(seg LSN)
}

func (o *Options) normalize() error {
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if !validSegmentSize(o.SegmentSize) {
		return fmt.Errorf("wal: segment size %d is not a power of two in [%d, %d]", o.SegmentSize, MinSegmentSize, MaxSegmentSize)
	}
	switch o.Flusher {
	case "":
		o.Flusher = DefaultFlusher
	case FlusherSerial, FlusherNone, FlusherPipelined:
	default:
		return fmt.Errorf("wal: unknown flusher policy %q", o.Flusher)
	}
	if o.PipelineDepth == 0 {
		o.PipelineDepth = DefaultPipelineDepth
	}
	if o.PipelineDepth < 1 || o.PipelineDepth > 1024 {
		return fmt.Errorf("wal: pipeline depth %d outside 1..1024", o.PipelineDepth)
	}
	if o.CommitDelay < 0 || o.CommitDelay > MaxCommitDelay {
		return fmt.Errorf("wal: commit delay %d µs outside 0..%d", o.CommitDelay, MaxCommitDelay)
	}
	if o.CommitSiblings < 0 || o.CommitSiblings > MaxCommitSiblings {
		return fmt.Errorf("wal: commit siblings %d outside 0..%d", o.CommitSiblings, MaxCommitSiblings)
	}
	if o.CommitSiblings == 0 {
		o.CommitSiblings = 5
	}
	if o.WALWriterDelay < 0 {
		return fmt.Errorf("wal: negative WAL writer delay %v", o.WALWriterDelay)
	}
	if o.WALWriterDelay == 0 {
		o.WALWriterDelay = 200 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// extent is a run of inserted but unwritten log bytes inside one segment.
type extent struct {
	seg   LSN // start LSN of the segment
	start LSN // LSN of buf[0]
	buf   []byte
}

type failure struct{ err error }

// syncReq is one outstanding sync of the pipelined flusher.
type syncReq struct {
	target  LSN           // everything below was written before the sync was issued
	done    bool          // guarded by Writer.fmu
	err     error         // guarded by Writer.fmu
	retired chan struct{} // closed when the sync leaves the in-flight queue
}

// Writer appends records to the log and makes them durable with group
// commit.
//
// Insertion and flushing are separate, as in PostgreSQL. Insert reserves
// the record's LSN range and copies the framed record into memory under one
// lock; it does no I/O. Flush(upTo) returns once a sync that covered upTo
// has completed. Options.Flusher decides how concurrent Flush calls share
// write+sync rounds:
//
//   - FlusherSerial follows XLogFlush: one round at a time. A caller whose
//     LSN is not yet durable takes the flusher role, or waits until its
//     holder lets it go and checks again (LWLockAcquireOrWait on
//     WALWriteLock). The holder waits commit_delay when enough siblings are
//     active, writes everything inserted so far, fdatasyncs each segment
//     it touched, oldest first, and wakes the waiters. A commit that
//     arrives during a sync waits for it and then for its own.
//   - FlusherPipelined lets the next round start while earlier syncs are
//     outstanding. One caller at a time takes the writer role (so writes
//     stay in LSN order), waits commit_delay the same way, writes
//     everything inserted so far, queues a sync for that end and gives the
//     role up before it fdatasyncs. Syncs retire in LSN order, and only a
//     retired sync moves the durable LSN, so a failed sync is never
//     skipped. At most Options.PipelineDepth syncs are outstanding, and
//     only one while the Writer measures that overlapping does not make
//     commits durable faster on this device and load (see the package
//     documentation). A round that reaches a new segment first waits for
//     the outstanding syncs.
//   - FlusherNone gives every Flush its own round, for comparison.
//
// Under every policy a waiter is released only by a sync that covered its
// own LSN, and a round covers at least the LSN of the caller that runs it,
// since the end it writes to is read after that record was inserted.
// Syncing the old segment before writing into the next keeps the crash
// contract: a commit in a new segment is never acknowledged before the
// previous segment is durable. A write or fdatasync failure is sticky
// (ErrSyncFailed).
//
// The next segment is prepared by a background goroutine as soon as the
// flusher opens a segment, so a switch normally only opens a ready file. A
// second goroutine, the WAL writer, flushes every Options.WALWriterDelay.
//
// All methods are safe for concurrent use.
type Writer struct {
	fs         vfs.FS
	dir        string
	segSize    int64
	tag        uint16 // the log's identifier, written in every segment it makes
	maxPayload int
	policy     FlusherPolicy
	depth      int // pipelined: most syncs in flight
	logger     *slog.Logger
	onSwitch   func(seg LSN) // Options.OnSegmentSwitch
	activeTxns func() int
	now        func() time.Time    // injected clock, for the commit_delay wait and the pipelined flusher's commit-rate windows
	sleep      func(time.Duration) // injected sleep, for delays of 1ms and more

	commitDelay    atomic.Int64 // microseconds
	commitSiblings atomic.Int64

	removed []string // segment files past the end OpenWriter removed, oldest first; fixed at open

	mu      sync.Mutex // the insertion lock
	pos     LSN        // guarded by mu: end of the last inserted record
	pending []extent   // guarded by mu: inserted, not yet handed to a flusher
	spare   [][]byte   // guarded by mu: emptied extent buffers for reuse
	closing bool       // guarded by mu: Close has begun; inserts refused
	takenTo LSN        // guarded by mu: end of what the last round took from pending

	// uncovered counts the commit Flush calls in progress whose records no
	// round has taken yet; written under mu, read by the commit delay.
	uncovered atomic.Int64

	openEnd   LSN           // the end OpenWriter was given; read-only
	insertLSN atomic.Uint64 // pos, for readers that do not take mu
	flushed   atomic.Uint64 // everything below is durable
	failed    atomic.Pointer[failure]

	fmu      sync.Mutex // guards the fields below up to closed; fcond's and wcond's lock
	fcond    sync.Cond  // serial: the flusher role was released
	wcond    sync.Cond  // pipelined: the writer role was released or a sync retired
	flushing bool       // guarded by fmu: serial: someone holds the flusher role
	writing  bool       // guarded by fmu: pipelined: someone holds the writer role
	inflight []*syncReq // guarded by fmu: pipelined: issued syncs, oldest first
	issued   LSN        // guarded by fmu: pipelined: end of what was written and handed to a sync
	closed   bool       // guarded by fmu: files are closed
	waiters  atomic.Int64

	syncEWMA atomic.Int64 // moving average of sync latency, nanoseconds (commit_delay=auto)

	// Pipelined: whether to overlap syncs (see syncSlotsLocked); guarded
	// by fmu.
	overlap syncOverlap

	// Owned by the holder of the flusher role (pipelined: the writer role,
	// with no sync in flight for a switch; or Close once closed).
	cur    vfs.File
	curSeg LSN

	curSegA atomic.Uint64 // curSeg, for the preparer and RemoveSegmentsBefore; stored after the switch, under no lock

	// prepMu is held by whatever creates, renames or removes a segment
	// file while the Writer runs: the preparer, the flusher's switch
	// when it creates the next segment inline, and RemoveSegmentsBefore
	// for each removal. Each decides under it, from curSegA, whether the
	// segment is one it may touch (the preparer only segments after the
	// open one, the removal only segments before it), so none of them
	// acts on a decision another has made stale.
	prepMu  sync.Mutex
	prepReq chan LSN
	// prepWait, if not nil, is called when RemoveSegmentsBefore finds
	// prepMu held and is about to wait for it; tests set it before the
	// Writer is used concurrently.
	prepWait func()
	stop     chan struct{}
	bg       sync.WaitGroup

	c counters
}

// OpenWriter opens the log in dir for appending at end, the value of
// Reader.End after reading the log to io.EOF (0, or FirstLSN, for a new
// log in an empty or missing directory).
//
// Before accepting records it makes the log past end durably invalid: it
// removes leftover temporary files (whatever their size, logging each) and
// every segment after the one end lies in (fsyncing the directory) but the
// next one when it is prepared and still holds only zeros, and zero-fills
// the rest of that segment (fsyncing it), so no torn or stale record past
// end can ever resurface behind new ones. It returns ErrCorrupt when end's
// segment has a bad header or is longer than the segment size.
func OpenWriter(fsys vfs.FS, dir string, end LSN, opts Options) (*Writer, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	segSize := opts.SegmentSize
	// The directories created for the log are made durable like any
	// other directory change (each in the one it was created in): a
	// crash could otherwise take the directory away, and every segment
	// in it with it.
	var created []string
	for d := path.Clean(dir); ; d = path.Dir(d) {
		if _, err := fsys.ReadDir(d); !errors.Is(err, fs.ErrNotExist) || d == path.Dir(d) {
			break
		}
		created = append(created, d)
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("wal: %w", err) // the path error names the directory
	}
	for _, d := range created {
		if err := fsys.SyncDir(path.Dir(d)); err != nil {
			return nil, fmt.Errorf("wal: fsync directory %s: %w", path.Dir(d), err)
		}
	}
	segs, temps, err := listSegments(fsys, dir)
	if err != nil {
		return nil, err
	}
	var tag uint16
	for _, t := range temps {
		// A segment's preparation that a crash (or a failure this
		// process could not clean up) interrupted: whatever its size,
		// one left from another segment size or cut short, it never
		// held a record, and it is never renamed into place (each
		// preparation writes its temporary file anew). Removed, and
		// said.
		name := path.Join(dir, t)
		size, serr := fsys.Stat(name)
		if err := fsys.Remove(name); err != nil {
			return nil, withPath("remove", name, err)
		}
		if serr != nil {
			size = -1
		}
		opts.Logger.Info("wal: removed a leftover temporary segment file, the rest of an interrupted preparation", "file", name, "bytes", size, "segment_size", segSize)
	}
	if len(segs) == 0 {
		if end != 0 && end != FirstLSN(segSize) {
			return nil, fmt.Errorf("wal: no segments in %s to continue at %s", dir, end)
		}
		end = FirstLSN(segSize)
		tag = newLogTag()
		if err := createSegment(fsys, dir, LSN(segSize), segSize, 0, tag, nil); err != nil {
			return nil, err
		}
		segs = []LSN{LSN(segSize)}
	} else if end == 0 {
		return nil, fmt.Errorf("wal: end LSN 0 given for a non-empty log in %s", dir)
	}
	if end%alignment != 0 {
		return nil, fmt.Errorf("wal: end %s is not %d-byte aligned", end, alignment)
	}
	// end on a segment boundary means the previous segment is full.
	cur := LSN(uint64(end-1) &^ uint64(segSize-1))
	if end-cur < segHeaderSize {
		return nil, fmt.Errorf("wal: end %s lies inside a segment header", end)
	}
	name := path.Join(dir, segmentName(cur))
	f, err := fsys.Open(name)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment for end %s: %w", end, err)
	}
	h, err := readSegHeader(f, cur, segSize)
	if err != nil {
		f.Close()
		return nil, err
	}
	// The log goes on in a file of the segment size only. A shorter one
	// (a log that ended at zeros before the cut) is zero-filled to the
	// size below; bytes past the size were appended by something other
	// than the Writer, which no crash does, and are not cut off here
	// unasked.
	if n, err := f.Size(); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: size of %s: %w", name, err)
	} else if n > segSize {
		f.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, longer than the %d-byte segment size (no crash makes a segment of another size): the log, which ends at %s in it, does not go on in it; with the database closed, cut the file to %d bytes if what lies past them is known to be no part of the log",
			ErrCorrupt, name, n, segSize, end, segSize)
	}
	next := cur + LSN(segSize)
	nextTag, keepNext := preparedEmpty(fsys, dir, next, segSize)
	if tag == 0 {
		// The segments the log continues in carry its identifier, or, if
		// an older build made them, none; then the log gets one now:
		// the one an earlier open drew and gave the prepared next
		// segment, if there is one, so that the log keeps one
		// identifier across restarts.
		if tag = h.tag; tag == 0 {
			if tag = nextTag; tag == 0 {
				tag = newLogTag()
			}
		}
	}
	// A prepared next segment of another identifier is not this log's
	// continuation: it goes with the others past the end.
	keepNext = keepNext && (nextTag == 0 || nextTag == tag)
	// Later segments go newest first, each removal made durable before the
	// next, so that a crash in the middle never leaves a gap: a segment
	// missing below one that is present is damage (Reader).
	removed := false
	var removedNames []string // newest first
	for i := len(segs) - 1; i >= 0 && segs[i] > cur; i-- {
		if segs[i] == next && keepNext {
			continue // the next segment, prepared and still empty: kept as it is
		}
		if err := fsys.Remove(path.Join(dir, segmentName(segs[i]))); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: remove stale segment: %w", err)
		}
		if opts.Logger != nil {
			// Whatever it held was never durable log: written after
			// the end recovery found (a crash cut the log before it),
			// or not this log's at all. Said, not done silently.
			opts.Logger.Info("wal: removed a segment past the end of the log", "segment", segmentName(segs[i]), "end", end)
		}
		removedNames = append(removedNames, segmentName(segs[i]))
		if err := fsys.SyncDir(dir); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: fsync directory %s: %w", dir, err)
		}
		removed = true
	}
	if !removed {
		// Also when nothing was removed: the segments kept, the one the
		// log ends in and a prepared next one, may have names an earlier
		// process never made durable (its directory fsync failed), and
		// records will be acknowledged in them.
		if err := fsys.SyncDir(dir); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: fsync directory %s: %w", dir, err)
		}
	}
	if err := zeroTail(f, int64(end-cur), segSize); err != nil {
		f.Close()
		return nil, err
	}

	slices.Reverse(removedNames)
	w := &Writer{
		fs:         fsys,
		dir:        dir,
		segSize:    segSize,
		tag:        tag,
		maxPayload: MaxPayload(segSize),
		policy:     opts.Flusher,
		depth:      opts.PipelineDepth,
		logger:     opts.Logger,
		onSwitch:   opts.OnSegmentSwitch,
		activeTxns: opts.ActiveTransactions,
		now:        time.Now,
		sleep:      time.Sleep,
		pos:        end,
		openEnd:    end,
		removed:    removedNames,
		cur:        f,
		curSeg:     cur,
		prepReq:    make(chan LSN, 1),
		stop:       make(chan struct{}),
	}
	w.fcond.L = &w.fmu
	w.wcond.L = &w.fmu
	w.overlap = newSyncOverlap()
	w.issued = end
	w.commitDelay.Store(int64(opts.CommitDelay))
	if opts.AdaptiveCommitDelay {
		w.commitDelay.Store(adaptiveDelay)
	}
	w.commitSiblings.Store(int64(opts.CommitSiblings))
	w.insertLSN.Store(uint64(end))
	w.flushed.Store(uint64(end))
	w.curSegA.Store(uint64(cur))
	w.bg.Add(2)
	go w.preparer()
	go w.walWriter(opts.WALWriterDelay)
	w.requestPrepare(cur + LSN(segSize))
	return w, nil
}

// zeroTail overwrites with zeros every chunk of f from off to size that is
// not already all zeros, then fsyncs f if it wrote anything.
func zeroTail(f vfs.File, off, size int64) error {
	buf := make([]byte, scanChunk)
	wrote := false
	for off < size {
		n := min(int64(scanChunk), size-off)
		got, err := f.ReadAt(buf[:n], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return withPathAt("read", f.Name(), off, err)
		}
		dirty := int64(got) < n
		for _, c := range buf[:got] {
			if c != 0 {
				dirty = true
				break
			}
		}
		if dirty {
			if _, err := f.WriteAt(zeroBlock[:n], off); err != nil {
				return withPathAt("zero", f.Name(), off, err)
			}
			wrote = true
		}
		off += n
	}
	if wrote {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("%w: fsync %s: %w", ErrSyncFailed, f.Name(), err)
		}
	}
	return nil
}

// Insert appends a record with flags 0; see InsertFlags.
func (w *Writer) Insert(typ RecordType, xid uint64, data []byte) (start, end LSN, err error) {
	return w.InsertFlags(typ, 0, xid, data)
}

// InsertFlags appends a record of type typ (16..255) for transaction xid,
// with flags, a byte the package stores and returns in Record.Flags without
// giving it a meaning (as PostgreSQL's xl_info is the resource manager's),
// and returns its LSN range: start is the record's LSN, end the LSN to Flush up
// to for it to be durable. data is copied. It does no I/O. It returns
// an error for a type below MinUserRecordType (reserved to the package),
// ErrRecordTooLarge for a payload above MaxPayload(SegmentSize), the
// sticky ErrSyncFailed after a failed flush, and ErrClosed after Close.
func (w *Writer) InsertFlags(typ RecordType, flags uint8, xid uint64, data []byte) (start, end LSN, err error) {
	if typ < MinUserRecordType {
		return 0, 0, fmt.Errorf("wal: record type %d is reserved", typ)
	}
	if len(data) > w.maxPayload {
		return 0, 0, fmt.Errorf("%w: %d bytes, limit %d", ErrRecordTooLarge, len(data), w.maxPayload)
	}
	pcrc := payloadCRC(data)
	size := recordSize(len(data))

	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.failed.Load(); f != nil {
		return 0, 0, f.err
	}
	if w.closing {
		return 0, 0, ErrClosed
	}
	seg := w.segOf(w.pos)
	off := int64(w.pos - seg)
	if off+size > w.segSize {
		// A record never spans segments. Mark the early end explicitly
		// when a header fits; otherwise the reader treats the remainder
		// as an implicit switch.
		if w.segSize-off >= recHeaderSize {
			w.appendLocked(seg, w.pos, typeSwitch, 0, 0, nil, payloadCRC(nil))
		}
		seg += LSN(w.segSize)
		w.pos = seg + segHeaderSize
		w.c.switches.Add(1)
		if w.onSwitch != nil {
			w.onSwitch(seg)
		}
	}
	start = w.pos
	w.appendLocked(seg, start, typ, flags, xid, data, pcrc)
	w.pos = start + LSN(size)
	w.insertLSN.Store(uint64(w.pos))
	w.c.records.Add(1)
	w.c.bytes.Add(uint64(size))
	return start, w.pos, nil
}

// segOf returns the start of the segment an insert position belongs to; a
// position on a boundary belongs to the full segment before it.
func (w *Writer) segOf(pos LSN) LSN {
	return LSN(uint64(pos-1) &^ uint64(w.segSize-1))
}

// appendLocked frames a record at lsn into the pending extent of seg.
func (w *Writer) appendLocked(seg, lsn LSN, typ RecordType, flags uint8, xid uint64, data []byte, pcrc uint32) {
	var e *extent
	if n := len(w.pending); n > 0 {
		last := &w.pending[n-1]
		if last.seg == seg && last.start+LSN(len(last.buf)) == lsn {
			e = last
		}
	}
	if e == nil {
		var buf []byte
		if n := len(w.spare); n > 0 {
			buf, w.spare = w.spare[n-1], w.spare[:n-1]
		}
		w.pending = append(w.pending, extent{seg: seg, start: lsn, buf: buf})
		e = &w.pending[len(w.pending)-1]
	}
	size := int(recordSize(len(data)))
	if typ == typeSwitch {
		size = recHeaderSize
	}
	old := len(e.buf)
	e.buf = append(e.buf, make([]byte, size)...)
	rec := e.buf[old:]
	encodeRecHeader(rec, lsn, typ, flags, xid, len(data), pcrc, LSN(w.flushed.Load()))
	n := copy(rec[recHeaderSize:], data)
	clear(rec[recHeaderSize+n:])
}

// Flush returns once every record ending at or below upTo is durable. It
// returns an error wrapping ErrSyncFailed if a write or fsync failed (now or
// before), ErrClosed if the Writer was closed first, and an error if upTo
// lies beyond InsertLSN.
func (w *Writer) Flush(upTo LSN) error {
	w.c.flushRequests.Add(1)
	t0 := time.Now()
	if LSN(w.flushed.Load()) < upTo {
		w.mu.Lock()
		if upTo > w.takenTo {
			w.uncovered.Add(1)
		}
		w.mu.Unlock()
	}
	err := w.flush(upTo, true)
	w.c.commitWaitNanos.Add(uint64(time.Since(t0)))
	if err == nil {
		w.c.rounds.commit(upTo)
	}
	return err
}

// FlushData returns once every record ending at or below upTo is durable,
// for a caller that is not committing: a data page about to be written
// (WAL before data), a checkpoint, a CLOG truncation. It never sleeps
// commit_delay and is left out of the commit statistics (commit wait time,
// commits per sync), which would otherwise count page writes as commits.
// Errors as Flush.
func (w *Writer) FlushData(upTo LSN) error {
	w.c.flushRequests.Add(1)
	return w.flush(upTo, false)
}

// FlushAll flushes everything inserted so far, as Flush(InsertLSN()) does.
// Errors as Flush.
func (w *Writer) FlushAll() error {
	return w.Flush(w.InsertLSN())
}

// flush implements Flush; commit says whether the caller is a committer
// (counted, and subject to commit_delay) rather than the WAL writer.
func (w *Writer) flush(upTo LSN, commit bool) error {
	if f := w.failed.Load(); f != nil {
		return f.err
	}
	if w.policy != FlusherNone && LSN(w.flushed.Load()) >= upTo {
		return nil
	}
	if ins := w.InsertLSN(); upTo > ins {
		return fmt.Errorf("wal: flush request %s is beyond the insert position %s", upTo, ins)
	}
	if commit {
		w.c.flushWaits.Add(1)
	}
	if w.policy == FlusherPipelined {
		return w.flushPipelined(upTo, commit)
	}
	waited := false
	w.fmu.Lock()
	for {
		if f := w.failed.Load(); f != nil {
			w.fmu.Unlock()
			return f.err
		}
		if w.policy != FlusherNone && LSN(w.flushed.Load()) >= upTo {
			w.fmu.Unlock()
			if waited && commit {
				w.c.grouped.Add(1)
			}
			return nil
		}
		if w.closed {
			w.fmu.Unlock()
			return ErrClosed
		}
		if !w.flushing {
			w.flushing = true
			break
		}
		waited = true
		w.waiters.Add(1)
		w.fcond.Wait()
		w.waiters.Add(-1)
	}
	w.fmu.Unlock()

	err := w.lead(commit)

	w.fmu.Lock()
	w.flushing = false
	w.fcond.Broadcast()
	w.fmu.Unlock()
	return err
}

// lead performs one write+sync round; the caller holds the flusher role.
func (w *Writer) lead(commit bool) error {
	if commit {
		w.commitDelayWait()
	}
	exts, target := w.take()

	w.c.flushes.Add(1)
	err := w.writeAndSync(exts)
	if err != nil {
		err = w.fail(err)
	} else {
		w.c.rounds.retired(target)
		w.flushed.Store(uint64(target))
	}
	w.recycle(exts)
	return err
}

// take hands every pending extent, and the insert position they end at, to
// the caller's round.
func (w *Writer) take() ([]extent, LSN) {
	w.mu.Lock()
	defer w.mu.Unlock()
	exts := w.pending
	w.pending = nil
	w.takenTo = w.pos
	w.uncovered.Store(0)
	return exts, w.pos
}

// recycle keeps written extent buffers for reuse by Insert.
func (w *Writer) recycle(exts []extent) {
	w.mu.Lock()
	for _, e := range exts {
		if cap(e.buf) <= 4*MaxRecordSize && len(w.spare) < 8 {
			w.spare = append(w.spare, e.buf[:0])
		}
	}
	w.mu.Unlock()
}

// flushPipelined implements flush for FlusherPipelined:
//
//	loop:
//	    if flushed >= upTo: return
//	    if upTo > issued and nobody writes and fewer than depth syncs are out:
//	        take the writer role; wait commit_delay (committers only)
//	        take every pending extent and the insert position P
//	        write them; append a sync for P to the in-flight queue; issued = P
//	        give up the writer role (the next group may now be written)
//	        fdatasync; mark it done
//	        retire done syncs from the queue head: flushed = their P
//	    else if upTo > issued: wait for the writer role or a slot
//	    else: wait for the retirement of the first sync whose P >= upTo
//
// A sync covers what was written before it was issued, so a round's target
// is durable when its own sync is done; but after a failed fdatasync the
// kernel may have dropped the failed round's pages, so a later sync's
// success proves nothing about them: flushed only moves past a round when
// it and every earlier one are done, and a failure is sticky. A round that
// crosses into a new segment first waits for every outstanding sync (they
// are all of the old segment) and then writes and syncs segment by segment
// as the serial flusher does, which keeps rule 9.
//
// A committer whose record is already handed to a sync waits on that
// sync's own channel, not on a condition shared by all: on a rotating disk
// every sync issued within a rotation completes at the same boundary, and
// if each retirement woke every waiter, n syncs and n waiters would make n²
// wake-ups at once, enough on two cores to push the next round past the
// following boundary.
func (w *Writer) flushPipelined(upTo LSN, commit bool) error {
	led := false
	w.fmu.Lock()
	if commit {
		w.overlap.enter(w.now)
	}
	for {
		if f := w.failed.Load(); f != nil {
			if commit {
				w.overlap.leave(w.now, false)
			}
			w.fmu.Unlock()
			return f.err
		}
		if LSN(w.flushed.Load()) >= upTo {
			if commit {
				w.overlap.leave(w.now, true)
			}
			w.fmu.Unlock()
			if !led && commit {
				w.c.grouped.Add(1)
			}
			return nil
		}
		if w.closed {
			if commit {
				w.overlap.leave(w.now, false)
			}
			w.fmu.Unlock()
			return ErrClosed
		}
		if upTo <= w.issued {
			w.waiters.Add(1)
			if r := w.coveringLocked(upTo); r != nil {
				w.fmu.Unlock()
				<-r.retired
				w.fmu.Lock()
			} else {
				// Only while a failure is being recorded: every LSN
				// below issued is flushed or has its sync in flight.
				w.wcond.Wait()
			}
			w.waiters.Add(-1)
			continue
		}
		if w.writing || len(w.inflight) >= w.syncSlotsLocked() {
			w.waiters.Add(1)
			w.wcond.Wait()
			w.waiters.Add(-1)
			continue
		}
		w.writing = true
		led = true
		w.fmu.Unlock()
		err := w.issue(commit)
		w.fmu.Lock()
		if err != nil {
			if commit {
				w.overlap.leave(w.now, false)
			}
			w.fmu.Unlock()
			return err
		}
	}
}

// coveringLocked returns the oldest in-flight sync whose target is at least
// upTo, or nil.
func (w *Writer) coveringLocked(upTo LSN) *syncReq {
	i, _ := slices.BinarySearchFunc(w.inflight, upTo, func(r *syncReq, l LSN) int { return cmp.Compare(r.target, l) })
	if i == len(w.inflight) {
		return nil
	}
	return w.inflight[i]
}

// syncSlotsLocked returns how many syncs may be outstanding at once. A
// second sync issued while one is outstanding helps on a device that works
// on several at once (a drive with a command queue, the rotating-disk
// model); where it does not, it only splits the next group in two and
// costs another round, and one sync at a time (the serial scheme, with its
// larger groups) commits faster. syncOverlap measures both ways and keeps
// the faster.
func (w *Writer) syncSlotsLocked() int { return w.overlap.slots(w.depth) }

// issue performs one pipelined round; the caller holds the writer role,
// which issue gives up once the round's sync is issued.
func (w *Writer) issue(commit bool) error {
	if commit {
		w.commitDelayWait()
	}
	exts, target := w.take()
	w.c.flushes.Add(1)
	defer w.recycle(exts)

	if len(exts) > 0 && exts[len(exts)-1].seg != w.curSeg {
		w.fmu.Lock()
		for len(w.inflight) > 0 {
			w.wcond.Wait()
		}
		w.fmu.Unlock()
		err := w.writeAndSync(exts)
		w.fmu.Lock()
		if err != nil {
			err = w.fail(err)
		} else if w.failed.Load() == nil {
			w.c.rounds.retired(target)
			w.flushed.Store(uint64(target))
		}
		w.issued = target
		w.writing = false
		w.wcond.Broadcast()
		w.fmu.Unlock()
		return err
	}

	f := w.cur
	for _, e := range exts {
		off := int64(e.start - e.seg)
		if _, err := f.WriteAt(e.buf, off); err != nil {
			err = w.fail(fmt.Errorf("write %s at offset %d: %w", f.Name(), off, err))
			w.fmu.Lock()
			w.writing = false
			w.wcond.Broadcast()
			w.fmu.Unlock()
			return err
		}
		w.c.writes.Add(1)
		w.c.writtenBytes.Add(uint64(len(e.buf)))
	}
	req := &syncReq{target: target, retired: make(chan struct{})}
	w.fmu.Lock()
	w.overlap.issued(w.now())
	w.inflight = append(w.inflight, req)
	w.issued = target
	w.writing = false
	// Wake the committers waiting for the writer role only if one of them
	// can take it now. With no slot free they could only go back to sleep
	// (on this sync's channel, or on wcond again), and the retirement
	// below wakes them anyway: one wake-up per waiter per round fewer,
	// which one sync at a time on two cores notices.
	if len(w.inflight) < w.syncSlotsLocked() {
		w.wcond.Broadcast()
	}
	w.fmu.Unlock()

	serr := w.sync(f)

	w.fmu.Lock()
	defer w.fmu.Unlock()
	req.done, req.err = true, serr
	for len(w.inflight) > 0 && w.inflight[0].done {
		r := w.inflight[0]
		w.inflight[0] = nil
		w.inflight = w.inflight[1:]
		if r.err != nil {
			w.fail(r.err)
		} else if w.failed.Load() == nil {
			w.c.rounds.retired(r.target)
			w.flushed.Store(uint64(r.target))
		}
		close(r.retired)
	}
	w.wcond.Broadcast()
	if serr != nil {
		return w.fail(serr)
	}
	return nil
}

// fail records the first write or sync failure; every later call sees it.
func (w *Writer) fail(err error) error {
	f := &failure{fmt.Errorf("%w: %w", ErrSyncFailed, err)}
	if !w.failed.CompareAndSwap(nil, f) {
		f = w.failed.Load()
	}
	return f.err
}

// commitDelayWait is PostgreSQL's commit_delay: the leader gives other
// committers a chance to insert their commit records before it writes.
// Go's timers round sleeps below about a millisecond up to about a
// millisecond, so shorter delays are waited by checking the clock between
// yields; the wait also ends as soon as every other active transaction is
// already waiting on the flusher, since nobody else could join the round.
//
// The adaptive delay never waits for a lone transaction; otherwise it waits
// until every other active transaction is waiting, or the insert position
// has not moved for a quarter of the budget, or the budget (half the recent
// average sync latency) is spent. See the package documentation.
func (w *Writer) commitDelayWait() {
	us := w.commitDelay.Load()
	if us == 0 {
		return
	}
	active := 0
	if w.activeTxns != nil {
		active = w.activeTxns()
	}
	others := int64(active - 1) // the committing transaction is still active
	if us == adaptiveDelay {
		budget := time.Duration(w.syncEWMA.Load()) / 2
		if others <= 0 || budget <= 0 {
			return
		}
		w.c.commitDelay.Add(1)
		w.waitSiblings(budget, others, budget/4)
		return
	}
	if others < w.commitSiblings.Load() {
		return
	}
	w.c.commitDelay.Add(1)
	d := time.Duration(us) * time.Microsecond
	if d >= time.Millisecond {
		w.sleep(d)
		return
	}
	w.waitSiblings(d, others, 0)
}

// waitSiblings waits up to d, checking the clock between yields, until
// the commit records of others other transactions (and the caller's own)
// are waiting for this round, or (when stall > 0) the insert position has
// not moved for stall.
func (w *Writer) waitSiblings(d time.Duration, others int64, stall time.Duration) {
	start := w.now()
	deadline := start.Add(d)
	lastPos, lastMove := w.InsertLSN(), start
	for {
		now := w.now()
		if !now.Before(deadline) {
			return
		}
		if others > 0 && w.uncovered.Load() > others {
			return
		}
		if stall > 0 {
			if p := w.InsertLSN(); p != lastPos {
				lastPos, lastMove = p, now
			} else if now.Sub(lastMove) >= stall {
				return
			}
		}
		runtime.Gosched()
	}
}

// writeAndSync writes the extents, segment by segment in LSN order, and
// fdatasyncs each segment before touching the next one.
func (w *Writer) writeAndSync(exts []extent) error {
	if len(exts) == 0 && w.policy == FlusherNone {
		return w.sync(w.cur)
	}
	for i := 0; i < len(exts); {
		seg := exts[i].seg
		f, err := w.fileFor(seg)
		if err != nil {
			return err
		}
		for ; i < len(exts) && exts[i].seg == seg; i++ {
			e := exts[i]
			off := int64(e.start - seg)
			if _, err := f.WriteAt(e.buf, off); err != nil {
				return fmt.Errorf("write %s at offset %d: %w", f.Name(), off, err)
			}
			w.c.writes.Add(1)
			w.c.writtenBytes.Add(uint64(len(e.buf)))
		}
		if err := w.sync(f); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) sync(f vfs.File) error {
	t0 := time.Now()
	err := f.Datasync()
	d := time.Since(t0)
	w.c.syncNanos.Add(uint64(d))
	w.c.syncLatency.observe(uint64(d))
	w.c.syncs.Add(1)
	// An exponentially weighted moving average with weight 1/8, as TCP's
	// smoothed round-trip time; racing updates may lose one sample.
	if old := w.syncEWMA.Load(); old == 0 {
		w.syncEWMA.Store(int64(d))
	} else {
		w.syncEWMA.Store(old + (int64(d)-old)/8)
	}
	if err != nil {
		return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
	}
	return nil
}

// fileFor returns the open file of segment seg, switching to it if needed.
// The previous segment has been synced by then.
func (w *Writer) fileFor(seg LSN) (vfs.File, error) {
	if seg == w.curSeg {
		return w.cur, nil
	}
	if seg < w.curSeg {
		return nil, fmt.Errorf("segment %s precedes the open segment %s", segmentName(seg), segmentName(w.curSeg))
	}
	w.prepMu.Lock()
	if f := w.failed.Load(); f != nil {
		// Perhaps the preparation of this very segment, whose name may
		// not survive a crash: nothing goes into it.
		w.prepMu.Unlock()
		return nil, f.err
	}
	if segmentReady(w.fs, w.dir, seg, w.segSize) {
		w.c.prepped.Add(1)
	} else {
		if err := createSegment(w.fs, w.dir, seg, w.segSize, w.durableMark(), w.tag, nil); err != nil {
			w.prepMu.Unlock()
			return nil, err
		}
		w.c.inline.Add(1)
	}
	f, err := w.fs.Open(path.Join(w.dir, segmentName(seg)))
	w.prepMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("open segment: %w", err)
	}
	if _, err := readSegHeader(f, seg, w.segSize); err != nil {
		f.Close()
		return nil, err
	}
	if err := w.cur.Close(); err != nil {
		f.Close()
		return nil, fmt.Errorf("close %s: %w", w.cur.Name(), err)
	}
	w.cur, w.curSeg = f, seg
	w.curSegA.Store(uint64(seg))
	w.requestPrepare(seg + LSN(w.segSize))
	return f, nil
}

// requestPrepare asks the preparer for segment seg, replacing any older
// request still queued.
func (w *Writer) requestPrepare(seg LSN) {
	select {
	case <-w.prepReq:
	default:
	}
	select {
	case w.prepReq <- seg:
	default:
	}
}

// preparer creates requested segments off the commit path.
func (w *Writer) preparer() {
	defer w.bg.Done()
	for {
		select {
		case <-w.stop:
			return
		case seg := <-w.prepReq:
			w.prepare(seg)
		}
	}
}

// prepare creates segment seg for a later switch, unless it is ready or
// the log has already moved into it or past it. A request can be served
// that late (the preparer waits for prepMu, and for the CPU, while the
// flusher creates the segment inline and writes on): by then a checkpoint
// may have removed the segment (RemoveSegmentsBefore), and created again
// it would stand as an empty segment below the log, which a Reader
// starting before the redo point (Verify's check of the whole log,
// waldump) reports as lost records.
func (w *Writer) prepare(seg LSN) {
	w.prepMu.Lock()
	defer w.prepMu.Unlock()
	if seg <= LSN(w.curSegA.Load()) || segmentReady(w.fs, w.dir, seg, w.segSize) {
		return
	}
	err := createSegment(w.fs, w.dir, seg, w.segSize, w.durableMark(), w.tag, w.stop)
	switch {
	case errors.Is(err, errNameNotDurable):
		// The segment stands under its final name, which a crash may
		// take away with every record written into it. A failed fsync
		// is not retried (PostgreSQL PANICs on one here): the log takes
		// no more records, set before prepMu is let go so that no
		// switch into the segment can come first.
		w.fail(err)
		w.logger.Error("wal: preparing the next segment failed; the log accepts no more records", "segment", segmentName(seg), "err", err)
	case err != nil && !errors.Is(err, errStopped):
		w.logger.Warn("wal: preparing the next segment failed; it will be created on switch", "segment", segmentName(seg), "err", err)
	}
}

// walWriter flushes everything inserted every delay, as PostgreSQL's WAL
// writer does for asynchronous commits.
func (w *Writer) walWriter(delay time.Duration) {
	defer w.bg.Done()
	t := time.NewTicker(delay)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			ins := w.InsertLSN()
			if ins <= w.FlushedLSN() || w.failed.Load() != nil {
				continue
			}
			// Nobody else may be flushing to hear of a failure, so say it
			// here; a failure is sticky, so this logs it at most once.
			if err := w.flush(ins, false); err != nil && !errors.Is(err, ErrClosed) {
				w.logger.Error("wal: background flush failed; the log accepts no more records", "err", err)
			}
		}
	}
}

// FlushedLSN returns the LSN below which everything is durable.
func (w *Writer) FlushedLSN() LSN { return LSN(w.flushed.Load()) }

// durableMark is the durable-LSN mark for a segment prepared now: the
// flushed LSN once this Writer has flushed something itself, 0 (no mark)
// before, since the log below the end OpenWriter was given may be durable
// only if the caller made it so.
func (w *Writer) durableMark() LSN {
	if f := w.FlushedLSN(); f > w.openEnd {
		return f
	}
	return 0
}

// InsertLSN returns the end of the last inserted record.
func (w *Writer) InsertLSN() LSN { return LSN(w.insertLSN.Load()) }

// SegmentSize returns the segment size in bytes.
func (w *Writer) SegmentSize() int64 { return w.segSize }

// SetCommitDelay sets commit_delay in microseconds (clamped to 0 to
// MaxCommitDelay), replacing the adaptive delay if it was on. Safe for
// concurrent use; the next flush round sees it.
func (w *Writer) SetCommitDelay(us int) {
	w.commitDelay.Store(int64(min(max(us, 0), MaxCommitDelay)))
}

// SetAdaptiveCommitDelay turns the adaptive delay on (see
// Options.AdaptiveCommitDelay); SetCommitDelay turns it off. Safe for
// concurrent use; the next flush round sees it.
func (w *Writer) SetAdaptiveCommitDelay() {
	w.commitDelay.Store(adaptiveDelay)
}

// SetCommitSiblings sets commit_siblings (clamped to 0 to
// MaxCommitSiblings). Safe for concurrent use.
func (w *Writer) SetCommitSiblings(n int) {
	w.commitSiblings.Store(int64(min(max(n, 0), MaxCommitSiblings)))
}

// Stats returns a snapshot of the counters.
func (w *Writer) Stats() Stats { return w.c.snapshot() }

// RemoveSegmentsBefore deletes the segments that end at or below lsn
// (typically the redo LSN of the last checkpoint), never the segment the
// flusher has open or any later one, oldest first, fsyncing the directory
// after each. Each removal holds the lock under which segments are
// prepared and created, and checks the open segment under it, so a
// segment being prepared or switched into, which always lies after the
// open one, is never touched. Safe for concurrent use. Errors: listing
// the directory, removing a segment or fsyncing the directory, as the file
// system reports them; segments removed before the failure stay removed,
// and later ones stay.
func (w *Writer) RemoveSegmentsBefore(lsn LSN) error {
	segs, _, err := listSegments(w.fs, w.dir)
	if err != nil {
		return err
	}
	// Oldest first, each removal made durable before the next, so that a
	// crash in the middle never leaves a gap, which a Reader takes for a
	// lost segment.
	for _, s := range segs {
		if s+LSN(w.segSize) > lsn {
			break
		}
		if more, err := w.removeSegment(s); err != nil || !more {
			return err
		}
	}
	return nil
}

// removeSegment removes segment s and fsyncs the directory, unless s is
// the open segment or a later one; it returns false then.
func (w *Writer) removeSegment(s LSN) (bool, error) {
	if !w.prepMu.TryLock() {
		if w.prepWait != nil {
			w.prepWait()
		}
		w.prepMu.Lock()
	}
	defer w.prepMu.Unlock()
	if s >= LSN(w.curSegA.Load()) {
		return false, nil
	}
	if err := w.fs.Remove(path.Join(w.dir, segmentName(s))); errors.Is(err, fs.ErrNotExist) {
		// A concurrent call removed it, and synced the directory, before
		// this one took the lock.
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("wal: remove segment: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		return false, fmt.Errorf("wal: fsync directory %s: %w", w.dir, err)
	}
	return true, nil
}

// Close flushes everything inserted, stops the background goroutines and
// closes the files. Inserts after Close return ErrClosed. It returns the
// flush error, if any (ErrSyncFailed after a failure); a second Close
// returns ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closing = true
	w.mu.Unlock()

	close(w.stop)
	w.bg.Wait()
	err := w.flush(w.InsertLSN(), false)

	w.fmu.Lock()
	for w.flushing {
		w.fcond.Wait()
	}
	for w.writing || len(w.inflight) > 0 {
		w.wcond.Wait()
	}
	w.closed = true
	w.fcond.Broadcast()
	w.wcond.Broadcast()
	w.fmu.Unlock()
	w.c.rounds.foldAll()
	if cerr := w.cur.Close(); err == nil && cerr != nil {
		err = withPath("close", w.cur.Name(), cerr)
	}
	return err
}

// RemovedAtOpen names the segment files past the end of the log that
// OpenWriter removed (file names, oldest first; nil if none): segments
// written after the end a crash left, or put in the directory by hand.
// Nothing in them was ever durable log. Each removal is also logged at
// info level. The slice must not be modified.
func (w *Writer) RemovedAtOpen() []string { return w.removed }
