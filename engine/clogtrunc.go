package engine

import (
	"encoding/binary"
	"fmt"

	"mvkv/wal"
)

// CLOG truncation, as PostgreSQL's TruncateCLOG: once no tuple can need the
// status of an xid below a cutoff, the CLOG segments wholly below the
// cutoff's segment are removed, so the CLOG stays bounded however many
// transactions run.
//
// Order, and why it is crash-safe:
//
//	ckptInterlock shared
//	insert CLOG_TRUNCATE(oldestXid); flush the WAL through it
//	clog.Truncate(oldestXid): oldest_xid file, drop buffers, remove files,
//	                          fsync the directory
//	release ckptInterlock
//
// The record is durable before any file goes, so a crash can never leave
// files removed and the truncation unknown to redo; redo of the record calls
// clog.Truncate again, which is idempotent, so a crash half-way through
// removing files is finished by recovery. Holding ckptInterlock shared keeps
// a checkpoint from choosing a redo point between the record and the end of
// the truncation: either redo starts before the record and repeats the
// truncation, or the truncation was complete (oldest_xid durable, files
// gone) before the checkpoint began. The truncation point itself survives
// restart in the CLOG's oldest_xid file (clog.Truncate writes it before
// removing anything), so lookups below it keep failing with
// clog.ErrTruncated rather than reading absent pages as "in progress".

// encodeCLOGTruncate is the CLOG_TRUNCATE payload. Part of the format; do not
// change:
//
//	+---------------------+
//	| oldest xid 8 (LE)   |
//	+---------------------+
func encodeCLOGTruncate(oldestXid uint64) []byte {
	return binary.LittleEndian.AppendUint64(nil, oldestXid)
}

// decodeCLOGTruncate reads a CLOG_TRUNCATE payload; any length but 8 is
// errBadRecord.
func decodeCLOGTruncate(data []byte) (uint64, error) {
	if len(data) != 8 {
		return 0, fmt.Errorf("%w: CLOG_TRUNCATE payload is %d bytes, want 8", errBadRecord, len(data))
	}
	return binary.LittleEndian.Uint64(data), nil
}

// truncateCLOG removes the CLOG segments wholly below the segment holding
// oldestXid, after logging and flushing a CLOG_TRUNCATE record (see the
// comment at the top of this file). From then on a CLOG lookup of any xid
// below oldestXid fails with an error wrapping clog.ErrTruncated; the point
// survives restart and crash.
//
// Precondition (the caller's, vacuum with its frozen horizon): oldestXid is
// at most the oldest xid any running or future snapshot or tuple can still
// ask the CLOG about. Every tuple in the heap whose xmin or xmax is below
// oldestXid must already be frozen or carry a durable hint bit, so no
// visibility check needs its status, and every transaction below oldestXid
// must have ended (its commit or abort record written and its CLOG bit set).
// A smaller oldestXid than the current point is harmless: nothing moves
// back. The database must be open for the whole call (the caller holds
// closeMu shared, or is a background worker stopped before Close).
//
// Errors: the failure that stopped writes (ErrIOFailure and kin); a WAL
// insert or flush error; a CLOG error from removing files, after which the
// database stops taking writes (a failed directory fsync leaves what is on
// disk unknown). Safe to call concurrently with transactions and
// checkpoints; truncations are serialized by the CLOG.
func (db *DB) truncateCLOG(oldestXid uint64) error {
	if err := db.writable(); err != nil {
		return err
	}
	db.ckptInterlock.RLock()
	defer db.ckptInterlock.RUnlock()
	_, end, err := db.wal.Insert(recCLOGTruncate, 0, encodeCLOGTruncate(oldestXid))
	if err != nil {
		return db.fail(err)
	}
	if err := db.wal.FlushData(end); err != nil {
		return db.fail(err)
	}
	if err := db.clog.Truncate(oldestXid); err != nil {
		return db.fail(err)
	}
	return nil
}

// redoCLOGTruncate repeats a logged truncation. It may run when the
// truncation already completed before the crash (nothing left to do) or
// stopped half-way (the rest of the files go now).
func (db *DB) redoCLOGTruncate(rec wal.Record) error {
	oldest, err := decodeCLOGTruncate(rec.Data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	return db.clog.Truncate(oldest)
}
