package engine

import (
	"time"

	"mvkv/wal"
)

// Checkpoint writes every dirty heap and CLOG page, logs a checkpoint
// record, and moves the control file's redo point forward, so that recovery
// after a crash starts there; WAL segments wholly before the redo point are
// removed. Safe to call concurrently with transactions; checkpoints run one
// at a time. It returns ErrClosed after Close and the failure that stopped
// writes, if any. Visibility map pages are written after the heap pages.
//
// The checkpoint is fuzzy, as PostgreSQL's: transactions keep running while
// pages are written. It is correct because (a) heap changes hold the
// checkpoint interlock (a lock a checkpoint takes exclusively while it
// chooses the redo point) shared from the page change to the record's
// insertion, so every record below the redo point belongs to a page
// already dirty when the redo point was chosen, and the checkpoint writes
// all of those; (b) committers hold the interlock from the commit record
// to the CLOG update, so no commit record lies below the redo point while
// its CLOG bit is still unset; (c) the first change to each page after the redo point logs a
// full-page image, so a page torn while this checkpoint or a later eviction
// writes it is rebuilt by redo.
func (db *DB) Checkpoint() error {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return ErrClosed
	}
	return db.checkpoint()
}

func (db *DB) checkpoint() error {
	if err := db.writable(); err != nil {
		return err
	}
	db.ckptMu.Lock()
	defer db.ckptMu.Unlock()
	return db.checkpointLocked()
}

// checkpointLocked is checkpoint with the checkpoint lock held.
func (db *DB) checkpointLocked() error {
	if e := db.ckptEnd.Load(); e != 0 && db.wal.InsertLSN() == wal.LSN(e) && !db.mapBitsCleared.Load() {
		// Nothing was logged since the last checkpoint, so nothing
		// changed that recovery would need (hint bits aside), and a
		// directory opened only to be read or verified is left exactly
		// as it was, as PostgreSQL skips an idle checkpoint. It counts
		// as done: the state on disk is as of now. Map bits that Open's
		// check cleared are the exception: no record logs them, and
		// until a checkpoint writes them the map file on disk stays
		// wrong (mvkv verify reports it, and every Open clears them
		// again).
		db.lastCkpt.Store(time.Now().UnixNano())
		return nil
	}
	// Before the map is flushed: a bit the check clears after this is
	// either written by this checkpoint or sets the flag again.
	db.mapBitsCleared.Store(false)
	begin := time.Now()

	db.ckptInterlock.Lock()
	redo := db.wal.InsertLSN()
	db.redoPtr.Store(uint64(redo))
	// Read under the interlock, which every commit holds shared from
	// its commit record's insert to its CLOG update, and counts itself
	// only after: every commit counted here logged its record before the
	// redo point. One that logged before it but counts itself later is
	// taken for one after it, so the figure errs high, never low.
	commits := db.stats.commits.Load()
	db.ckptInterlock.Unlock()

	// The heap's length is the buffer pool's, read before FlushAll: every
	// block below it is in the file or dirty in the pool (Extend returns
	// a new page dirty), so FlushAll and its sync make them all durable,
	// and the length covers pages extended but not yet written (a page of
	// zeros below it is damage, not a page never written). Read after the
	// sync, it would count blocks an eviction wrote meanwhile (a page
	// extended after the redo point), which no sync covers yet; a crash
	// would then leave the heap shorter than the control file says, and
	// Open would call that corruption. Blocks added after this read are
	// left for the next checkpoint to count.
	heapBlocks := db.pool.NBlocks()
	if err := db.pool.FlushAll(); err != nil {
		return db.fail(err)
	}
	// Map pages after heap pages: each waits for the WAL up to its LSN
	// (the last HEAP2_VISIBLE record that set a bit on it).
	if err := db.vm.Flush(); err != nil {
		return db.fail(err)
	}
	db.storage.SetWritten(heapBlocks)
	// next is read before the CLOG is written, so that every page holding
	// an xid below it is written by this checkpoint (ExtendTo covers pages
	// no status was set on yet): Open then treats such a page found all
	// zeros as lost. An xid handed out after this read has its records
	// after the redo point, where recovery finds it.
	next := db.procs.next()
	if next > 0 {
		if err := db.clog.ExtendTo(next - 1); err != nil {
			return db.fail(err)
		}
	}
	if err := db.clog.Checkpoint(); err != nil {
		return db.fail(err)
	}
	// A new identifier for every checkpoint (see the index file's doc),
	// never 0, which marks a record written before identifiers.
	id := newIdentifier()
	start, end, err := db.wal.Insert(recCheckpoint, 0, encodeCheckpoint(checkpointRecord{redo: redo, nextXid: next, id: id, systemID: db.systemID}))
	if err == nil {
		err = db.wal.FlushData(end)
	}
	if err != nil {
		return db.fail(err)
	}
	// The index file before the control file: a crash between the two
	// leaves a file that names this checkpoint, whose record Open then
	// finds in the WAL. It is only a copy of what the heap and the WAL
	// hold, so a failure to write it does not stop writes: the checkpoint
	// fails, the control file keeps the previous one, and the next
	// checkpoint tries again.
	keys, size, err := db.writeIndexFile(redo, start, id)
	if err != nil {
		return wrapf(err, "checkpoint: writing the index file")
	}
	db.stats.indexFileKeys.Store(keys)
	db.stats.indexFileBytes.Store(uint64(size))
	if err := writeControl(db.fs, db.dir, controlData{RedoLSN: redo, CheckpointLSN: start, NextXid: next, HeapBlocks: uint64(heapBlocks), SystemID: db.systemID}); err != nil {
		return db.fail(err)
	}
	db.lastRedo.Store(uint64(redo))
	if start == redo {
		db.ckptEnd.Store(uint64(end))
	} else {
		// Records were logged between the redo point and the checkpoint
		// record: their pages may have changed after FlushAll wrote
		// them, and are dirty in the pool, not on disk. Recovery replays
		// them from the redo point; but the next checkpoint must not be
		// skipped as idle, or "the state on disk is as of now" would be
		// false (Verify, which reads the files after a checkpoint, saw
		// such a page without its newest versions). PostgreSQL skips a
		// checkpoint only when the previous one's record directly
		// follows its redo point, likewise.
		db.ckptEnd.Store(0)
	}
	db.ckptID.Store(id)
	if err := db.wal.RemoveSegmentsBefore(redo); err != nil {
		db.logger.Warn("removing old WAL segments", "err", err)
	}
	db.stats.checkpoints.Add(1)
	db.ckptCommits.Store(commits)
	db.lastCkpt.Store(time.Now().UnixNano())
	db.logger.Debug("checkpoint complete", "redo", uint64(redo), "nextXid", next, "took", time.Since(begin))
	return nil
}

