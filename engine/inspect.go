package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/internal/rmgr"
	"mvkv/internal/verify"
	"mvkv/vfs"
	"mvkv/visibility"
	"mvkv/wal"
)

// The engine's entry in the table through which package waldump and the
// checks behind Verify read what only the engine knows of its files.
func init() {
	rmgr.Engine = rmgr.Table{
		WALDir:       walDir,
		CLOGDir:      clogDir,
		HeapDir:      heapDir,
		VMDir:        vmDir,
		RootFiles:    []string{controlName, controlTmpName, lockName, indexFileName, indexFileTmpName},
		OwnFile:      ownFileName,
		TypeName:     recordTypeName,
		Describe:     describeRecord,
		IsCheckpoint: func(t wal.RecordType) bool { return t == recCheckpoint },
		Outcome: func(t wal.RecordType) (ends, committed bool) {
			switch t {
			case recCommit, recBulkLoad:
				return true, true
			case recAbort:
				return true, false
			}
			return false, false
		},
		CheckpointRedo: func(rec wal.Record) (wal.LSN, error) {
			c, err := decodeCheckpoint(rec.Data)
			return c.redo, err
		},
		CheckpointSystemID: func(rec wal.Record) (uint64, error) {
			c, err := decodeCheckpoint(rec.Data)
			return c.systemID, err
		},
		ReadControl: func(fsys vfs.FS, dir string) (rmgr.Control, bool, error) {
			c, found, err := readControl(fsys, dir)
			return rmgr.Control(c), found, err
		},
	}
}

