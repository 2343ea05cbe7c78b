package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// validLogEnd reads the log from from (a record's LSN, or 0 for the oldest
// segment) to its end and returns where the valid log ends and how many
// bytes of torn tail follow; ok is false if it could not be read to the end.
func validLogEnd(fsys vfs.FS, walPath string, from wal.LSN) (end wal.LSN, dropped int64, ok bool) {
	r, err := wal.NewReader(fsys, walPath, from)
	if err != nil {
		return 0, 0, false
	}
	defer r.Close()
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			return r.End(), r.DroppedBytes(), true
		} else if err != nil {
			return 0, 0, false
		}
	}
}

// DescribeRecord renders one WAL record the way pg_waldump does: type,
// transaction, lengths, and the blocks it touches. It never fails: a
// malformed payload is described as such.
func DescribeRecord(rec wal.Record) string {
	var desc string
	switch rec.Type {
	case recHeapInsert, recHeapUpdate, recHeapDelete:
		hr, err := decodeHeapRecord(rec.Type, rec.Data)
		switch {
		case err != nil:
			desc = "malformed: " + err.Error()
		case rec.Type == recHeapInsert:
			desc = fmt.Sprintf("new %s", hr.New)
		case rec.Type == recHeapUpdate:
			desc = fmt.Sprintf("old %s new %s", hr.Old, hr.New)
		default:
			desc = fmt.Sprintf("old %s", hr.Old)
		}
		if err == nil && hr.Tuple != nil {
			if h, key, val, err := heap.DecodeTuple(hr.Tuple); err == nil {
				desc += fmt.Sprintf(" key %q (%d bytes) value %d bytes prev %s", truncKey(key), len(key), len(val), h.Prev)
				if h.Infomask&heap.Chunk != 0 {
					desc += " chunk"
				}
				if h.Infomask&heap.External != 0 {
					desc += " external: " + describePointer(val)
				}
			}
		}
		if rec.Flags&flagInitPage != 0 {
			desc += " INIT_PAGE"
		}
		desc += describeVMFlags(rec.Flags)
	case recCommit, recAbort:
		if len(rec.Data) == 8 {
			desc = fmt.Sprintf("at %d µs since the epoch", binary.LittleEndian.Uint64(rec.Data))
		} else {
			desc = "malformed"
		}
	case recCheckpoint:
		if redo, next, err := decodeCheckpoint(rec.Data); err == nil {
			desc = fmt.Sprintf("redo %s; next xid %d", redo, next)
		} else {
			desc = "malformed"
		}
	case recHeap2Prune:
		desc = describePrune(rec.Data, rec.Flags)
	case recHeap2Visible:
		desc = describeVisible(rec.Data)
	case recFPI, recFPIForHint:
		if blk, _, err := decodeFPI(rec.Data, rec.Flags); err == nil {
			desc = fmt.Sprintf("block %d", blk)
			if rec.Flags&flagFPIHole != 0 {
				desc += fmt.Sprintf(" (hole of %d bytes left out)", binary.LittleEndian.Uint16(rec.Data[6:]))
			}
		} else {
			desc = "malformed: " + err.Error()
		}
	case recCLOGTruncate:
		if oldest, err := decodeCLOGTruncate(rec.Data); err == nil {
			desc = fmt.Sprintf("oldest xid %d", oldest)
		} else {
			desc = "malformed: " + err.Error()
		}
	case recIndexHead:
		if key, head, err := decodeIndexHead(rec.Data); err != nil {
			desc = "malformed: " + err.Error()
		} else if head.Valid() {
			desc = fmt.Sprintf("key %q head %s", truncKey(key), head)
		} else {
			desc = fmt.Sprintf("key %q dropped", truncKey(key))
		}
	default:
		desc = "unknown record type"
	}
	return fmt.Sprintf("lsn: %s, type: %-11s tx: %d, len: %d, desc: %s",
		rec.LSN, recordTypeName(rec.Type)+",", rec.XID, len(rec.Data), desc)
}

