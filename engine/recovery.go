package engine

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// Recovery, the analog of PostgreSQL's StartupXLOG.
//
// The control file names the redo point of the last completed checkpoint.
// Recovery reads the WAL twice from there:
//
//	pass 1: find the end of the valid log: the first record whose length,
//	        self-LSN or CRC fails ends it; bytes after it are a torn tail.
//	        Sync every WAL file, and after a crash every heap, map and
//	        CLOG file (syncDataFiles), then open the writer at the end,
//	        which zeroes the torn tail durably before anything is appended.
//	pass 2: redo. Each heap record is applied to a page only if the page's
//	        LSN is below the record's end LSN (rule 8), so pages written
//	        after the checkpoint are not changed twice; commit and abort
//	        records set the CLOG.
//
// The first pass exists so that the WAL being replayed is durable before
// any page changed by redo can be written back (rule 1): after a crash the
// tail may sit only in the operating system's cache. So may pages a killed
// process wrote to the data files, which redo reads and may leave alone,
// and which no later checkpoint of this process would otherwise sync.
//
// Transactions seen in the WAL without a commit or abort record were in
// progress at the crash; they are marked aborted. One whose records all lie
// before the redo point is not seen and stays "in progress" in the CLOG;
// not running, it reads as aborted, and vacuum treats it so (xidState).
// Then the key index is loaded from the index file the checkpoint wrote,
// and the key changes of the records redo replayed are applied to it
// (indexfile.go). Without a usable file it is rebuilt from the heap: every
// key's head is its one version whose inserter committed and whose xmax
// did not (chain.go).
//
// CLOG pages: before redo, every page from the truncation point up to the
// checkpoint's next xid is read (CheckWritten); a lost page (missing, all
// zeros) is ErrCorruption, and so is a page that fails its checksum when no
// transaction wrote to the WAL after the redo point (after a clean
// shutdown, for one): no CLOG page was written since the checkpoint made
// them durable, so the failure is damage, not a torn write. After a crash
// with transactions since, a page failing its checksum is rebuilt by redo
// if it holds only xids at or above the checkpoint's next xid, and is
// otherwise accepted as torn (the clog package's "Crash contract", which
// also names the gap that leaves and the rejected alternatives); the pages
// between that xid and the next xid after redo are read before recovery
// ends so that one redo did not touch is rebuilt too.
func (db *DB) recover(ctrl controlData) error {
	begin := time.Now()
	walPath := filepath.Join(db.dir, walDir)
	// Said first, so that a long recovery (an index rebuilt from a large
	// heap) is not silence, as PostgreSQL's "database system was
	// interrupted" line.
	// A new data directory (no checkpoint, no WAL segment, no heap page)
	// goes through the same steps, with nothing to read; its log says so
	// rather than report a recovery, as initdb does not.
	walNames, _ := db.fs.ReadDir(walPath)
	if err := db.checkWALDirectories(walPath, walNames); err != nil {
		return err
	}
	fresh := ctrl.CheckpointLSN == 0 && len(walNames) == 0 && db.storage.NBlocks() == 0
	if fresh {
		db.logger.Info("creating a new data directory", "dir", db.dir)
	} else {
		db.logger.Info("recovery starting", "dir", db.dir, "redo", ctrl.RedoLSN.String(), "checkpoint", ctrl.CheckpointLSN.String())
	}

	r, err := wal.NewReader(db.fs, walPath, ctrl.RedoLSN)
	if err != nil {
		if ctrl.CheckpointLSN != 0 && errors.Is(err, fs.ErrNotExist) {
			// Segments are removed only below the redo point, so the
			// one holding it was lost, not recycled.
			return fmt.Errorf("%w: %v; %s is the last checkpoint's redo point, as %s says (unless that control file is not this WAL's)", ErrCorruption, err, ctrl.RedoLSN, filepath.Join(db.dir, controlName))
		}
		return err
	}
	// This pass keeps nothing of a record's payload (walScan, bulkScan
	// and the checkpoint records keep numbers only).
	r.SetBorrowData(true)
	var first wal.LSN
	// The control file's checkpoint record and those after it: an index
	// file written by one of them is usable (after the control file's
	// one, a crash came between the index file and the control file).
	ckpts := make(map[wal.LSN]checkpointRecord)
	scan := newWALScan()
	var bulk bulkScan
	clogQuiet := true
	// The CLOG pages of the xids that wrote to the WAL after the redo
	// point: the only ones that can have been written since the
	// checkpoint, and so torn by a crash.
	clogTouched := map[uint64]bool{}
	// The type of the record that starts at the control file's checkpoint
	// LSN; 0 while none has been seen.
	var atCheckpoint wal.RecordType
	// Records other than the control file's checkpoint record: none
	// means nothing was logged since that checkpoint began (a clean
	// shutdown, or a crash with nothing written since).
	others := 0
	for looks := 0; ; looks++ {
		if err := db.openStopped(looks, 1024); err != nil {
			r.Close()
			return err
		}
		var rec wal.Record
		if rec, err = r.Next(); err != nil {
			break
		}
		if first == 0 {
			first = rec.LSN
		}
		if rec.LSN == ctrl.CheckpointLSN {
			atCheckpoint = rec.Type
		} else {
			others++
		}
		if rec.Type == recCheckpoint && rec.LSN >= ctrl.CheckpointLSN {
			if c, err := decodeCheckpoint(rec.Data); err == nil {
				ckpts[rec.LSN] = c
			}
		}
		scan.note(rec)
		bulk.note(rec)
		if rec.Type == recHeapTruncate {
			if n, _, err := decodeHeapTruncate(rec.Data); err == nil {
				db.redoTruncations = append(db.redoTruncations, heapTruncation{rec.LSN, n})
			}
		}
		if rec.XID != 0 && rec.LSN >= ctrl.RedoLSN {
			// A transaction wrote after the redo point: a CLOG page may
			// have been written since the checkpoint, and torn.
			clogQuiet = false
			clogTouched[rec.XID/clog.XidsPerPage] = true
		}
	}
	if !errors.Is(err, io.EOF) {
		r.Close()
		if first == 0 && ctrl.CheckpointLSN != 0 {
			// Not one record read from the redo point on: the log is
			// damaged there, or the redo point is not a record's start
			// in this WAL.
			return fmt.Errorf("%w (no record could be read from the redo point %s that %s names: the WAL is damaged there, or that control file is not this WAL's)", err, ctrl.RedoLSN, filepath.Join(db.dir, controlName))
		}
		return err
	}
	end, dropped, past := r.End(), r.DroppedBytes(), r.PastEnd()
	scanTime := time.Since(begin)
	// A heap truncation since the checkpoint may have cut the files below
	// the length it recorded: they must hold the shortest length the WAL
	// names, and what lies past it is cut again by redo, so it is not
	// judged (truncate.go).
	ckptBlocks := ctrl.HeapBlocks
	ctrl.HeapBlocks = min(ctrl.HeapBlocks, uint64(db.shortestTruncation()))
	// The checks below name that length as the checkpoint's.
	truncNote := func(err error) error {
		if err == nil || ctrl.HeapBlocks == ckptBlocks {
			return err
		}
		return fmt.Errorf("%w (%d blocks is the length a heap truncation logged after that checkpoint left; the checkpoint itself wrote %d)", err, ctrl.HeapBlocks, ckptBlocks)
	}
	if sz := r.SegmentSize(); sz != 0 && sz != db.opts.WALSegmentSize {
		// The segment size is a property of the log on disk, as
		// PostgreSQL's wal_segment_size is fixed at initdb.
		db.logger.Info("using the WAL segment size found on disk", "bytes", sz, "configured", db.opts.WALSegmentSize)
		db.opts.WALSegmentSize = sz
	}
	r.Close()
	if err := db.cutUnfinishedBulkLoads(&bulk, ctrl); err != nil {
		return err
	}
	cutBulk := len(bulk.open) > 0
	// The control file and the WAL first: with a control file that is not
	// this WAL's, every later check would blame the wrong file.
	if ctrl.CheckpointLSN != 0 && end <= ctrl.CheckpointLSN {
		return db.walEndsBeforeCheckpoint(walPath, r.SegmentSize(), end, ctrl)
	}
	if err := checkControlMatchesWAL(ctrl, end, atCheckpoint, ckpts, filepath.Join(db.dir, controlName)); err != nil {
		return err
	}
	// Every segment holds the blocks the last checkpoint wrote in it
	// (segments.go).
	layout, err := db.checkCheckpointedSegments(ctrl)
	if err != nil {
		return truncNote(err)
	}
	if ctrl.CheckpointLSN == 0 && db.storage.NBlocks() > 0 && (first == 0 || first != wal.FirstLSN(r.SegmentSize())) {
		return fmt.Errorf("%w: %s is missing, the heap holds data, and the WAL does not go back to its beginning", ErrCorruption, filepath.Join(db.dir, controlName))
	}
	if ctrl.CheckpointLSN == 0 && db.storage.NBlocks() > 0 && len(ckpts) > 0 {
		// Recoverable, since the WAL starts at its first record, but
		// not a state a database reaches by itself: a checkpoint
		// record in the WAL says a checkpoint ran, and a checkpoint
		// writes the control file right after its record (only a crash
		// between the two leaves it missing). Say so, as the file may
		// have been lost by hand. Before the first checkpoint, heap
		// pages written by evictions or a bulk load are normal.
		db.recovery.ControlFileMissing = true
		db.logger.Warn("the control file is missing but a checkpoint has run: recovering by replaying the whole WAL from its beginning",
			"file", filepath.Join(db.dir, controlName), "heap_blocks", db.storage.NBlocks(), "from", first, "checkpoint_records", len(ckpts))
	}
	zeroPages, err := db.checkStrayHeapPages(ctrl, scan, layout, end)
	if err != nil {
		return err
	}
	shortSegs, cut, err := db.shortSegmentsAfterCrash(ctrl, layout, scan, ctrl.CheckpointLSN != 0 && others == 0)
	if err != nil {
		return err
	}
	if ctrl.CheckpointLSN != 0 {
		// Damage that would read as valid data, found before anything
		// is written (damage.go).
		if err := db.clog.CheckWritten(ctrl.NextXid, func(page uint64) bool { return clogTouched[page] }); err != nil {
			return errCLOGLost(err)
		}
		// Reading every page costs what the index file saves: with a
		// usable one, a zeroed page is reported when it is first read
		// instead (SetWritten below).
		db.recovery.WrittenBlocks = uint32(min(ctrl.HeapBlocks, uint64(db.storage.NBlocks())))
		if !db.indexFileLooksUsable(ctrl, ckpts, end) {
			if err := db.checkZeroedHeapPages(ctrl, scan); err != nil {
				if !db.zeroDamaged.Load() {
					return fmt.Errorf("%w; %s", truncNote(err), zeroDamagedHint)
				}
				// zero_damaged_pages: the index rebuild takes the
				// pages as empty ones.
				db.logger.Warn("heap pages of zeros below the length the last checkpoint wrote; going on (zero_damaged_pages is on)", "err", err)
			}
			db.recovery.CheckedBlocks = db.recovery.WrittenBlocks
		}
	}
	if err := db.checkIndexPath(); err != nil {
		return err
	}
	if err := db.syncWALFiles(walPath); err != nil {
		return err
	}
	if ctrl.CheckpointLSN == 0 || others > 0 || dropped > 0 {
		if err := db.syncDataFiles(); err != nil {
			return err
		}
	}
	// After every check, before redo, which rewrites what of them held
	// data.
	if cut != 0 {
		if zeroPages, err = db.cutEmptyLaterSegments(cut, zeroPages); err != nil {
			return err
		}
	}
	if err := db.fillShortSegments(shortSegs); err != nil {
		return err
	}
	if err := db.writeEmptyPages(zeroPages, shortSegs); err != nil {
		return err
	}
	// No page of zeros is left inside the heap files but those redo
	// rebuilds from a full-page image without reading them: from here on
	// one read is damage, wherever it lies.
	db.storage.SetNoZeros()
	db.storage.SetWritten(uint32(min(ctrl.HeapBlocks, uint64(db.storage.NBlocks()))))

	db.procs = newProcArray(max(ctrl.NextXid, visibility.FirstNormalXid), db.clog.Extend)
	if db.wal, err = wal.OpenWriter(db.fs, walPath, end, wal.Options{
		SegmentSize:         db.opts.WALSegmentSize,
		Flusher:             db.opts.WALFlusher,
		CommitDelay:         max(db.opts.CommitDelay, 0),
		AdaptiveCommitDelay: db.opts.CommitDelay == CommitDelayAuto,
		CommitSiblings:      db.opts.CommitSiblings,
		ActiveTransactions:  func() int { return int(db.procs.active.Load() + db.committingEarly.Load()) },
		WALWriterDelay:      db.opts.WALWriterDelay,
		Logger:              db.logger,
		OnSegmentSwitch:     func(wal.LSN) { db.wakeCheckpointer() },
	}); err != nil {
		return err
	}
	// The Writer's Options read commit_siblings 0 as its default; the
	// setter takes it as 0.
	db.wal.SetCommitSiblings(db.opts.CommitSiblings)
	db.recovery.RemovedWALSegments = slices.Clone(db.wal.RemovedAtOpen())

	r, err = wal.NewReader(db.fs, walPath, ctrl.RedoLSN)
	if err != nil {
		return err
	}
	defer r.Close()
	ended := make(map[uint64]bool)
	maxXid, n := uint64(0), 0
	// The key index changes the replayed records carry, the last one of
	// each key: applied to the index file's keys after redo.
	changes := make(map[string]heap.TID)
	// The chunks the replayed pruning records list for vacuum: added to
	// the debt the index file carries.
	listed := make(map[chunkID]struct{})
	var replayed replayDead
	// The last bulk load commit replayed (bulkload.go).
	var bulkLSN wal.LSN
	changed := false // a record other than the last checkpoint's was replayed
	db.redoTouched = make(map[uint32]int)
	defer func() { db.redoTouched = nil }()
	redoBegin := time.Now()
	for looks := 0; ; looks++ {
		// A stop here is a crash during redo: the control file still
		// names the same checkpoint, and the WAL is durable to end.
		if err := db.openStopped(looks, 1024); err != nil {
			return err
		}
		rec, err := r.Next()
		if errors.Is(err, io.EOF) || (err == nil && rec.LSN >= end) {
			break
		}
		if err != nil {
			return err
		}
		if err := db.redo(rec); err != nil {
			return errCLOGLost(fmt.Errorf("redo of %s record at %s: %w", recordTypeName(rec.Type), rec.LSN, err))
		}
		n++
		if rec.LSN != ctrl.CheckpointLSN {
			changed = true
		}
		placed, obsoleted := noteIndexChange(rec, changes)
		replayed.note(rec, placed, obsoleted)
		if rec.Type == recHeap2Prune {
			// Decoded once more for both notes (redo decoded it
			// too, and refused it if it does not decode).
			if pages, cs, err := decodePrune(rec.Data, rec.Flags); err == nil {
				noteListedChunks(cs, listed)
				replayed.notePrune(pages, cs)
			}
		}
		if rec.Type == recBulkLoad {
			bulkLSN = rec.LSN
		}
		if rec.XID != 0 {
			maxXid = max(maxXid, rec.XID)
			if rec.Type == recCommit || rec.Type == recAbort || rec.Type == recBulkLoad {
				ended[rec.XID] = true
			} else if !ended[rec.XID] {
				ended[rec.XID] = false
			}
		}
	}
	for xid, done := range ended {
		if !done {
			if err := db.clog.SetStatus(xid, clog.StatusAborted, 0); err != nil {
				return errCLOGLost(err)
			}
		}
	}
	if maxXid >= db.procs.next() {
		db.procs.setNext(maxXid + 1)
	}
	// Every CLOG page that may have been written since the checkpoint is
	// read while recovery still may rebuild or accept it: a damaged one at
	// or above the checkpoint's next xid that redo did not read (it holds
	// no status the WAL replayed) is rebuilt now, instead of failing the
	// first transaction that reaches it, and after a crash with
	// transactions since the checkpoint one below it is accepted as torn
	// and then checked against the WAL. With none (clogQuiet), the pages
	// below passed CheckWritten's checksums above.
	from := db.clog.OldestXid()
	if clogQuiet {
		from = max(from, ctrl.NextXid)
	}
	for x := from; x < db.procs.next(); x = (x/clog.XidsPerPage + 1) * clog.XidsPerPage {
		if _, err := db.clog.Status(x); err != nil {
			return errCLOGLost(err)
		}
	}
	// A CLOG page taken for torn must agree with every commit and abort
	// record the WAL still holds for it.
	if err := db.checkTornCLOG(walPath, ctrl.RedoLSN, scan.ended); err != nil {
		return err
	}
	torn := db.clog.TornPages()
	for _, page := range slices.Sorted(maps.Keys(torn)) {
		db.recovery.CLOGTornPages = append(db.recovery.CLOGTornPages, torn[page])
	}
	db.clog.EndRecovery()
	db.afterRedo.Store(true)
	redoTime := time.Since(redoBegin)
	indexBegin := time.Now()
	reason, err := db.openIndex(ctrl, ckpts, end, changes, listed, replayed.total(), bulkLSN)
	if err != nil {
		return err
	}
	if reason != "" {
		if err := db.removeRefusedIndexFile(); err != nil {
			return err
		}
		heapMaxXid, err := db.rebuildIndex()
		if err != nil {
			return err
		}
		if heapMaxXid >= db.procs.next() {
			db.procs.setNext(heapMaxXid + 1)
		}
	}
	// The next xid is final now. A checkpoint writes the CLOG up to the
	// next xid it read before its record and the control file carry that
	// xid: a crash in between, with the latest xids' records not yet
	// durable, leaves a CLOG segment past the one of the next xid
	// recovered here (a whole one, when the xids had just crossed into
	// it). Nothing durable names its xids, which are handed out again;
	// left in place, the file would read to Verify as put there by another
	// database. After a clean shutdown (nothing logged since the
	// checkpoint's record) no crash can have left one, and such a file is
	// left for Verify to report.
	if ctrl.CheckpointLSN == 0 || others > 0 || dropped > 0 {
		removed, err := db.clog.RemoveSegmentsPast(db.procs.next() - 1)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIOFailure, err)
		}
		if len(removed) > 0 {
			db.recovery.RemovedCLOGSegments = removed
			db.logger.Warn("removed CLOG segments past the next xid: written for xids whose records the crash lost, they hold no status anything durable names",
				"files", removed, "nextXid", db.procs.next())
		}
	}
	// Nor may a status stay past the next xid on its own page: a rollback
	// that could log no abort record (the WAL had failed) still sets its
	// status, which a page write may then carry to disk without any
	// durable record of the xid. Handed out again, the xid would read as
	// aborted while its new transaction runs: vacuum and pruning would
	// remove its writes, and its commit would be lost.
	if err := db.clog.ClearPast(db.procs.next()); err != nil {
		return errCLOGLost(err)
	}
	if !db.vm.Unlogged() {
		if err := db.clearMapPastHeapEnd(); err != nil {
			return err
		}
	}
	// The fields set before redo (checks, repairs) stay as they are.
	ri := &db.recovery
	ri.RedoLSN, ri.EndLSN, ri.Records = uint64(ctrl.RedoLSN), uint64(end), n
	ri.DroppedBytes, ri.Duration = dropped, time.Since(begin)
	ri.DroppedRecords, ri.DroppedRecordsFrom = past.Records, uint64(past.First)
	ri.DroppedCommits = past.Types[recCommit] + past.Types[recBulkLoad]
	ri.IndexFromFile, ri.IndexRebuildReason, ri.IndexKeys = reason == "", reason, db.idx.len()
	ri.ScanTime, ri.RedoTime, ri.IndexTime = scanTime, redoTime, time.Since(indexBegin)
	if reason != "" && ctrl.CheckpointLSN != 0 {
		db.logger.Warn("rebuilt the key index from the heap", "reason", reason,
			"keys", db.recovery.IndexKeys, "heapBlocks", db.pool.NBlocks(), "took", db.recovery.IndexTime)
	}
	db.lastRedo.Store(uint64(ctrl.RedoLSN))
	db.redoPtr.Store(uint64(ctrl.RedoLSN))
	db.lastCkpt.Store(time.Now().UnixNano())
	// The file and offset where the cut tail begins, for the warnings
	// below: a damaged record reads as a torn tail too, and whoever looks
	// at it needs the bytes, not only the LSN.
	tornName, tornOff := wal.SegmentFile(end, db.opts.WALSegmentSize)
	tornFile := filepath.Join(walPath, tornName)
	switch {
	case past.Records > 0:
		// Not only a torn end: valid records lie past the bytes that
		// ended the log. Say how many, and how many commits, so that
		// durable WAL zeroed in the middle is not reported as a few
		// unsynced bytes.
		db.logger.Warn("cut off torn WAL tail, with valid records after the damage",
			"at", end.String(), "file", tornFile, "offset", tornOff, "droppedBytes", dropped,
			"damagedBytes", uint64(past.First-end), "validRecordsAfter", past.Records,
			"commitsAfter", ri.DroppedCommits, "validFrom", past.First.String(), "validTo", past.Last.String(),
			"note", "a crash's torn write leaves this, and so does WAL zeroed or damaged after it was durable, in which case these commits were acknowledged and are lost")
	case dropped > 0:
		db.logger.Warn("cut off torn WAL tail", "at", end.String(), "file", tornFile, "offset", tornOff, "droppedBytes", dropped)
	}
	index := "index file"
	switch {
	case reason == "":
	case ctrl.RedoLSN == 0 && n == 0:
		index = "new" // a new data directory: nothing to read
	default:
		index = "heap scan"
	}
	if fresh && n == 0 {
		db.logger.Info("new data directory ready", "took", db.recovery.Duration)
	} else {
		db.logger.Info("recovery complete", "redo", ctrl.RedoLSN.String(), "end", end.String(),
			"records", n, "redoBytes", uint64(end-ctrl.RedoLSN), "scanTook", scanTime, "redoTook", redoTime,
			"index", index, "keys", db.recovery.IndexKeys, "indexTook", db.recovery.IndexTime,
			"took", db.recovery.Duration)
	}
	if reason != "" || cutBulk {
		// After a rebuild, so that the next Open finds an index file of
		// this checkpoint instead of scanning the heap again; after
		// cutting an unfinished bulk load, so that the next recovery,
		// which would find its BULK_LOAD_BEGIN again, starts past it
		// and cannot cut pages written since.
		ckptBegin := time.Now()
		if err := db.checkpoint(); err != nil {
			return err
		}
		if fresh && n == 0 {
			db.logger.Info("first checkpoint of the new data directory complete", "took", time.Since(ckptBegin))
		} else {
			db.logger.Info("end-of-recovery checkpoint complete", "took", time.Since(ckptBegin))
		}
		return nil
	}
	db.ckptID.Store(ckpts[ctrl.CheckpointLSN].id)
	if changed || dropped > 0 {
		// The end-of-recovery checkpoint runs in the background, as
		// PostgreSQL's after a promotion: Open returns once redo and
		// the index are done, and the checkpointer starts at once.
		// Nothing recovery decided needs it: the torn tail is already
		// zeroed durably, redo is idempotent from the same redo point,
		// and the WAL from there stays until a checkpoint completes.
		// A crash before it ends replays the same records again.
		db.ckptRequested.Store(true)
		return nil
	}
	// Nothing but the last checkpoint's record since its redo point (a
	// clean shutdown): nothing to write, and the directory is left as
	// it was.
	db.ckptEnd.Store(uint64(end))
	return nil
}

