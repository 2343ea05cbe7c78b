// Package verify holds the consistency checks behind the engine's
// DB.Verify, as PostgreSQL's amcheck (verify_heapam) and bbolt's Check:
// every heap page's checksum and line pointers, the heap segment files'
// sizes, every tuple header against the CLOG and the next xid, the version
// chains, the key index against a scan of the heap, the visibility map
// against the heap (and the heap against map files missing or cut), the
// control file against the WAL, and every WAL record on disk; and, as
// notes rather than problems, out-of-line value chunks that nothing names
// (space leaked, not data damaged).
//
// The checks read the database through Target, which the engine implements
// over its own state; the engine takes the locks and the checkpoint that
// make the files worth reading, and collects the problems into its report.
// This keeps the checks, a tool's code, out of the engine's API and away
// from its writers: they get read access to exactly what they check.
// Rejected: keeping them in package engine (its largest function, beside
// the code it checks, with access to everything), and a public package
// (the checks need the engine's in-memory state, which it does not export).
package verify

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/internal/rmgr"
	"mvkv/vfs"
	"mvkv/visibility"
	"mvkv/wal"
)

// Problemf records one problem found, formatted as fmt.Sprintf does.
type Problemf func(format string, args ...any)

// Target is an open database as the checks read it. Its files must have
// been checkpointed and vacuum and pruning held off for the answer to be
// exact; transactions may write beside the checks, which judge nothing
// that one unended at the start (Unended) wrote.
type Target interface {
	// Dir is the data directory, FS its file system.
	Dir() string
	FS() vfs.FS
	// NextXid is the next transaction id to be handed out.
	NextXid() uint64
	// NBlocks is the heap's size in blocks; ReadBlock reads one block
	// from disk (not from the buffer pool), checksum checked.
	NBlocks() uint32
	ReadBlock(blk uint32, page []byte) error
	// CheckHeapSegments returns an error for every heap segment file
	// before the last one holding data that is not 1 GiB, naming the
	// file and its size (heap.Storage.CheckSegments).
	CheckHeapSegments() []error
	CLOG() *clog.CLOG
	VisibilityMap() *visibility.Map
	// Snapshot is a snapshot taken now; IsRunning reports whether a
	// transaction is running now; DidCommit whether a finished one
	// committed.
	Snapshot() *visibility.Snapshot
	IsRunning(xid uint64) bool
	DidCommit(xid uint64) (bool, error)
	// StrictLink reports whether pred is the version an update by next's
	// inserter replaced.
	StrictLink(next, pred *heap.TupleHeader) bool
	// ShowKey returns a key as problems show it.
	ShowKey(key []byte) []byte
	// Index calls fn for every entry of the key index in key order, with
	// the packed TID of the version it points at, until fn returns false,
	// holding the index still; it returns the number of entries.
	Index(fn func(key string, head uint64) bool) (entries int)
	// CheckIndexFile checks the index file the last checkpoint wrote
	// against the index in memory.
	CheckIndexFile(problem Problemf)
	// HoldWAL calls fn, with the LSN up to which the WAL was durable when
	// it was called, while no checkpoint runs.
	HoldWAL(fn func(durable wal.LSN))
	// ValueCheck returns a new check of out-of-line values, whose
	// pointer and directory formats are the engine's.
	ValueCheck() ValueCheck
	// Unended reports whether transaction xid was running when the
	// check began, or began since: what it wrote may have reached some
	// of the files read and not others, so that findings about it are
	// not judged. ChangedSince reports whether the version at tid, as
	// the heap holds it now, was written or deleted by such a
	// transaction.
	Unended(xid uint64) bool
	ChangedSince(tid heap.TID) bool
}

// ValueCheck checks out-of-line values: Note is called for every tuple
// read, Report once after the heap was read, with kind telling whether a
// slot holds a chunk tuple, whether it is a directory, and its xmin, and
// skip true for a slot on a page that could not be read. Report returns
// the tuples whose value has a chunk (or a directory of chunks) in such a
// slot, or names a slot holding no chunk of its own: their values are
// lost.
//
// Orphans is called once after Report. It reports to note the chunk
// tuples Note saw that no version and no directory of one names, nor
// vacuum has queued to free, and returns how many there are and their
// value bytes. unread counts what the scan could not read: pages that
// failed their checks, and tuples whose line pointer or header did not
// decode. Any of them may hold a version naming chunks, so with unread
// above zero it looks for none and says so.
type ValueCheck interface {
	Note(problem Problemf, tid heap.TID, h heap.TupleHeader, val []byte)
	Report(problem Problemf, kind func(heap.TID) (chunk, dir bool, xmin uint64), skip func(heap.TID) bool) (lost map[heap.TID]bool)
	Orphans(note Problemf, unread int) (chunks int, bytes int64)
}