// describeRecord renders one WAL record the way pg_waldump does: type,
// transaction, lengths, and the blocks it touches. It never fails: a
// malformed payload is described as such. It is package waldump's
// Describe, reached through rmgr.Engine.
func describeRecord(rec wal.Record) string {
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
				switch {
				case isDirectory(h.Infomask):
					desc += " directory"
				case h.Infomask&heap.External != 0:
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
		if c, err := decodeCheckpoint(rec.Data); err == nil {
			desc = fmt.Sprintf("redo %s; next xid %d; checkpoint id %016x", c.redo, c.nextXid, c.id)
			if c.systemID != 0 {
				desc += fmt.Sprintf("; system id %d", c.systemID)
			}
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
	case recIndexHeads:
		desc = describeIndexHeads(rec.Data)
	case recBulkLoadBegin, recBulkLoad, recBulkVisible:
		desc = describeBulkLoad(rec)
	case recHeapTruncate:
		desc = describeHeapTruncate(rec.Data)
	default:
		desc = "unknown record type"
	}
	return fmt.Sprintf("lsn: %s, type: %-11s tx: %d, len: %d, desc: %s",
		rec.LSN, recordTypeName(rec.Type)+",", rec.XID, len(rec.Data), desc)
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	// Keys counts index entries: keys with any version, deleted or never
	// committed ones included.
	Pages, Tuples, Keys int
	Problems            []string // empty when everything checked out
	// LostKeys are the keys whose newest version the index places on a
	// heap page that cannot be read (its value is lost, reads of it fail
	// with ErrCorruption), every one, whole, in index order; the
	// Problems name the first ten.
	LostKeys []string
	// Notes are findings that are not damage: they do not make OK false.
	// Out-of-line value chunks that no version names (OrphanChunks of
	// them, OrphanBytes bytes of tuples, the first twenty named with
	// their heap file, offset, block and slot) are space leaked, which
	// no write can use until vacuum frees them after an Open that
	// rebuilds the key index from the heap; every value a version names
	// reads as before. Left by a large value's directory lost with its
	// page (zero_damaged_pages) before its value's delete; otherwise by
	// a bug.
	// Not counted: chunks vacuum's next run frees anyway (those it owes:
	// their version removed by a run not finished, or listed by an Open
	// that rebuilt the index; or their writer aborted or crashed:
	// pruning frees those, named or not), and those of transactions
	// running when Verify began or begun since. When
	// a heap page or tuple could not be read none are looked for (it
	// may have named them), and a note says so.
	Notes        []string
	OrphanChunks int
	OrphanBytes  int64
}

// OK reports whether Verify found nothing wrong.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

const maxProblems = 100

func (r *VerifyReport) note(format string, args ...any) {
	if len(r.Notes) < maxProblems {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

func (r *VerifyReport) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == maxProblems {
		r.Problems = append(r.Problems, "... (more problems not listed)")
	}
}

// Verify checks the consistency of an open database, as bbolt's Check and
// PostgreSQL's amcheck do: every heap page's checksum and line pointers
// (read from disk after a checkpoint, not from the buffer pool); the heap
// segment files' sizes (one shorter than 1 GiB before another); the
// visibility map files' sizes (a page cut short loses its bits without
// failing a checksum), every map page's checksum, every set bit against
// its heap page (PD_ALL_VISIBLE and every tuple visible to all), and map
// pages missing from the files (a file removed, or cut to whole pages)
// where heap pages that vacuum marked all-visible show bits were set
// (bits lost, which vacuum sets again; Open does not notice); every
// tuple header (xmin and xmax below the next xid, their CLOG status and any
// hint bits against it, so that a lost CLOG segment shows, chunk and
// version-chain links); the index against a fresh scan of the heap, and the
// index file against the index; the control file against the WAL, every
// WAL record on disk up to where the log was durable when this check
// reached it (read while no checkpoint runs), and every commit and abort
// record among them against the CLOG (a CLOG segment older than the WAL,
// restored from a copy, shows there); and files the WAL, CLOG, heap and
// visibility map directories do not own. Out-of-line value chunks that
// nothing names are reported as Notes: leaked space, not damage. Chunks
// of transactions running when Verify began, or begun since, are not
// counted (a writer places a value's chunks before its version), so
// writers do not make that finding false.
//
// It waits for Open's background check of the heap pages, if one runs,
// then takes a checkpoint, so it needs a writable database. It holds
// off vacuum, autovacuum and pruning while it runs (a vacuum run waits for
// it, and it waits for a run in progress). It does not stop concurrent
// transactions: it reads the files page by page while they write, and the
// pool writes their pages out in any order.
//
// Beside writers, it judges only what transactions that had ended when it
// began wrote. What a transaction running then, or begun since, wrote
// may have reached some of the pages it reads and not others: a version
// whose value's chunks are on a page read before them, a page changed
// after its visibility map bits were read (the write clears them), an
// xid above the next xid when the check began, a key's index entry moved
// to a version placed after its page was read, a commit record durable
// before the CLOG says so. None of it is reported, so on an undamaged
// database Verify beside writers finds nothing (no problem, no lost key,
// no orphan). Damage that only such a transaction's writes show is
// found by a Verify that begins after it ended. The error is for
// failures to check (I/O, ErrClosed); findings go into the report.
func (db *DB) Verify() (VerifyReport, error) {
	var rep VerifyReport
	// Open's background check first: the map bits it clears are written
	// by the checkpoint below, so that the report does not depend on
	// which of the two came first. Close ends the check early.
	db.waitOpenScan()
	// The chunks of a transaction running now may be on disk before the
	// version naming them: not orphans (toastCheck.Orphans).
	begun := db.procs.snapshot()
	// Vacuum moves versions and rewrites Prev links across pages, and the
	// pool writes those pages back one at a time: a scan of the files
	// during a run sees chains half rewritten. Holding vacuum off for the
	// whole check (taken before the checkpoint, so that the files the
	// scan reads hold no run's partial work either) keeps Verify exact
	// while autovacuum is on.
	if err := db.vac.mu.lockCtx(context.Background(), db.closing); err != nil {
		return rep, err
	}
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
	c := verify.Run(verifyTarget{db, begun}, rep.problem, rep.note)
	rep.Pages, rep.Tuples, rep.Keys, rep.LostKeys = c.Pages, c.Tuples, c.Keys, c.LostKeys
	rep.OrphanChunks, rep.OrphanBytes = c.OrphanChunks, c.OrphanBytes
	return rep, nil
}

// verifyTarget is the database as the checks of Verify read it; begun is
// a snapshot taken before Verify's checkpoint.
type verifyTarget struct {
	db    *DB
	begun *visibility.Snapshot
}

func (t verifyTarget) Dir() string                          { return t.db.dir }
func (t verifyTarget) FS() vfs.FS                           { return t.db.fs }
func (t verifyTarget) NextXid() uint64                      { return t.db.procs.next() }
func (t verifyTarget) NBlocks() uint32                      { return t.db.storage.NBlocks() }
func (t verifyTarget) ReadBlock(blk uint32, p []byte) error { return t.db.storage.ReadBlock(blk, p) }
func (t verifyTarget) CheckHeapSegments() []error           { return t.db.storage.CheckSegments() }
func (t verifyTarget) CLOG() *clog.CLOG                     { return t.db.clog }
func (t verifyTarget) VisibilityMap() *visibility.Map       { return t.db.vm }
func (t verifyTarget) Snapshot() *visibility.Snapshot       { return t.db.procs.snapshot() }
func (t verifyTarget) IsRunning(xid uint64) bool            { return t.db.procs.isRunning(xid) }
func (t verifyTarget) DidCommit(xid uint64) (bool, error)   { return t.db.didCommit(xid) }
func (t verifyTarget) ShowKey(key []byte) []byte            { return truncKey(key) }
func (t verifyTarget) ValueCheck() verify.ValueCheck {
	return &toastCheck{db: t.db, begun: t.begun, queued: t.db.vac.debt.list()}
}
func (t verifyTarget) CheckIndexFile(problem verify.Problemf) {
	// The control file, the index file and the identifier of the last
	// checkpoint are read as one: a checkpoint completing in between
	// (the checkpointer's, or a background end-of-recovery one) would
	// pair one checkpoint's files with the next one's identifier.
	t.db.ckptMu.Lock()
	defer t.db.ckptMu.Unlock()
	t.db.verifyIndexFile(problem, t.ChangedSince)
}

func (t verifyTarget) HoldWAL(fn func(durable wal.LSN)) {
	t.db.ckptMu.Lock()
	defer t.db.ckptMu.Unlock()
	fn(t.db.wal.FlushedLSN())
}

func (t verifyTarget) Unended(xid uint64) bool { return t.begun.XidInProgress(xid) }

func (t verifyTarget) ChangedSince(tid heap.TID) bool { return t.db.changedSince(tid, t.begun) }

// changedSince reports whether the version at tid, as the buffer pool
// holds it now, was inserted or deleted by a transaction that begun calls
// in progress: one running when begun was taken, or begun since. False
// when the slot holds no tuple that reads.
func (db *DB) changedSince(tid heap.TID, begun *visibility.Snapshot) bool {
	if !tid.Valid() {
		return false
	}
	buf, err := db.pool.Get(tid.Block)
	if err != nil {
		return false
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	raw, err := heap.Tuple(buf.Page(), tid.Slot)
	if err != nil {
		return false
	}
	h, _, _, err := heap.DecodeTuple(raw)
	if err != nil {
		return false
	}
	return begun.XidInProgress(h.Xmin) || (h.Xmax != 0 && begun.XidInProgress(h.Xmax))
}

func (t verifyTarget) StrictLink(next, pred *heap.TupleHeader) bool {
	return strictLink(next, pred)
}

func (t verifyTarget) Index(fn func(key string, head uint64) bool) int {
	t.db.idx.mu.RLock()
	defer t.db.idx.mu.RUnlock()
	n := t.db.idx.tree.Len()
	t.db.idx.tree.Ascend(func(e *indexEntry) bool { return fn(e.key(), e.head.Load()) })
	return n
}

// String renders the report for a terminal.
func (r VerifyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checked %d heap pages, %d tuples, %d index entries (keys with any version, deleted ones included)\n", r.Pages, r.Tuples, r.Keys)
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if r.OK() {
		b.WriteString("ok\n")
		return b.String()
	}
	for _, p := range r.Problems {
		b.WriteString("problem: " + p + "\n")
	}
	if len(r.Problems) == 1 {
		b.WriteString("1 problem\n")
	} else {
		fmt.Fprintf(&b, "%d problems\n", len(r.Problems))
	}
	return b.String()
}

// describeIndexHeads renders a recIndexHeads record for describeRecord:
// `3 keys: "a" dropped, "b" head (4,2), "c" dropped`, the first few keys
// named (each cut to 64 bytes), then "…".
func describeIndexHeads(data []byte) string {
	changes, err := decodeIndexHeads(data)
	if err != nil {
		return "malformed: " + err.Error()
	}
	var b strings.Builder
	noun := "keys"
	if len(changes) == 1 {
		noun = "key"
	}
	fmt.Fprintf(&b, "%d %s:", len(changes), noun)
	const named = 8
	for i, c := range changes {
		if i == named {
			b.WriteString(" …")
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		if c.head.Valid() {
			fmt.Fprintf(&b, " %q head %s", truncKey(c.key), c.head)
		} else {
			fmt.Fprintf(&b, " %q dropped", truncKey(c.key))
		}
	}
	return b.String()
}