// checkWALDirectories reports as corruption a directory in the WAL
// directory whose name is a segment's (or a segment's being prepared),
// before the log is read: the reader would take it for a segment, the
// writer could neither create nor remove a segment of that name, and
// opening would otherwise fail with a bare "is a directory" from whichever
// first opened it. A directory of any other name is a stranger, which
// recovery ignores and Verify names, as a file of such a name.
func (db *DB) checkWALDirectories(walPath string, names []string) error {
	for _, n := range names {
		if !wal.IsSegmentName(n) {
			continue
		}
		p := filepath.Join(walPath, n)
		if _, err := db.fs.ReadDir(p); err == nil {
			return fmt.Errorf("%w: %s is a directory where the WAL segment file of that name belongs (the log cannot be read or written past it); with the database closed, move it away",
				ErrCorruption, p)
		}
	}
	return nil
}

// syncWALFiles fsyncs the WAL segment files (and their temporary names)
// in dir. Other names there are strangers, which recovery ignores and
// Verify reports: they are not opened, so that a directory or a file
// another program keeps there does not fail Open.
func (db *DB) syncWALFiles(dir string) error {
	return db.syncFilesIn(dir, "WAL", wal.IsSegmentName)
}

// syncDataFiles fsyncs the heap, visibility map and CLOG files and their
// directories, as PostgreSQL's SyncDataDirectory does before crash
// recovery. A process
// killed after writing a page and before its fsync (a checkpoint's CLOG
// page, an eviction) leaves that write in the operating system's cache,
// where recovery reads it: a CLOG page already saying committed is not
// dirtied by redo of the commit, nor a map page whose bit is already
// clear by redo of the change that cleared it, so the end-of-recovery
// checkpoint neither writes nor fsyncs them (each layer fsyncs only the
// files it wrote), and moves the redo point past the records that could
// rebuild them. A power loss after that would bring back the older page
// on disk: commits acknowledged before the kill would read as aborted
// (a map bit would come back set, until Open's check of the map against
// the heap cleared it again). Heap files are synced too, as PostgreSQL
// syncs every file, although redo rebuilds every heap page changed since
// the redo point from its full-page image and writes it again: an fsync
// of a file holding nothing unsynced costs little. After a clean shutdown
// (nothing logged since the last checkpoint's record) that checkpoint
// synced everything written before it and nothing was written after, so
// the caller skips this.
func (db *DB) syncDataFiles() error {
	clogFile := func(n string) bool {
		_, ok := clog.ParseSegmentName(n)
		return ok || clog.IsOwnFile(n)
	}
	for _, d := range []struct {
		sub   string
		owned func(string) bool
	}{{heapDir, heap.IsSegmentName}, {vmDir, heap.IsSegmentName}, {clogDir, clogFile}} {
		dir := filepath.Join(db.dir, d.sub)
		if err := db.syncFilesIn(dir, d.sub, d.owned); err != nil {
			return err
		}
		// And the names: a segment file the killed process removed (a
		// CLOG truncation's) could otherwise come back.
		if err := db.fs.SyncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrIOFailure, withPath("fsync", dir, err))
		}
	}
	return nil
}