// Counts say how much the checks read.
type Counts struct {
	// Keys counts index entries: keys with any version, deleted or never
	// committed ones included.
	Pages, Tuples, Keys int
	// LostKeys are the keys whose newest version the index places on a
	// heap page that cannot be read, or whose newest version's
	// out-of-line value has a chunk on one, every one, whole.
	LostKeys []string
	// OrphanChunks counts out-of-line value chunks nothing names
	// (ValueCheck.Orphans), OrphanBytes their value bytes.
	OrphanChunks int
	OrphanBytes  int64
}

// Run checks t and reports every problem it finds to problem, and to note
// what is not damage but worth knowing: out-of-line value chunks that
// nothing names, which hold space no write can use until vacuum frees them.
func Run(t Target, problem, note Problemf) Counts {
	var c Counts
	next := t.NextXid()
	unended := func(h heap.TupleHeader) bool {
		return t.Unended(h.Xmin) || (h.Xmax != 0 && t.Unended(h.Xmax))
	}
	cl := t.CLOG()
	type tupleInfo struct {
		h     heap.TupleHeader
		key   string
		chunk bool
		// xmaxCommitted: from its hint, or else the CLOG lookup the
		// header check makes anyway. xminCommitted and xminAborted
		// likewise, from that same lookup (neither: in progress).
		xmaxCommitted, xminCommitted, xminAborted bool
	}
	tuples := make(map[uint64]tupleInfo)
	// Findings about tuple xids that come from their CLOG page, one line
	// per page: a damaged page affects thousands.
	clogBad := newCLOGFindings(filepath.Join(t.Dir(), rmgr.Engine.CLOGDir))
	nblocks := t.NBlocks()
	// A segment cut short before a later one: its missing blocks read as
	// new pages, or fail below the written length, one block at a time;
	// only the file's size names the cause.
	for _, err := range t.CheckHeapSegments() {
		problem("heap: %v", err)
	}
	vmBits, vmPages := readVisibilityMap(t, problem, nblocks)
	vmSnap := t.Snapshot()
	vmLost := newLostMapPages(vmPages, nblocks)
	page := make([]byte, heap.PageSize)
	badBlocks := make(map[uint32]bool) // pages that could not be read
	unread := 0                        // pages and tuples that could not be read
	values := t.ValueCheck()
	for blk := uint32(0); blk < nblocks; blk++ {
		c.Pages++
		if err := t.ReadBlock(blk, page); err != nil {
			problem("%v", err)
			badBlocks[blk] = true
			unread++
			continue
		}
		checkVisibilityMap(t, problem, blk, page, vmBits[blk], vmSnap)
		vmLost.note(blk, page, vmBits[blk])
		if heap.IsNew(page) {
			continue
		}
		for s := 0; s < heap.NumSlots(page); s++ {
			raw, err := heap.Tuple(page, uint16(s))
			if errors.Is(err, heap.ErrBadSlot) {
				continue
			}
			tid := heap.TID{Block: blk, Slot: uint16(s)}
			if err != nil {
				problem("heap tuple %s: %v", tid, err)
				unread++
				continue
			}
			h, key, val, err := heap.DecodeTuple(raw)
			if err != nil {
				problem("heap tuple %s: %v", tid, err)
				unread++
				continue
			}
			c.Tuples++
			values.Note(problem, tid, h, val)
			xmaxCommitted := h.Infomask&heap.XmaxCommitted != 0
			xminCommitted, xminAborted := h.Infomask&heap.Frozen != 0, false
			for _, x := range []struct {
				name            string
				xid             uint64
				committed, dead uint16 // its hint bits
			}{{"xmin", h.Xmin, heap.XminCommitted, heap.XminInvalid}, {"xmax", h.Xmax, heap.XmaxCommitted, heap.XmaxInvalid}} {
				if x.xid == 0 && x.name == "xmax" {
					continue
				}
				if x.xid >= next {
					// Below the next xid now: a transaction begun
					// during the check wrote it, its status not
					// yet final.
					if now := t.NextXid(); x.xid >= now {
						problem("heap tuple %s: %s %d is not below the next xid %d", tid, x.name, x.xid, now)
					}
					continue
				}
				if x.name == "xmin" && h.Infomask&heap.Frozen != 0 {
					continue // frozen: its status is no longer looked up
				}
				if x.xid < cl.OldestXid() {
					if x.name == "xmin" {
						problem("heap tuple %s: xmin %d is below the CLOG truncation point %d but the tuple is not frozen", tid, x.xid, cl.OldestXid())
					} else {
						problem("heap tuple %s: xmax %d is below the CLOG truncation point %d: vacuum should have cleared it or removed the tuple", tid, x.xid, cl.OldestXid())
					}
					continue
				}
				st, err := cl.Status(x.xid)
				if err == nil && x.name == "xmax" && st == clog.StatusCommitted && h.Infomask&heap.XmaxInvalid == 0 {
					xmaxCommitted = true
				}
				if err == nil && x.name == "xmin" {
					xminCommitted = st == clog.StatusCommitted && h.Infomask&heap.XminInvalid == 0
					// In progress but not running: crashed, as the
					// engine's visibility checks count it.
					xminAborted = !xminCommitted && (st == clog.StatusAborted || h.Infomask&heap.XminInvalid != 0 ||
						st == clog.StatusInProgress && !t.IsRunning(x.xid))
				}
				if err != nil {
					clogBad.add(x.xid, "status reads failed", fmt.Sprintf("heap tuple %s: CLOG status of %s %d: %v", tid, x.name, x.xid, err))
				} else if st == clog.StatusSubCommitted {
					clogBad.add(x.xid, "sub-committed", fmt.Sprintf("heap tuple %s: %s %d is sub-committed, which mvkv never writes", tid, x.name, x.xid))
				} else if hinted := hintedStatus(h.Infomask, x.committed, x.dead); hinted != clog.StatusInProgress && hinted != st {
					// A hint caches a final CLOG status, set only after
					// the CLOG said so; a CLOG that now says otherwise
					// lost that page (a zeroed or missing segment reads
					// as "in progress"), and every unhinted tuple of
					// those xids reads wrongly too.
					name, off := clog.XidFile(x.xid)
					clogBad.add(x.xid, "hints contradicted", fmt.Sprintf("heap tuple %s: %s %d is hinted %s, but the CLOG says %s (%s at offset %d): the CLOG is damaged or lost", tid, x.name, x.xid, hinted, st, filepath.Join(t.Dir(), rmgr.Engine.CLOGDir, name), off))
				}
			}
			chunk := h.Infomask&heap.Chunk != 0
			k := string(key)
			tuples[tid.Pack()] = tupleInfo{h: h, key: k, chunk: chunk,
				xmaxCommitted: xmaxCommitted, xminCommitted: xminCommitted, xminAborted: xminAborted}
		}
	}
	vmLost.report(t, problem)
	clogBad.report(problem)
	lostValues := values.Report(problem, func(t heap.TID) (bool, bool, uint64) {
		ti, ok := tuples[t.Pack()]
		return ok && ti.chunk, ok && ti.h.Infomask&heap.Chunk != 0 && ti.h.Infomask&heap.External != 0, ti.h.Xmin
	}, func(t heap.TID) bool { return badBlocks[t.Block] })
	c.OrphanChunks, c.OrphanBytes = values.Orphans(note, unread)
	// The newest version of each key: the one whose inserter committed and
	// whose xmax did not. Prev links are not checked for existence:
	// pruning frees a version on its own page and leaves the link to it
	// dangling, which walks recognize. An update link whose target still
	// checks out must be the only one naming it.
	//
	// A lost newest version cannot be inferred from the versions left: a
	// version replaced by an update whose own version is gone is what a
	// key deleted below the horizon leaves too, once pruning freed its last
	// version before the page of the one below was visited.
	heads := make(map[string]uint64)
	strictRefs := make(map[uint64]uint64) // predecessor → the referrer's xmin
	for tid, tu := range tuples {
		if tu.chunk {
			continue
		}
		if tu.h.Prev.Valid() && tu.h.Prev.Pack() == tid {
			// Readers stop at such a link (a heap written by a build
			// that let a version take its predecessor's freed slot can
			// hold one), but no write makes one.
			problem("heap tuple %s names its own slot as its predecessor", heap.UnpackTID(tid))
		} else if tu.h.Prev.Valid() {
			if p, ok := tuples[tu.h.Prev.Pack()]; ok && !p.chunk && p.key == tu.key && t.StrictLink(&tu.h, &p.h) {
				// A transaction that writes a key twice links both its
				// versions past its own to the same predecessor: only
				// two transactions naming one version is wrong.
				if x, dup := strictRefs[tu.h.Prev.Pack()]; dup && x != tu.h.Xmin {
					problem("heap tuple %s: version %s is the predecessor of two versions", heap.UnpackTID(tid), tu.h.Prev)
				}
				strictRefs[tu.h.Prev.Pack()] = tu.h.Xmin
			}
		}
		if !tu.xminCommitted {
			continue
		}
		if tu.h.Xmax == 0 || !tu.xmaxCommitted {
			// An update by a writer the check cannot judge: its new
			// version read committed, the one it replaced read from a
			// page written before the update stamped its xmax.
			if other, dup := heads[tu.key]; dup && !unended(tuples[other].h) && !unended(tu.h) {
				problem("key %q has two newest versions %s and %s", t.ShowKey([]byte(tu.key)), heap.UnpackTID(other), heap.UnpackTID(tid))
			}
			heads[tu.key] = tid
		}
	}
	lost, lostNames := 0, []string(nil)
	// Index entries that disagree with the heap, judged after the index
	// is let go (ChangedSince reads the heap): the index is read after
	// the heap, and a writer the check cannot judge may have moved an
	// entry to a version placed, or stamped, after its page was read.
	type disagreement struct {
		key       string
		got, want uint64
		found     bool // want is the heap's newest version
	}
	var differ []disagreement
	c.Keys = t.Index(func(key string, got uint64) bool {
		want, ok := heads[key]
		// An entry may also point at a version that is not the newest
		// committed one: a deleted key's last version until vacuum drops
		// the entry, or a version whose inserter aborted or is still
		// running, above the newest committed one.
		tu, exists := tuples[got]
		pending := exists && !tu.chunk && tu.key == key && (!tu.xminCommitted || (!ok && tu.h.Xmax != 0))
		if gt := heap.UnpackTID(got); gt.Valid() && (badBlocks[gt.Block] || lostValues[gt]) {
			// The index names the version the damaged page held, or
			// one whose value has a chunk there: the key is known, its
			// value is lost.
			c.LostKeys = append(c.LostKeys, key)
			if lost++; lost <= 10 {
				lostNames = append(lostNames, fmt.Sprintf("%q", t.ShowKey([]byte(key))))
			}
		} else if !ok && heap.UnpackTID(got).Valid() && !pending {
			differ = append(differ, disagreement{key: key, got: got})
		} else if ok && got != want && !pending {
			differ = append(differ, disagreement{key: key, got: got, want: want, found: true})
		}
		delete(heads, key)
		return true
	})
	for _, d := range differ {
		if t.ChangedSince(heap.UnpackTID(d.got)) || (d.found && t.ChangedSince(heap.UnpackTID(d.want))) {
			continue
		}
		if d.found {
			problem("index: key %q points at %s, the heap's newest version is %s", t.ShowKey([]byte(d.key)), heap.UnpackTID(d.got), heap.UnpackTID(d.want))
		} else {
			problem("index: key %q points at %s, which is not a newest version in the heap", t.ShowKey([]byte(d.key)), heap.UnpackTID(d.got))
		}
	}
	for k, tid := range heads {
		problem("index: key %q is missing (newest version %s)", t.ShowKey([]byte(k)), heap.UnpackTID(tid))
	}
	if lost > 0 {
		more := ""
		if lost > len(lostNames) {
			more = fmt.Sprintf(" and %d more", lost-len(lostNames))
		}
		problem("keys lost: %d whose newest version the index places on a page that cannot be read, or whose value has a chunk there: %s%s", lost, strings.Join(lostNames, ", "), more)
	}
	t.CheckIndexFile(problem)

	// The whole WAL still on disk must read cleanly, also below the redo
	// point, which recovery does not read. Each commit or abort record in
	// it must agree with the CLOG: a CLOG page restored from an older copy
	// (a backup, a lost write) holds valid-looking statuses of "in
	// progress" for transactions that committed since, which then read as
	// aborted, their writes gone without an error anywhere; below the
	// redo point no recovery replays them, and only the records that are
	// still here can tell. One line per CLOG page.
	//
	// The WAL, the files beside it and the control file are read while no
	// checkpoint runs (none removes a segment or moves the control file's
	// checkpoint), and the WAL up to where it was durable when the read
	// began: a writer goes on appending while it is read.
	t.HoldWAL(func(durable wal.LSN) {
		ctrl, ctrlFound, ctrlErr := rmgr.Engine.ReadControl(t.FS(), t.Dir())
		// The bound for the control file's next xid, read after it: a
		// checkpoint that completed since the checks began (the
		// checkpointer's, beside writers) wrote one above the next xid
		// read then.
		ctrlNext := t.NextXid()
		walPath := filepath.Join(t.Dir(), rmgr.Engine.WALDir)
		walBad := newCLOGFindings(filepath.Join(t.Dir(), rmgr.Engine.CLOGDir))
		// check reads the log from start to where it was durable,
		// holding each commit and abort record against the CLOG, and
		// returns the error that ended the read (io.EOF at the end) and
		// where the log read ended; read is false when the reader could
		// not start at all.
		check := func(start wal.LSN) (end wal.LSN, read bool, err error) {
			r, err := wal.NewReader(t.FS(), walPath, start)
			if err != nil {
				return start, false, err
			}
			defer r.Close()
			r.SetStop(durable)
			var rec wal.Record
			for {
				if rec, err = r.Next(); err != nil {
					return r.End(), true, err
				}
				ends, committed := rmgr.Engine.Outcome(rec.Type)
				if !ends || rec.XID < cl.OldestXid() || rec.XID >= next {
					continue
				}
				want := clog.StatusAborted
				if committed {
					want = clog.StatusCommitted
				}
				// A transaction the check cannot judge may have made
				// its record durable and not yet its CLOG status
				// (PostgreSQL's order: the flush, then the CLOG).
				if st, err := cl.Status(rec.XID); err == nil && st != want && (st != clog.StatusInProgress || !t.Unended(rec.XID)) {
					name, off := clog.XidFile(rec.XID)
					walBad.add(rec.XID, "statuses contradict the WAL", fmt.Sprintf("xid %d has its %s record at %s in the WAL, but the CLOG says %s (%s at offset %d): the CLOG page is damaged, or older than the WAL (restored from a copy, or a write of it lost)",
						rec.XID, rmgr.Engine.TypeName(rec.Type), rec.LSN, st, filepath.Join(t.Dir(), rmgr.Engine.CLOGDir, name), off))
				}
			}
		}
		if end, read, err := check(0); !errors.Is(err, io.EOF) {
			if read && ctrlErr == nil && ctrlFound && end < ctrl.RedoLSN {
				// Damage below the last checkpoint's redo point loses
				// old log records, which recovery never reads again,
				// not committed data: said, with the range that cannot
				// be read, so that the "lost" in the reader's words is
				// not taken for lost writes. The log from the redo
				// point on, which recovery read, is then read and
				// checked on its own, so that the damage hides no
				// contradiction with the CLOG after it.
				problem("WAL: %v (the damage lies below the last checkpoint's redo point %s, which recovery starts from: no committed data is lost, only the log records from %s up to %s, which can no longer be read or checked against the CLOG; the log from %s on is read and checked on its own)",
					err, ctrl.RedoLSN, end, ctrl.RedoLSN, ctrl.RedoLSN)
				if _, _, err := check(ctrl.RedoLSN); !errors.Is(err, io.EOF) {
					problem("WAL: %v", err)
				}
			} else {
				problem("WAL: %v", err)
			}
		}
		walBad.report(problem)
		// The next xid now: a writer may have started a CLOG segment
		// since the check began.
		checkStrayFiles(t, problem, t.NextXid())

		switch {
		case ctrlErr != nil:
			problem("%v", ctrlErr)
		case !ctrlFound:
			problem("control file missing after a checkpoint")
		default:
			if ctrl.NextXid > ctrlNext {
				problem("control file: next xid %d is above the running next xid %d", ctrl.NextXid, ctrlNext)
			}
			if err := checkCheckpointRecord(t.FS(), walPath, ctrl); err != nil {
				problem("control file against WAL: %v", err)
			}
		}
	})
	return c
}