// DumpWAL writes a description of every valid WAL record of the data
// directory dir in LSN order, from start (0: the oldest record present) up
// to but not including end (0: the end of the valid log), one per line, then
// a summary line saying where the log ends and how many torn bytes follow.
// It only reads. fsys nil means the operating system's file system. A start
// where no valid record begins (inside a record) returns an error wrapping
// wal.ErrCorrupt that says so.
func DumpWAL(fsys vfs.FS, dir string, start, end uint64, w io.Writer) error {
	if fsys == nil {
		fsys = vfs.OS{}
	}
	walPath := filepath.Join(dir, walDir)
	// The checkpoint record the control file names must be in the log;
	// a dump that reads past where it should be without meeting it is
	// reading a log with a segment missing or damaged. A control file that
	// cannot be read leaves the dump to the WAL alone.
	var ckpt wal.LSN
	ctrlNote := ""
	ctrl, found, err := readControl(fsys, dir)
	switch {
	case err != nil:
		ctrlNote = fmt.Sprintf("the control file could not be read (%v), so the checkpoint record it names was not looked for", err)
	case !found:
		ctrlNote = fmt.Sprintf("%s has no control file, so no checkpoint record was looked for", dir)
	case ctrl.CheckpointLSN != 0 && end == 0 && wal.LSN(start) <= ctrl.CheckpointLSN:
		ckpt = ctrl.CheckpointLSN
	}
	// A start at or past the end of the valid log is answered from where
	// the log really ends, read from the checkpoint (or, without one at or
	// below start, from the oldest segment): the reader alone would stop
	// where the segment files run out, or call the torn tail after the
	// end a start inside a record.
	if start != 0 && (!found || ctrl.CheckpointLSN <= wal.LSN(start)) {
		from := wal.LSN(0)
		if found {
			from = ctrl.CheckpointLSN
		}
		if logEnd, dropped, ok := validLogEnd(fsys, walPath, from); ok && wal.LSN(start) >= logEnd {
			if wal.LSN(start) > logEnd {
				return fmt.Errorf("--start %s lies past the end of the valid log, at %s", wal.LSN(start), logEnd)
			}
			fmt.Fprintf(w, "0 records; the valid log ends at %s", logEnd)
			if dropped > 0 {
				fmt.Fprintf(w, " followed by a torn tail of %d bytes", dropped)
			}
			fmt.Fprintln(w)
			if ctrlNote != "" {
				fmt.Fprintln(w, "note: "+ctrlNote)
			}
			return nil
		}
	}
	r, err := wal.NewReader(fsys, walPath, wal.LSN(start))
	if err != nil {
		return err
	}
	defer r.Close()
	sawCheckpoint := false
	n := 0
	// A start inside a record reads as damage; say what is more likely.
	notARecord := func() bool { return n == 0 && start != 0 }
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			if notARecord() && r.DroppedBytes() > 0 {
				return fmt.Errorf("%w: no valid record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first)", wal.ErrCorrupt, wal.LSN(start))
			}
			break
		}
		if err != nil {
			if notARecord() && errors.Is(err, wal.ErrCorrupt) {
				return fmt.Errorf("no valid record starts at %s (--start takes a record's LSN, as waldump prints them, or a segment's first): %w", wal.LSN(start), err)
			}
			return err
		}
		if end != 0 && uint64(rec.LSN) >= end {
			fmt.Fprintf(w, "stopped at %s (--end)\n", wal.LSN(end))
			return nil
		}
		if _, err := fmt.Fprintln(w, DescribeRecord(rec)); err != nil {
			return err
		}
		if rec.LSN == ckpt {
			sawCheckpoint = rec.Type == recCheckpoint
		}
		n++
	}
	fmt.Fprintf(w, "%d records; the valid log ends at %s", n, r.End())
	if d := r.DroppedBytes(); d > 0 {
		fmt.Fprintf(w, " followed by a torn tail of %d bytes", d)
	}
	fmt.Fprintln(w)
	if ctrlNote != "" {
		fmt.Fprintln(w, "note: "+ctrlNote)
	}
	if ckpt != 0 && !sawCheckpoint {
		return fmt.Errorf("%w: the control file names a checkpoint record at %s (in %s), but the valid log read here, which ends at %s, has no checkpoint there: that segment is missing or damaged",
			wal.ErrCorrupt, ckpt, segmentPathOf(filepath.Join(dir, walDir), ckpt, r.SegmentSize()), r.End())
	}
	return nil
}