// syncFilesIn fsyncs the files in dir whose names owned accepts; what
// names the directory in messages ("WAL", "heap"). A directory that does
// not exist holds nothing to sync.
func (db *DB) syncFilesIn(dir, what string, owned func(string) bool) error {
	names, err := db.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		if !owned(name) {
			continue
		}
		p := filepath.Join(dir, name)
		f, err := db.fs.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			// Listed, and yet not there: a symbolic link to nothing (Open
			// holds the directory's lock, so no one removed it since).
			return fmt.Errorf("%w: %s is listed in the %s directory but cannot be opened (%v; a symbolic link to a file that does not exist?): put the file back",
				ErrCorruption, p, what, err)
		}
		if err != nil {
			return fmt.Errorf("%w: open %s to fsync it: %w", ErrIOFailure, p, err)
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIOFailure, withPath("fsync", p, err))
		}
	}
	return nil
}

func (db *DB) redo(rec wal.Record) error {
	switch rec.Type {
	case recHeapInsert, recHeapUpdate, recHeapDelete:
	case recCommit:
		return db.clog.SetStatus(rec.XID, clog.StatusCommitted, uint64(rec.End))
	case recAbort:
		return db.clog.SetStatus(rec.XID, clog.StatusAborted, uint64(rec.End))
	case recCheckpoint:
		_, err := decodeCheckpoint(rec.Data)
		return err
	case recHeap2Prune:
		return db.redoPrune(rec)
	case recHeap2Visible:
		return db.redoVisible(rec)
	case recCLOGTruncate:
		return db.redoCLOGTruncate(rec)
	case recIndexHead:
		_, _, err := decodeIndexHead(rec.Data)
		return err
	case recIndexHeads:
		_, err := decodeIndexHeads(rec.Data)
		return err
	case recBulkLoadBegin, recBulkLoad, recBulkVisible:
		return db.redoBulkLoad(rec)
	case recHeapTruncate:
		return db.redoHeapTruncate(rec)
	case recFPI, recFPIForHint:
		blk, img, err := decodeFPI(rec.Data, rec.Flags)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCorruption, err)
		}
		return db.overwriteBlock(blk, rec.End, func(page []byte) error {
			copy(page, img)
			return nil
		})
	default:
		return fmt.Errorf("%w: unknown record type %d", ErrCorruption, rec.Type)
	}
	hr, err := decodeHeapRecord(rec.Type, rec.Data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	if err := db.redoClearVM(rec, hr); err != nil {
		return err
	}
	place := func(page []byte) error {
		if heap.IsNew(page) {
			heap.InitPage(page)
		}
		clearPDAllVisible(page)
		return heap.PutTupleAt(page, hr.New.Slot, hr.Tuple)
	}
	mark := func(page []byte) error {
		clearPDAllVisible(page)
		return db.setXmaxOnPage(page, hr.Old, rec.XID, hr.New.Valid())
	}
	if rec.Flags&flagInitPage != 0 && hr.New.Valid() {
		// The page was empty before this record: rebuild it from nothing,
		// without reading what is on disk (it may be torn).
		init := func(page []byte) error {
			clear(page)
			heap.InitPage(page)
			if err := heap.PutTupleAt(page, hr.New.Slot, hr.Tuple); err != nil {
				return err
			}
			if hr.Old.Valid() && hr.Old.Block == hr.New.Block {
				return mark(page)
			}
			return nil
		}
		if err := db.overwriteBlock(hr.New.Block, rec.End, init); err != nil {
			return err
		}
		if hr.Old.Valid() && hr.Old.Block != hr.New.Block {
			return db.redoBlock(hr.Old.Block, rec.End, mark)
		}
		return nil
	}
	switch {
	case hr.New.Valid() && hr.Old.Valid() && hr.New.Block == hr.Old.Block:
		return db.redoBlock(hr.New.Block, rec.End, func(p []byte) error {
			if err := place(p); err != nil {
				return err
			}
			return mark(p)
		})
	case hr.New.Valid() && hr.Old.Valid():
		if err := db.redoBlock(hr.New.Block, rec.End, place); err != nil {
			return err
		}
		return db.redoBlock(hr.Old.Block, rec.End, mark)
	case hr.New.Valid():
		return db.redoBlock(hr.New.Block, rec.End, place)
	default:
		return db.redoBlock(hr.Old.Block, rec.End, mark)
	}
}