// hintedStatus is the final status a tuple's hint bits record for one of
// its xids, or StatusInProgress when neither bit is set.
func hintedStatus(infomask, committed, dead uint16) clog.Status {
	switch {
	case infomask&committed != 0:
		return clog.StatusCommitted
	case infomask&dead != 0:
		return clog.StatusAborted
	}
	return clog.StatusInProgress
}

// checkCheckpointRecord reads the record the control file names and checks
// it is the checkpoint with the same redo point.
func checkCheckpointRecord(fsys vfs.FS, walPath string, ctrl rmgr.Control) error {
	r, err := wal.NewReader(fsys, walPath, ctrl.CheckpointLSN)
	if err != nil {
		return err
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		return fmt.Errorf("no record at checkpoint LSN %s: %v", ctrl.CheckpointLSN, err)
	}
	if !rmgr.Engine.IsCheckpoint(rec.Type) || rec.LSN != ctrl.CheckpointLSN {
		return fmt.Errorf("record at %s is %s, not the checkpoint", rec.LSN, rmgr.Engine.TypeName(rec.Type))
	}
	redo, err := rmgr.Engine.CheckpointRedo(rec)
	if err != nil || redo != ctrl.RedoLSN {
		return fmt.Errorf("checkpoint record at %s has redo %s, control file says %s", rec.LSN, redo, ctrl.RedoLSN)
	}
	return nil
}