// segmentPathOf names the segment file in walPath holding lsn, or walPath
// itself when the segment size is unknown (no segment could be read).
func segmentPathOf(walPath string, lsn wal.LSN, segSize int64) string {
	if segSize <= 0 {
		return walPath
	}
	name, _ := wal.SegmentFile(lsn, segSize)
	return filepath.Join(walPath, name)
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	// Keys counts index entries: keys with any version, deleted or never
	// committed ones included.
	Pages, Tuples, Keys int
	Problems            []string // empty when everything checked out
}

// OK reports whether Verify found nothing wrong.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

const maxProblems = 100

func (r *VerifyReport) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == maxProblems {
		r.Problems = append(r.Problems, "... (more problems not listed)")
	}
}

// Verify checks the consistency of an open database, as bbolt's check and
// PostgreSQL's amcheck do: every heap page's checksum and line pointers
// (read from disk after a checkpoint, not from the buffer pool); the
// visibility map files' sizes (a page cut short loses its bits without
// failing a checksum), every map page's checksum, and every set bit against
// its heap page
// (PD_ALL_VISIBLE and every tuple visible to all, see verifyVM); every
// tuple header (xmin and xmax below the next xid, their CLOG status and
// any hint bits against it, so that a lost CLOG segment shows, chunk and
// version-chain links); the index against a fresh scan of the heap; and
// the control file against the WAL. It takes a checkpoint first, so it
// needs a writable database. It holds off vacuum and autovacuum while it
// runs (a vacuum run waits for it, and it waits for a run in progress); it
// does not stop concurrent transactions, so run it without writers for an
// exact answer. The error is for failures
// to check (I/O); findings go into the report.
func (db *DB) Verify() (VerifyReport, error) {
	var rep VerifyReport
	// Vacuum moves versions and rewrites Prev links across pages, and the
	// pool writes those pages back one at a time: a scan of the files
	// during a run sees chains half rewritten. Holding vacuum off for the
	// whole check (taken before the checkpoint, so that the files the
	// scan reads hold no run's partial work either) keeps Verify exact
	// while autovacuum is on.
	db.vac.mu.Lock()
	defer db.vac.mu.Unlock()
	db.pruneMu.Lock()
	defer db.pruneMu.Unlock()
	if err := db.Checkpoint(); err != nil {
		return rep, err
	}
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return rep, ErrClosed
	}
	next := db.procs.next()
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
	// Hints the CLOG contradicts, counted per CLOG page: a lost page
	// contradicts thousands, and one finding a page says it all.
	type clogPage struct {
		file string
		off  int64
	}
	lostCLOG := make(map[clogPage]int)
	nblocks := db.storage.NBlocks()
	vmBits, vmSnap := db.verifyVMBits(&rep, nblocks), db.procs.snapshot()
	page := make([]byte, heap.PageSize)
	badBlocks := make(map[uint32]bool) // pages that could not be read
	var toast toastCheck
	for blk := uint32(0); blk < nblocks; blk++ {
		rep.Pages++
		if err := db.storage.ReadBlock(blk, page); err != nil {
			rep.problem("%v", err)
			badBlocks[blk] = true
			continue
		}
		db.verifyVM(&rep, blk, page, vmBits[blk], vmSnap)
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
				rep.problem("heap tuple %s: %v", tid, err)
				continue
			}
			h, key, tval, err := heap.DecodeTuple(raw)
			if err != nil {
				rep.problem("heap tuple %s: %v", tid, err)
				continue
			}
			rep.Tuples++
			toast.note(&rep, tid, h, tval)
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
					rep.problem("heap tuple %s: %s %d is not below the next xid %d", tid, x.name, x.xid, next)
					continue
				}
				if x.name == "xmin" && h.Infomask&heap.Frozen != 0 {
					continue // frozen: its status is no longer looked up
				}
				if x.xid < db.clog.OldestXid() {
					if x.name == "xmin" {
						rep.problem("heap tuple %s: xmin %d is below the CLOG truncation point %d but the tuple is not frozen", tid, x.xid, db.clog.OldestXid())
					} else {
						rep.problem("heap tuple %s: xmax %d is below the CLOG truncation point %d: vacuum should have cleared it or removed the tuple", tid, x.xid, db.clog.OldestXid())
					}
					continue
				}
				st, err := db.clog.Status(x.xid)
				if err == nil && x.name == "xmax" && st == clog.StatusCommitted && h.Infomask&heap.XmaxInvalid == 0 {
					xmaxCommitted = true
				}
				if err == nil && x.name == "xmin" {
					xminCommitted = st == clog.StatusCommitted && h.Infomask&heap.XminInvalid == 0
					// In progress but not running: crashed, as
					// xidState counts it.
					xminAborted = !xminCommitted && (st == clog.StatusAborted || h.Infomask&heap.XminInvalid != 0 ||
						st == clog.StatusInProgress && !db.procs.isRunning(x.xid))
				}
				if err != nil {
					rep.problem("heap tuple %s: CLOG status of %s %d: %v", tid, x.name, x.xid, err)
				} else if st == clog.StatusSubCommitted {
					rep.problem("heap tuple %s: %s %d is sub-committed, which mvkv never writes", tid, x.name, x.xid)
				} else if hinted := hintedStatus(h.Infomask, x.committed, x.dead); hinted != clog.StatusInProgress && hinted != st {
					// A hint caches a final CLOG status, set only after
					// the CLOG said so; a CLOG that now says otherwise
					// lost that page (a zeroed or missing segment reads
					// as "in progress"), and every unhinted tuple of
					// those xids reads wrongly too.
					name, off := clog.XidFile(x.xid)
					page := clogPage{name, off - off%clog.PageSize}
					if lostCLOG[page]++; lostCLOG[page] == 1 {
						rep.problem("heap tuple %s: %s %d is hinted %s, but the CLOG says %s (%s at offset %d): the CLOG is damaged or lost", tid, x.name, x.xid, hinted, st, filepath.Join(db.dir, clogDir, name), off)
					}
				}
			}
			chunk := h.Infomask&heap.Chunk != 0
			k := string(key)
			tuples[tid.Pack()] = tupleInfo{h: h, key: k, chunk: chunk,
				xmaxCommitted: xmaxCommitted, xminCommitted: xminCommitted, xminAborted: xminAborted}
		}
	}
	for page, n := range lostCLOG {
		if n > 1 {
			rep.problem("%d more tuple xids whose hints the CLOG page at %s offset %d contradicts", n-1, filepath.Join(db.dir, clogDir, page.file), page.off)
		}
	}
	toast.report(&rep, func(t heap.TID) (bool, bool) {
		ti, ok := tuples[t.Pack()]
		return ok && ti.chunk, ok && isDirectory(ti.h.Infomask)
	}, func(t heap.TID) bool { return badBlocks[t.Block] })
	// The newest version of each key: the one whose inserter committed and
	// whose xmax did not (chain.go). Prev links are not checked for
	// existence: pruning frees a version on its own page and leaves the
	// link to it dangling, which walks recognize. An update link whose
	// target still checks out must be the only one naming it.
	//
	// A lost newest version cannot be inferred from the versions left: a
	// version replaced by an update whose own version is gone is what a
	// key deleted below the horizon leaves too, once pruning freed its last
	// version before the page of the one below was visited.
	heads := make(map[string]uint64)
	strictRefs := make(map[uint64]uint64) // predecessor → the referrer's xmin
	for tid, t := range tuples {
		if t.chunk {
			continue
		}
		if t.h.Prev.Valid() {
			if p, ok := tuples[t.h.Prev.Pack()]; ok && !p.chunk && p.key == t.key && strictLink(&t.h, &p.h) {
				// A transaction that writes a key twice links both its
				// versions past its own to the same predecessor: only
				// two transactions naming one version is wrong.
				if x, dup := strictRefs[t.h.Prev.Pack()]; dup && x != t.h.Xmin {
					rep.problem("heap tuple %s: version %s is the predecessor of two versions", heap.UnpackTID(tid), t.h.Prev)
				}
				strictRefs[t.h.Prev.Pack()] = t.h.Xmin
			}
		}
		if !t.xminCommitted {
			continue
		}
		if t.h.Xmax == 0 || !t.xmaxCommitted {
			if other, dup := heads[t.key]; dup {
				rep.problem("key %q has two newest versions %s and %s", truncKey([]byte(t.key)), heap.UnpackTID(other), heap.UnpackTID(tid))
			}
			heads[t.key] = tid
		}
	}
	lost, lostNames := 0, []string(nil)
	db.idx.mu.RLock()
	rep.Keys = db.idx.tree.Len()
	db.idx.tree.Ascend(func(e *indexEntry) bool {
		want, ok := heads[e.key()]
		got := e.head.Load()
		// An entry may also point at a version that is not the newest
		// committed one: a deleted key's last version until vacuum drops
		// the entry, or a version whose inserter aborted or is still
		// running, above the newest committed one.
		t, exists := tuples[got]
		pending := exists && !t.chunk && t.key == e.key() && (!t.xminCommitted || (!ok && t.h.Xmax != 0))
		if gt := heap.UnpackTID(got); gt.Valid() && badBlocks[gt.Block] {
			// The index names the version the damaged page held: the
			// key is known, its value is lost.
			if lost++; lost <= 10 {
				lostNames = append(lostNames, fmt.Sprintf("%q", truncKey([]byte(e.key()))))
			}
		} else if !ok && heap.UnpackTID(got).Valid() && !pending {
			rep.problem("index: key %q points at %s, which is not a newest version in the heap", truncKey([]byte(e.key())), heap.UnpackTID(got))
		} else if ok && got != want && !pending {
			rep.problem("index: key %q points at %s, the heap's newest version is %s", truncKey([]byte(e.key())), heap.UnpackTID(got), heap.UnpackTID(want))
		}
		delete(heads, e.key())
		return true
	})
	db.idx.mu.RUnlock()
	for k, tid := range heads {
		rep.problem("index: key %q is missing (newest version %s)", truncKey([]byte(k)), heap.UnpackTID(tid))
	}
	if lost > 0 {
		more := ""
		if lost > len(lostNames) {
			more = fmt.Sprintf(" and %d more", lost-len(lostNames))
		}
		rep.problem("keys lost: %d whose newest version the index places on a page that cannot be read: %s%s", lost, strings.Join(lostNames, ", "), more)
	}
	db.verifyIndexFile(&rep)

	// The whole WAL still on disk must read cleanly, also below the redo
	// point, which recovery does not read.
	if r, err := wal.NewReader(db.fs, filepath.Join(db.dir, walDir), 0); err != nil {
		rep.problem("WAL: %v", err)
	} else {
		for {
			if _, err = r.Next(); err != nil {
				break
			}
		}
		if !errors.Is(err, io.EOF) {
			rep.problem("WAL: %v", err)
		}
		r.Close()
	}

	ctrl, found, err := readControl(db.fs, db.dir)
	switch {
	case err != nil:
		rep.problem("%v", err)
	case !found:
		rep.problem("control file missing after a checkpoint")
	default:
		if ctrl.NextXid > next {
			rep.problem("control file: next xid %d is above the running next xid %d", ctrl.NextXid, next)
		}
		if err := db.checkCheckpointRecord(ctrl); err != nil {
			rep.problem("control file against WAL: %v", err)
		}
	}
	return rep, nil
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
func (db *DB) checkCheckpointRecord(ctrl controlData) error {
	r, err := wal.NewReader(db.fs, filepath.Join(db.dir, walDir), ctrl.CheckpointLSN)
	if err != nil {
		return err
	}
	defer r.Close()
	rec, err := r.Next()
	if err != nil {
		return fmt.Errorf("no record at checkpoint LSN %s: %v", ctrl.CheckpointLSN, err)
	}
	if rec.Type != recCheckpoint || rec.LSN != ctrl.CheckpointLSN {
		return fmt.Errorf("record at %s is %s, not the checkpoint", rec.LSN, recordTypeName(rec.Type))
	}
	redo, _, err := decodeCheckpoint(rec.Data)
	if err != nil || redo != ctrl.RedoLSN {
		return fmt.Errorf("checkpoint record at %s has redo %s, control file says %s", rec.LSN, redo, ctrl.RedoLSN)
	}
	return nil
}

// String renders the report for a terminal.
func (r VerifyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checked %d heap pages, %d tuples, %d index entries (keys with any version, deleted ones included)\n", r.Pages, r.Tuples, r.Keys)
	if r.OK() {
		b.WriteString("ok\n")
		return b.String()
	}
	for _, p := range r.Problems {
		b.WriteString("problem: " + p + "\n")
	}
	fmt.Fprintf(&b, "%d problems\n", len(r.Problems))
	return b.String()
}