// redoBlock applies fn to a block unless the page already reflects the
// record (page LSN >= the record's end).
func (db *DB) redoBlock(blk uint32, end wal.LSN, fn func(page []byte) error) error {
	if blk == noBlock {
		return fmt.Errorf("%w: block number %d", ErrCorruption, blk)
	}
	if db.doomedByTruncate(blk, end) {
		return nil
	}
	db.pool.EnsureBlocks(blk + 1)
	buf, err := db.pool.Get(blk)
	if err != nil {
		return err
	}
	defer buf.Release()
	buf.Lock()
	defer buf.Unlock()
	page := buf.Page()
	if heap.PageLSN(page) >= uint64(end) {
		return nil
	}
	if err := fn(page); err != nil {
		return fmt.Errorf("%w: block %d: %v", ErrCorruption, blk, err)
	}
	heap.SetPageLSN(page, uint64(end))
	buf.MarkDirty()
	db.noteRedoTouched(blk, page)
	return nil
}

// overwriteBlock rebuilds a block whole, whatever its LSN, without reading
// it from disk (a full-page image, or a page a record initializes).
func (db *DB) overwriteBlock(blk uint32, end wal.LSN, fn func(page []byte) error) error {
	if blk == noBlock {
		return fmt.Errorf("%w: block number %d", ErrCorruption, blk)
	}
	if db.doomedByTruncate(blk, end) {
		return nil
	}
	db.pool.EnsureBlocks(blk + 1)
	buf, err := db.pool.GetZeroed(blk)
	if err != nil {
		return err
	}
	defer buf.Release()
	buf.Lock()
	defer buf.Unlock()
	if err := fn(buf.Page()); err != nil {
		return fmt.Errorf("%w: block %d: %v", ErrCorruption, blk, err)
	}
	heap.SetPageLSN(buf.Page(), uint64(end))
	buf.MarkDirty()
	db.noteRedoTouched(blk, buf.Page())
	return nil
}