// testEndOfRecoveryHook, when set by a test, runs in the checkpointer just
// before the end-of-recovery checkpoint it was asked for.
var testEndOfRecoveryHook func(db *DB)

// wakeCheckpointer has the checkpointer look at the WAL's volume now
// rather than at its next tick: the WAL moved to a new segment, and writes
// fast enough could otherwise pass max_wal_size by many segments in the
// second between two ticks. It never blocks.
func (db *DB) wakeCheckpointer() {
	select {
	case db.ckptWake <- struct{}{}:
	default:
	}
}

// checkpointer starts checkpoints by time (checkpoint_timeout) and by WAL
// volume (max_wal_size), as PostgreSQL's checkpointer process: it looks
// every second, and at each WAL segment switch (wakeCheckpointer).
func (db *DB) checkpointer() {
	defer db.bgWG.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// A requested checkpoint (the end of recovery's) starts at once.
		if !db.ckptRequested.Load() {
			select {
			case <-db.stopBG:
				return
			case <-tick.C:
			case <-db.ckptWake:
			}
		}
		requested := db.ckptRequested.Swap(false)
		byTime := db.opts.CheckpointTimeout > 0 &&
			time.Since(time.Unix(0, db.lastCkpt.Load())) >= db.opts.CheckpointTimeout
		byVolume := int64(db.wal.InsertLSN()-wal.LSN(db.lastRedo.Load())) >= db.opts.MaxWALSize
		if !requested && !byTime && !byVolume {
			continue
		}
		if db.writable() != nil {
			// A checkpoint cannot write its record now, and the failure
			// was logged when it happened: trying every second would
			// only repeat it.
			continue
		}
		if requested && testEndOfRecoveryHook != nil {
			testEndOfRecoveryHook(db)
		}
		begin := time.Now()
		if err := db.Checkpoint(); err != nil && err != ErrClosed {
			db.logger.Error("checkpoint failed", "err", err)
		} else if err == nil && requested {
			db.logger.Info("end-of-recovery checkpoint complete", "took", time.Since(begin))
		}
	}
}