// checkStrayFiles reports the files in the data directory and in its WAL,
// CLOG, heap and visibility map directories that none owns: a name that is
// not the engine's or a segment's, or a CLOG segment past the one holding
// the next xid. Nothing reads any of them (recovery ignores a stranger in
// the WAL directory; each CLOG page is started anew when the first xid on
// it is assigned, whatever its file held), but someone put them there.
func checkStrayFiles(t Target, problem Problemf, next uint64) {
	if names, err := t.FS().ReadDir(t.Dir()); err == nil {
		for _, n := range names {
			if rmgr.Engine.OwnFile("", n) {
				continue
			}
			problem("data directory: %s is not a file of the database (nothing reads it; remove it, or find what wrote it)", filepath.Join(t.Dir(), n))
		}
	}
	for _, d := range []struct {
		dir, what, file, ignoredBy string
	}{
		{rmgr.Engine.WALDir, "WAL", "WAL segment", "recovery ignores it"},
		{rmgr.Engine.HeapDir, "heap", "heap file", "nothing reads it"},
		{rmgr.Engine.VMDir, "visibility map", "visibility map file", "nothing reads it"},
	} {
		dir := filepath.Join(t.Dir(), d.dir)
		if names, err := t.FS().ReadDir(dir); err == nil {
			for _, n := range names {
				if !rmgr.Engine.OwnFile(d.dir, n) {
					problem("%s: %s is not a %s (%s; remove it, or find what wrote it)", d.what, filepath.Join(dir, n), d.file, d.ignoredBy)
				}
			}
		}
	}
	clogDir := filepath.Join(t.Dir(), rmgr.Engine.CLOGDir)
	last := clog.SegmentOf(max(next, 1) - 1)
	if names, err := t.FS().ReadDir(clogDir); err == nil {
		for _, n := range names {
			seg, ok := clog.ParseSegmentName(n)
			switch {
			case !rmgr.Engine.OwnFile(rmgr.Engine.CLOGDir, n):
				problem("CLOG: %s is not a CLOG segment (nothing reads it; remove it, or find what wrote it)", filepath.Join(clogDir, n))
			case ok && seg > last:
				problem("CLOG: %s lies past the segment of the next xid %d, which no transaction has reached: it was put there (a copy, or another database's); nothing reads it (each page is started anew when xids reach it), but remove it", filepath.Join(clogDir, n), next)
			}
		}
	}
}