// zeroDamagedHint ends the error of an Open refused because a heap page
// fails its checks while the index is rebuilt from the heap, which reads
// every page: the way on is the setting that gives such pages up.
const zeroDamagedHint = "the key index is rebuilt from every heap page, and Open cannot get past a damaged one: " +
	"to open the database without the versions on damaged pages, keep a copy of the directory and set zero_damaged_pages " +
	"(mvkv serve --zero-damaged-pages on; embedded, Options.ZeroDamagedPages)"

// rebuildIndex scans the whole heap and points every key at the head of its
// version chain. It returns the largest xid found in a tuple header. A page
// whose LSN lies beyond the end of the WAL (written after WAL that is now
// missing, whose tuples' xids could be handed out again) fails it: the
// buffer pool refuses such a page when it reads it (poolStorage).
func (db *DB) rebuildIndex() (maxXid uint64, err error) {
	// Chunks, and the chunks some version's external pointer names: the
	// difference are orphans for the next vacuum (vacuum.go). A pointer
	// or directory names a slot only with its own xmin, which every chunk
	// of its value carries: an aborted version may name slots pruning
	// freed and another value's chunk took since (prunePageLocked).
	var chunks []chunkID
	usedChunks := make(map[chunkID]struct{})
	relFrozenXid := uint64(math.MaxUint64)
	// Dead versions, for autovacuum: the debt a restart must not forget
	// (PostgreSQL's pgstat loses n_dead_tup after a crash).
	var dead int64
	var mapWrong, frozenWrong []uint32
	nblocks := db.pool.NBlocks()
	db.idx.mu.Lock()
	defer db.idx.mu.Unlock()
	for blk := uint32(0); blk < nblocks; blk++ {
		if err := db.openStopped(int(blk), 64); err != nil {
			return 0, err
		}
		buf, err := db.pool.Get(blk)
		if err != nil {
			if errors.Is(err, heap.ErrCorrupt) {
				// The page failed its own checks, which is what
				// zero_damaged_pages gives up: say so, since no key can
				// be read until Open gets past the page.
				err = fmt.Errorf("%w; %s", err, zeroDamagedHint)
			}
			return 0, err
		}
		buf.RLock()
		page := buf.Page()
		// The map bits against the page, as the background check does
		// after an Open that reads no heap page (checkMapBits).
		if !db.vm.Unlogged() {
			switch db.clearWrongMapBitsLocked(blk, page) {
			case mapBitsNotAllVisible:
				mapWrong = append(mapWrong, blk)
			case mapBitsNotAllFrozen:
				frozenWrong = append(frozenWrong, blk)
			}
		}
		var perr error
		if !heap.IsNew(page) {
			for s := 0; s < heap.NumSlots(page); s++ {
				raw, err := heap.Tuple(page, uint16(s))
				if errors.Is(err, heap.ErrBadSlot) {
					continue // an unused or dead line pointer
				}
				if err != nil {
					perr = fmt.Errorf("%w: heap block %d slot %d: %v", ErrCorruption, blk, s, err)
					break
				}
				h, key, val, err := heap.DecodeTuple(raw)
				if err != nil {
					perr = fmt.Errorf("%w: heap block %d slot %d: %v", ErrCorruption, blk, s, err)
					break
				}
				maxXid = max(maxXid, h.Xmin, h.Xmax)
				tid := heap.TID{Block: blk, Slot: uint16(s)}
				// Chunks too: an unfrozen chunk's xmin is looked up in
				// the CLOG (vacuum, Verify), so RelFrozenXid must not pass it.
				if h.Infomask&heap.Frozen == 0 {
					relFrozenXid = min(relFrozenXid, h.Xmin)
				}
				if h.Infomask&heap.Chunk != 0 {
					chunks = append(chunks, chunkID{tid, h.Xmin})
					if isDirectory(h.Infomask) {
						// Its chunks are freed through it, whether
						// a version names it or it is an orphan.
						ctids, err := parseDirectory(val, -1)
						if err != nil {
							perr = fmt.Errorf("%w: heap block %d slot %d: %v", ErrCorruption, blk, s, err)
							break
						}
						for _, c := range ctids {
							usedChunks[chunkID{c, h.Xmin}] = struct{}{}
						}
					}
					continue
				}
				if h.Infomask&heap.External != 0 {
					ctids, err := chunkTIDs(val)
					if err != nil {
						perr = fmt.Errorf("%w: heap block %d slot %d: %v", ErrCorruption, blk, s, err)
						break
					}
					for _, c := range ctids {
						usedChunks[chunkID{c, h.Xmin}] = struct{}{}
					}
				}
				if h.Xmax != 0 {
					relFrozenXid = min(relFrozenXid, h.Xmax)
				}
				// The key's newest version is the one whose inserter
				// committed and whose xmax did not (chain.go); nothing
				// runs yet, so an xid still in progress crashed. A key
				// with none is deleted or never committed, and gets no
				// entry: its versions are left to pruning.
				v := version{tid: tid, hdr: h}
				committed, aborted, err := db.xidState(&v, false)
				if err == nil && committed && h.Xmax != 0 {
					var gone bool
					gone, _, err = db.xidState(&v, true)
					committed = !gone
					aborted = gone
				}
				if aborted {
					dead++ // aborted, or deleted or replaced
				}
				if err != nil {
					perr = fmt.Errorf("heap block %d slot %d: %w", blk, s, err)
					break
				}
				if committed {
					e := db.idx.getOrCreateLocked(key)
					if old := e.headTID(); old.Valid() {
						perr = fmt.Errorf("%w: key %q has two newest versions %s and %s", ErrCorruption, truncKey(key), old, tid)
						break
					}
					e.head.Store(tid.Pack())
				}
			}
			db.fsm.record(blk, heap.FreeSpace(page))
			if blk == nblocks-1 {
				db.targets.blk[0].Store(blk)
			}
		}
		buf.RUnlock()
		buf.Release()
		if perr != nil {
			return 0, perr
		}
	}
	var orphans []chunkID
	for _, c := range chunks {
		if _, ok := usedChunks[c]; !ok {
			orphans = append(orphans, c)
		}
	}
	db.vac.debt.reset(orphans)
	if relFrozenXid == math.MaxUint64 {
		relFrozenXid = max(maxXid+1, db.procs.next())
	}
	db.vac.relFrozenXid.Store(relFrozenXid)
	db.av.dead.Store(dead)
	db.noteWrongMapBits(mapWrong, frozenWrong)
	return maxXid, nil
}

// walEndsBeforeCheckpoint describes a log whose valid part ends at or
// before the checkpoint record the control file names: where it ends (the
// segment file and offset, or the file's own end when the file was cut
// short of the segment size, which no crash can do: segments are created
// whole) and which record is lost.
func (db *DB) walEndsBeforeCheckpoint(walPath string, segSize int64, end wal.LSN, ctrl controlData) error {
	if segSize <= 0 && db.opts.WALSegmentSize > 0 {
		// No segment file is left, so none gives the segment size; the
		// configured one names the file the checkpoint record was in
		// (segments are removed only below the redo point, so it was
		// lost, not removed by a checkpoint).
		name, _ := wal.SegmentFile(ctrl.CheckpointLSN, db.opts.WALSegmentSize)
		return fmt.Errorf("%w: %s holds no WAL segment: %s, which held the last checkpoint record (%s) that the control file names, is missing, and every segment after it (the name assumes the configured segment size, %d bytes), or the control file is not this WAL's",
			ErrCorruption, walPath, filepath.Join(walPath, name), ctrl.CheckpointLSN, db.opts.WALSegmentSize)
	}
	where := walPath
	if segSize > 0 {
		name, off := wal.SegmentFile(end, segSize)
		file := filepath.Join(walPath, name)
		where = fmt.Sprintf("%s at offset %d", file, off)
		if n, err := db.fs.Stat(file); err == nil && n < segSize {
			switch {
			case n < off:
				// Nothing past the file's end can have been read, so the
				// log ends where reading began: at the redo point.
				where = fmt.Sprintf("%s is %d bytes, cut short of the %d-byte segment size; the last checkpoint's redo point %s lies at its offset %d, past the file's end", file, n, segSize, ctrl.RedoLSN, off)
			case n == off:
				where += fmt.Sprintf(", the file's end (it is cut short of the %d-byte segment size)", segSize)
			}
		}
	}
	if end == ctrl.CheckpointLSN {
		return fmt.Errorf("%w: %s: the last checkpoint record (%s), which the control file names, is damaged or missing, or the control file is not this WAL's", ErrCorruption, where, ctrl.CheckpointLSN)
	}
	return fmt.Errorf("%w: %s: the valid WAL ends there (%s), before the last checkpoint record (%s): the WAL from there on is damaged or missing, or the control file is not this WAL's", ErrCorruption, where, end, ctrl.CheckpointLSN)
}

// checkControlMatchesWAL checks that the WAL read up to end holds, at the
// control file's checkpoint LSN, the checkpoint record the control file
// was written for: one record starting there (atCheckpoint is its type, 0
// if none started there), a checkpoint with the same redo point and next
// xid, written by the database of the same system identifier. A control file copied from another database, or an older or newer
// copy of this one's, names a place in this WAL that holds something else;
// taking its redo point and next xid would replay from the wrong place or
// hand out xids again, so Open stops, as PostgreSQL stops on "invalid
// checkpoint record". A WAL that ends before the checkpoint LSN is left to
// the checks that name the WAL's damage.
func checkControlMatchesWAL(ctrl controlData, end wal.LSN, atCheckpoint wal.RecordType, ckpts map[wal.LSN]checkpointRecord, controlPath string) error {
	if ctrl.CheckpointLSN == 0 || end <= ctrl.CheckpointLSN {
		return nil
	}
	mismatch := func(what string) error {
		return fmt.Errorf("%w: %s names a checkpoint record at %s with redo point %s and next xid %d, but %s: the control file does not belong with this WAL (a copy from another database, or an older or newer copy of this one's)",
			ErrCorruption, controlPath, ctrl.CheckpointLSN, ctrl.RedoLSN, ctrl.NextXid, what)
	}
	if atCheckpoint == 0 {
		return mismatch("no WAL record starts there")
	}
	c, ok := ckpts[ctrl.CheckpointLSN]
	if atCheckpoint != recCheckpoint || !ok {
		return mismatch(fmt.Sprintf("the WAL's record there is a %s record", recordTypeName(atCheckpoint)))
	}
	if c.redo != ctrl.RedoLSN || c.nextXid != ctrl.NextXid {
		return mismatch(fmt.Sprintf("the WAL's checkpoint record there has redo point %s and next xid %d", c.redo, c.nextXid))
	}
	if c.systemID != 0 && ctrl.SystemID != 0 && c.systemID != ctrl.SystemID {
		return mismatch(fmt.Sprintf("the WAL's checkpoint record there was written by the database with system identifier %d, and the control file is that of %d", c.systemID, ctrl.SystemID))
	}
	return nil
}
