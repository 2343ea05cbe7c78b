package engine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// Damage that reads as valid data: a heap page of zeros reads as a new,
// empty page, so without a check here every version on it would vanish
// and recovery would go on. The checks run after recovery's first pass over
// the WAL and before anything is written, so that a damaged directory is
// reported and left exactly as it was found.

// walScan is what recovery's first pass learns from the records it reads
// without applying them.
type walScan struct {
	// rebuilt holds the blocks that redo rebuilds without reading them
	// (a full-page image, or a record that initializes its page): a zeroed
	// copy of such a block on disk is what redo repairs, not a loss.
	rebuilt map[uint32]bool
	// ended maps the xids with a commit (true) or abort (false) record.
	ended map[uint64]bool
	// bulk holds the block ranges of the committed bulk loads, which
	// write their pages without a record per page.
	bulk [][2]uint32
}

func newWALScan() *walScan {
	return &walScan{rebuilt: map[uint32]bool{}, ended: map[uint64]bool{}}
}

// note records what rec tells.
func (s *walScan) note(rec wal.Record) {
	switch rec.Type {
	case recFPI, recFPIForHint:
		if len(rec.Data) >= 4 {
			s.rebuilt[binary.LittleEndian.Uint32(rec.Data)] = true
		}
	case recHeapInsert, recHeapUpdate:
		if rec.Flags&flagInitPage != 0 {
			if hr, err := decodeHeapRecord(rec.Type, rec.Data); err == nil {
				s.rebuilt[hr.New.Block] = true
			}
		}
	case recBulkLoad:
		if r, err := decodeBulkLoad(rec.Type, rec.Data); err == nil {
			s.bulk = append(s.bulk, [2]uint32{r.first, r.first + r.pages})
		}
	case recCommit:
		s.ended[rec.XID] = true
	case recAbort:
		s.ended[rec.XID] = false
	}
}

// maxZeroListed bounds the blocks a zeroed-page error lists by number.
const maxZeroListed = 10

// checkZeroedHeapPages fails when a heap page below the heap length the
// last checkpoint recorded is all zeros and redo does not rebuild it: every
// page there was written by that checkpoint or before, and a written page
// is never all zeros (it has a header and a checksum). The error names the
// file, offset and block of each such page and counts the keys that can be
// proved to have lost data (lostKeys).
func (db *DB) checkZeroedHeapPages(ctrl controlData, scan *walScan) error {
	n := uint64(db.storage.NBlocks())
	limit := min(ctrl.HeapBlocks, n)
	page := make([]byte, heap.PageSize)
	var zeroed []uint32
	for blk := uint32(0); uint64(blk) < limit; blk++ {
		if scan.rebuilt[blk] {
			continue
		}
		if err := db.storage.ReadBlock(blk, page); err != nil {
			continue // a checksum failure is reported where the page is read
		}
		if isAllZero(page) {
			zeroed = append(zeroed, blk)
		}
	}
	if len(zeroed) == 0 {
		return nil
	}
	var names []string
	for _, blk := range zeroed[:min(len(zeroed), maxZeroListed)] {
		names = append(names, db.heapBlockName(blk))
	}
	chains, lost, orphans := db.lostKeys(zeroed, scan)
	return fmt.Errorf("%w: %d heap page(s) all zeros below the %d blocks the heap had at the last checkpoint, which wrote them: %s; "+
		"keys lost: %d provably (a version links into those pages and no surviving version is readable), %d more whose newest surviving version was replaced by an update that is missing; "+
		"%d keys in all have versions linking into those pages, and keys whose every version was on them cannot be counted",
		ErrCorruption, len(zeroed), ctrl.HeapBlocks, listMore(names, len(zeroed)), lost, orphans, chains)
}

// checkStrayHeapPages fails when the heap files hold a page past the
// length the last checkpoint recorded that nothing since created: a page
// added after the checkpoint has its first change logged whole (a
// full-page image or a record that initializes it) or lies in a committed
// bulk load, so a page out there that is neither, and is not all zeros
// (extended, never used), was not written by this database: a segment
// file left from another copy, say, or bytes appended to one of its own
// files, whose pages the engine would otherwise read as its own and write
// new versions into. The error names the file, offset and block of the
// first such page, and guesses at a foreign file only when the whole file
// lies past that length.
//
// A valid page with no line pointers holds nothing, whoever wrote it, and
// is taken as a new page: recovery writes such pages in place of pages of
// zeros (writeEmptyPages, fillShortSegments) and a crash can come before
// the next checkpoint counts them.
//
// A stray page whose page LSN lies past end, the end of the valid WAL,
// is named as evidence of lost WAL rather than of a foreign file: a page
// reaches its file only once the WAL up to its LSN is durable (rule 1),
// so the WAL from end to that LSN was durable once. It is the one sign
// this check can give of WAL zeroed or cut from past the last checkpoint
// record to the end of what was written, which otherwise reads as the
// end of the log; a page below the checkpoint's length, written by an
// eviction since, would show it as well, but those are not read here.
//
// It returns the pages out there that are all zeros and that no record
// rebuilds, for writeEmptyPages (with no checkpoint yet, the whole heap
// lies out there and only those are looked for). Only blocks inside the
// files are read (l is the files' layout): a block past a file's end or in
// a missing segment holds nothing to check, and a stray file far past the
// heap costs its own size, not the gap before it.
func (db *DB) checkStrayHeapPages(ctrl controlData, scan *walScan, l heap.Layout, end wal.LSN) (zero []uint32, err error) {
	// Redo cuts the pages past the shortest length a truncation since
	// the checkpoint left (truncate.go): whatever they hold is not read.
	n := min(db.storage.NBlocks(), db.shortestTruncation())
	if uint64(n) <= ctrl.HeapBlocks {
		return nil, nil
	}
	page := make([]byte, heap.PageSize)
	for _, g := range l.Segments {
		if g.Missing || g.Size == 0 {
			continue
		}
		from := max(uint64(g.FirstBlock()), ctrl.HeapBlocks)
		// A partial last page counts: it reads as new, and is written
		// whole with the zeros.
		to := min(uint64(g.FirstBlock())+uint64((g.Size+heap.PageSize-1)/heap.PageSize), uint64(n))
		for b := from; b < to; b++ {
			blk := uint32(b)
			if scan.rebuilt[blk] || slices.ContainsFunc(scan.bulk, func(r [2]uint32) bool { return blk >= r[0] && blk < r[1] }) {
				continue
			}
			err := db.storage.ReadBlock(blk, page)
			if err == nil && isAllZero(page) {
				zero = append(zero, blk)
				continue
			}
			if err == nil && heap.NumSlots(page) == 0 {
				continue // an empty page: nothing in it
			}
			if ctrl.CheckpointLSN == 0 {
				continue
			}
			if err == nil && wal.LSN(heap.PageLSN(page)) > end {
				return nil, db.walLostBeforePageError(ctrl, blk, wal.LSN(heap.PageLSN(page)), end)
			}
			return nil, db.strayPageError(ctrl, blk, err)
		}
	}
	return zero, nil
}

// strayPageError is checkStrayHeapPages's error for block blk, which holds
// data, or fails its checks when readErr is not nil.
func (db *DB) strayPageError(ctrl controlData, blk uint32, readErr error) error {
	what := "holds data"
	if readErr != nil {
		what = "holds a page that fails its checks" // the same file and offset
	}
	guess := ""
	if seg := blk / heap.SegmentBlocks; uint64(seg)*heap.SegmentBlocks >= ctrl.HeapBlocks {
		guess = fmt.Sprintf("; all of %s lies past that length: a file that is not this database's (a segment file from another copy?)", db.heapSegmentPath(seg))
	}
	return fmt.Errorf("%w: %s %s, past the %d blocks the heap had at the last checkpoint, and no WAL record since that checkpoint writes that page: this database did not write it%s",
		ErrCorruption, db.heapBlockName(blk), what, ctrl.HeapBlocks, guess)
}

// walLostBeforePageError is checkStrayHeapPages's error for block blk,
// which holds data and a page LSN, lsn, past end, the end of the valid
// WAL.
func (db *DB) walLostBeforePageError(ctrl controlData, blk uint32, lsn, end wal.LSN) error {
	name, off := wal.SegmentFile(end, db.opts.WALSegmentSize)
	return fmt.Errorf("%w: %s holds data, past the %d blocks the heap had at the last checkpoint, with a page LSN (%s) past the end of the valid WAL (%s, %s at offset %d): a page is written only once the WAL up to its LSN is durable, so the WAL from %s to at least %s was lost after it was written (zeroed or cut off to the end of what was written), or the page is not this database's",
		ErrCorruption, db.heapBlockName(blk), ctrl.HeapBlocks, lsn, end, filepath.Join(db.dir, walDir, name), off, end, lsn)
}

// writeEmptyPages writes an empty page in place of each page of zeros
// that checkStrayHeapPages found past the last checkpoint's heap length
// (pages extended and never written before a crash, or a hole left where
// a later page reached the disk first) and that a filled segment does not
// already cover, and syncs them. The next checkpoint's heap length covers
// them, and below that length a page of zeros is damage; PostgreSQL, which
// has no such length, takes a page of zeros for a new page instead.
func (db *DB) writeEmptyPages(zero []uint32, filled []heap.Segment) error {
	zero = slices.DeleteFunc(zero, func(blk uint32) bool {
		return slices.ContainsFunc(filled, func(g heap.Segment) bool {
			return blk >= g.FirstBlock()+g.Blocks() && blk < g.FirstBlock()+heap.SegmentBlocks
		})
	})
	if len(zero) == 0 {
		return nil
	}
	// One write per run of consecutive blocks.
	for i := 0; i < len(zero); {
		j := i + 1
		for j < len(zero) && zero[j] == zero[j-1]+1 {
			j++
		}
		if _, err := db.storage.WriteEmptyPages(zero[i], uint32(j-i)); err != nil {
			return fmt.Errorf("%w: %w", ErrIOFailure, err)
		}
		i = j
	}
	if err := db.storage.Sync(); err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, err)
	}
	db.recovery.EmptiedBlocks = uint32(len(zero))
	db.logger.Info("wrote empty pages in place of pages of zeros past the last checkpoint's heap length (extended and not written before the crash)",
		"blocks", len(zero), "first", db.heapBlockName(zero[0]))
	return nil
}

func isAllZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// lostKeys scans the rest of the heap (read only) for versions whose Prev
// link leads into a zeroed block. It returns how many keys have such a
// version, and how many of those have no surviving version that a reader
// could return: no version whose inserter committed and whose deleter did
// not. Such a key's committed value was on a zeroed page. orphans counts the
// other keys with no version a reader could return whose newest surviving
// version was replaced by a committed update that no surviving version
// names: the new version is missing, most likely from a zeroed page (a
// later delete's pruning can leave the same shape, so these are not
// counted as proved).
func (db *DB) lostKeys(zeroed []uint32, scan *walScan) (chains, lost, orphans int) {
	isZeroed := make(map[uint32]bool, len(zeroed))
	for _, b := range zeroed {
		isZeroed[b] = true
	}
	committed := func(xid uint64, infomask, hintCommitted, hintInvalid uint16) bool {
		if infomask&hintCommitted != 0 {
			return true
		}
		if infomask&hintInvalid != 0 {
			return false
		}
		if c, ok := scan.ended[xid]; ok {
			return c
		}
		st, err := db.clog.Status(xid)
		return err == nil && st == clog.StatusCommitted
	}
	type keyState struct {
		intoZeroed, live bool
		updated          []uint64 // versions replaced by a committed update
	}
	keys := map[string]*keyState{}
	named := map[uint64]bool{} // versions some surviving version names as Prev
	db.scanStoredTuples(db.storage.NBlocks(), func(blk uint32) bool { return isZeroed[blk] }, nil, func(tid heap.TID, h heap.TupleHeader, key, _ []byte) {
		if h.Infomask&heap.Chunk != 0 {
			return
		}
		ks := keys[string(key)]
		if ks == nil {
			ks = &keyState{}
			keys[string(key)] = ks
		}
		if h.Prev.Valid() {
			named[h.Prev.Pack()] = true
			if isZeroed[h.Prev.Block] {
				ks.intoZeroed = true
			}
		}
		xminOK := h.Infomask&heap.Frozen != 0 || committed(h.Xmin, h.Infomask, heap.XminCommitted, heap.XminInvalid)
		xmaxOK := h.Xmax != 0 && committed(h.Xmax, h.Infomask, heap.XmaxCommitted, heap.XmaxInvalid)
		if xminOK && !xmaxOK {
			ks.live = true
		}
		if xminOK && xmaxOK && h.Infomask&heap.Updated != 0 {
			ks.updated = append(ks.updated, tid.Pack())
		}
	})
	for _, ks := range keys {
		if ks.intoZeroed {
			chains++
			if !ks.live {
				lost++
			}
			continue
		}
		if ks.live {
			continue
		}
		for _, t := range ks.updated {
			if !named[t] {
				orphans++
				break
			}
		}
	}
	return chains, lost, orphans
}

// errCLOGLost wraps a CLOG page check failure as ErrCorruption.
func errCLOGLost(err error) error {
	if errors.Is(err, clog.ErrCorrupt) {
		return fmt.Errorf("%w: %v", ErrCorruption, err)
	}
	return err
}

// checkTornCLOG tells a CLOG page that recovery accepted as torn by the
// crash (it failed its checksum and holds xids below the checkpoint's next
// xid) from a damaged one, as far as the WAL allows. A torn page keeps
// every status decided before that checkpoint (the checkpoint wrote them,
// and each sector of a later write holds its old or its new bits, both
// with them), and redo set every status decided since; so any status on
// such a page that disagrees with a commit or abort record still in the
// WAL is damage, and the whole page is then refused as corruption. ended
// maps the xids with such a record (true: commit) from the redo point on;
// the records before it are read from walPath here, only when a page was
// taken for torn. Nor does any write store sub-committed, so an xid below
// the next xid that reads so is damage too, record or none. Other statuses
// whose records the WAL no longer holds (most of those decided before the
// checkpoint: segments below its redo point are removed) cannot be
// checked, and damage among them alone still reads as a tear: the gap the
// clog package's "Crash contract" names.
func (db *DB) checkTornCLOG(walPath string, redo wal.LSN, ended map[uint64]bool) error {
	torn := db.clog.TornPages()
	if len(torn) == 0 {
		return nil
	}
	ended = maps.Clone(ended)
	if r, err := wal.NewReader(db.fs, walPath, 0); err == nil {
		r.SetBorrowData(true)
		for {
			rec, err := r.Next()
			if err != nil || rec.LSN >= redo {
				break
			}
			switch rec.Type {
			case recCommit:
				ended[rec.XID] = true
			case recAbort:
				ended[rec.XID] = false
			}
		}
		r.Close()
	}
	oldest := db.clog.OldestXid()
	type mismatch struct {
		xid       uint64
		got, want clog.Status
	}
	var bad []mismatch
	// Nor does a tear make a status mvkv never writes (sub-committed): each
	// sector holds bits some write of the page stored, and no write stores
	// that one. So any xid below the next xid that reads so on a page taken
	// for torn is damage, wherever its record went.
	next := db.procs.next()
	for _, page := range slices.Sorted(maps.Keys(torn)) {
		for xid := max(page*clog.XidsPerPage, oldest); xid < min((page+1)*clog.XidsPerPage, next); xid++ {
			got, err := db.clog.Status(xid)
			if err != nil {
				return errCLOGLost(err)
			}
			if got == clog.StatusSubCommitted {
				bad = append(bad, mismatch{xid, got, clog.StatusSubCommitted})
			}
		}
	}
	for xid, committed := range ended {
		if xid < oldest {
			continue
		}
		if _, ok := torn[xid/clog.XidsPerPage]; !ok {
			continue
		}
		want := clog.StatusAborted
		if committed {
			want = clog.StatusCommitted
		}
		got, err := db.clog.Status(xid)
		if err != nil {
			return errCLOGLost(err)
		}
		if got != want {
			bad = append(bad, mismatch{xid, got, want})
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.SortFunc(bad, func(a, b mismatch) int { return cmp.Compare(a.xid, b.xid) })
	how := "it holds a status no write stores"
	for _, m := range bad {
		if m.want != clog.StatusSubCommitted {
			how = "it disagrees with the WAL"
			break
		}
	}
	var parts []string // "; " between them: each holds a comma
	for _, m := range bad[:min(len(bad), 5)] {
		if m.want == clog.StatusSubCommitted {
			parts = append(parts, fmt.Sprintf("xid %d reads %s", m.xid, m.got))
			continue
		}
		rec := "commit"
		if m.want == clog.StatusAborted {
			rec = "abort"
		}
		parts = append(parts, fmt.Sprintf("xid %d reads %s, its %s record says %s", m.xid, m.got, rec, m.want))
	}
	page := bad[0].xid / clog.XidsPerPage
	return fmt.Errorf("%w: CLOG page %d (%s) failed its checksum after the crash and was taken for a write torn by it, but %s: %s%s: a torn write keeps every status decided before the last checkpoint and makes no sub-committed one, so the page is damaged, and the statuses on it whose records the WAL no longer holds cannot be trusted either",
		ErrCorruption, page, torn[page], how, strings.Join(parts, "; "), listMore(nil, len(bad)-len(parts)))
}

// scanForDamagedPages is Open's check of the heap pages when the index came
// from the index file: the same reads as checkZeroedHeapPages, after Open
// returned, so that opening does not wait for a read of the whole heap, yet
// a damaged page is logged at once with its file and block and the keys
// whose newest version the index places on it, rather than found by the
// first read of it. Each read of a block below written (the length the
// last checkpoint wrote) checks what every read of a heap page checks: the
// checksum, the header and line pointers, and zeros below the written
// length. Every block below nblocks (the heap's length at Open) also has
// its visibility map bits checked against the page (checkMapBits). It
// reads the files directly (not through the buffer pool, whose working set
// it would evict), writes nothing but cleared map bits, and stops at Close.
//
// A page that fails its checksum or header on disk is damaged only if the
// buffer pool holds no good copy of it: after a crash, redo rebuilt a page
// torn by the crash from a full-page image in the pool and the disk keeps
// the torn copy until the page is written, and a read that meets a write of
// the page in progress can see half of each. So such a page is read again
// through the pool, which returns its own copy if it has one and otherwise
// reads the file with the same checks. A page of zeros needs no second
// read: no write leaves one below the written length.
func (db *DB) scanForDamagedPages(written, nblocks uint32) {
	defer db.bgWG.Done()
	// However the scan ends, the map is trusted again: at Close nothing
	// reads it any more.
	defer db.vm.Trust(math.MaxUint32)
	page := make([]byte, heap.PageSize)
	zeroed, failed := map[uint32]bool{}, map[uint32]bool{}
	var zeroedNames, failedNames []string
	var firstErr error
	var mapWrong, frozenWrong []uint32
	for blk := uint32(0); blk < max(written, nblocks); blk++ {
		select {
		case <-db.stopBG:
			return
		default:
		}
		if blk >= written {
			// Past the written length only the map is checked, and a
			// block without bits needs no read.
			if b, err := db.vm.TestStored(blk); db.vm.Unlogged() || (err == nil && b == 0) {
				db.vm.Trust(blk + 1)
				continue
			}
		}
		err := db.storage.ReadBlock(blk, page)
		if blk < written && err != nil && errors.Is(err, heap.ErrCorrupt) {
			// An I/O error is reported where the page is read.
			switch {
			case isZeroPageErr(err):
				zeroed[blk] = true
				if len(zeroedNames) < maxZeroListed {
					zeroedNames = append(zeroedNames, db.heapBlockName(blk))
				}
			case db.damagedInPool(blk):
				failed[blk] = true
				if firstErr == nil {
					firstErr = err
				}
				if len(failedNames) < maxZeroListed {
					failedNames = append(failedNames, db.heapBlockName(blk))
				}
			}
		}
		if !db.vm.Unlogged() {
			// A damaged page's bits stay: every read of it fails.
			onDisk := page
			if err != nil {
				onDisk = nil
			}
			if !zeroed[blk] && !failed[blk] {
				switch db.checkMapBits(blk, onDisk) {
				case mapBitsNotAllVisible:
					mapWrong = append(mapWrong, blk)
				case mapBitsNotAllFrozen:
					frozenWrong = append(frozenWrong, blk)
				}
			}
			db.vm.Trust(blk + 1)
		}
	}
	db.vm.Trust(math.MaxUint32)
	db.noteWrongMapBits(mapWrong, frozenWrong)
	if len(zeroed) == 0 && len(failed) == 0 {
		return
	}
	lostZeroed, lostFailed := 0, 0
	// A key whose value has a chunk on a damaged page is lost too.
	values := db.lostValues(written, func(b uint32) bool { return zeroed[b] || failed[b] })
	db.idx.mu.RLock()
	db.idx.tree.Ascend(func(e *indexEntry) bool {
		if t := e.headTID(); t.Valid() {
			switch {
			case zeroed[t.Block]:
				lostZeroed++
			case failed[t.Block], values[t]:
				lostFailed++
			}
		}
		return true
	})
	db.idx.mu.RUnlock()
	db.stats.zeroedPages.Store(uint64(len(zeroed)))
	d := &db.damage
	d.mu.Lock()
	d.zeroed, d.zeroedNames = len(zeroed), listMore(zeroedNames, len(zeroed))
	d.corrupt, d.corruptNames = len(failed), listMore(failedNames, len(failed))
	d.keysLost = lostZeroed + lostFailed
	if d.blocks == nil {
		d.blocks = map[uint32]bool{}
	}
	for blk := range zeroed {
		d.blocks[blk] = true
	}
	for blk := range failed {
		d.blocks[blk] = true
	}
	d.mu.Unlock()
	if len(zeroed) > 0 {
		db.logger.Error("heap pages of zeros below the length the last checkpoint wrote: data lost",
			"pages", len(zeroed), "first", listMore(zeroedNames, len(zeroed)), "keysLost", lostZeroed,
			"note", "keys whose newest version the index places on these pages; reading them fails with ErrCorruption; mvkv verify --lost-keys lists them")
	}
	if len(failed) > 0 {
		db.logger.Error("heap pages that fail their checks (checksum, header, line pointers) below the length the last checkpoint wrote: data lost or damaged",
			"pages", len(failed), "first", listMore(failedNames, len(failed)), "keysLost", lostFailed, "err", firstErr,
			"note", "keys whose newest version the index places on these pages, or whose value has a chunk there; reading them fails with ErrCorruption; mvkv verify --lost-keys lists them")
	}
}

// checkMapBits checks heap block blk's visibility map bits against its
// page, as PostgreSQL's lazy vacuum does when it warns "page is not marked
// all-visible but visibility map bit is set": a set bit on a page without
// PD_ALL_VISIBLE is wrong (every change clears both under the page's
// exclusive lock, and vacuum sets both under it), and is cleared, so that
// index-only reads stop answering from it and vacuum stops skipping the
// page. Likewise an all-frozen bit on a page holding a tuple that is not
// frozen (the map's verification's rule) is wrong, and is cleared alone,
// so that an aggressive vacuum does not skip the page and advance the
// frozen horizon past that tuple's xmin. After a crash the map cannot be wrong this way (the map page waits
// for its record, which redo replays on the heap page); a map file copied
// back from an older copy of the directory can, with valid checksums.
//
// onDisk is the page as read from the file, nil if it could not be read. A
// page on disk with PD_ALL_VISIBLE (and, if the all-frozen bit is set,
// every tuple frozen) needs nothing more: the flag is cleared only
// together with the bits, in memory first, and a tuple is unfrozen only
// by a change, which clears both. Otherwise the page may be
// older on disk than in the buffer pool (vacuum set both since, or redo
// did), so it is read again through the pool and compared under its share
// lock, under which no one sets or clears either. It reports what it
// cleared; a read that fails leaves the bits alone, as the damage is
// reported where the page is read.
func (db *DB) checkMapBits(blk uint32, onDisk []byte) mapBitsFix {
	bits, err := db.vm.TestStored(blk)
	if err != nil || bits == 0 {
		return mapBitsRight
	}
	if onDisk != nil && !heap.IsNew(onDisk) && heap.PageFlags(onDisk)&heap.PDAllVisible != 0 &&
		(bits&visibility.AllFrozen == 0 || pageAllFrozen(onDisk)) {
		return mapBitsRight
	}
	buf, err := db.pool.Get(blk)
	if err != nil {
		return mapBitsRight // past the end (cut since), or damaged: reported where read
	}
	defer buf.Release()
	buf.RLock()
	defer buf.RUnlock()
	return db.clearWrongMapBitsLocked(blk, buf.Page())
}

// mapBitsFix is what checkMapBits found wrong with a heap block's map bits
// and cleared.
type mapBitsFix int

const (
	mapBitsRight         mapBitsFix = iota
	mapBitsNotAllVisible            // both bits: the page lacks PD_ALL_VISIBLE
	mapBitsNotAllFrozen             // the all-frozen bit: a tuple is not frozen
)

// clearWrongMapBitsLocked clears heap block blk's map bits if they are set
// and page, the block's page in the buffer pool, lacks PD_ALL_VISIBLE, or
// its all-frozen bit alone if that is set and a tuple on the page is not
// frozen, and reports what it cleared. The caller holds the page's content
// lock, shared or exclusive: setting needs it exclusively, and clearing
// with the change happens only on a page with PD_ALL_VISIBLE, so nothing
// else changes the bits meanwhile. No record is logged: a clear that
// reaches disk early is harmless, and one lost in a crash is found by the
// next Open's check.
func (db *DB) clearWrongMapBitsLocked(blk uint32, page []byte) mapBitsFix {
	bits, err := db.vm.TestStored(blk)
	if err != nil || bits == 0 {
		return mapBitsRight
	}
	clear, fix := visibility.ValidBits, mapBitsNotAllVisible
	if !heap.IsNew(page) && heap.PageFlags(page)&heap.PDAllVisible != 0 {
		if bits&visibility.AllFrozen == 0 || pageAllFrozen(page) {
			return mapBitsRight
		}
		clear, fix = visibility.AllFrozen, mapBitsNotAllFrozen
	}
	if cleared, err := db.vm.Clear(blk, clear); err != nil || !cleared {
		return mapBitsRight
	}
	return fix
}

// pageAllFrozen reports whether every tuple on a heap page is frozen, as
// an all-frozen map bit claims (the rule of the map's verification).
func pageAllFrozen(page []byte) bool {
	for s := 0; s < heap.NumSlots(page); s++ {
		raw, err := heap.Tuple(page, uint16(s))
		if err != nil {
			continue // unused or dead
		}
		h, _, _, err := heap.DecodeTuple(raw)
		if err != nil {
			continue
		}
		if h.Infomask&heap.Frozen == 0 && h.Xmin != visibility.FrozenXid {
			return false
		}
	}
	return true
}

// noteWrongMapBits counts and logs the heap blocks whose map bits
// checkMapBits cleared: both bits of blocks, the all-frozen bit of frozen.
func (db *DB) noteWrongMapBits(blocks, frozen []uint32) {
	if len(blocks) > 0 {
		names := db.countWrongMapBits(blocks)
		db.logger.Warn("visibility map bits set for heap pages not marked all-visible: cleared",
			"pages", len(blocks), "first", listMore(names, len(blocks)),
			"note", "the map file is older than the heap (restored from another copy?); index-only reads and vacuum read these pages again, and the next checkpoint writes the corrected map")
	}
	if len(frozen) > 0 {
		names := db.countWrongMapBits(frozen)
		db.logger.Warn("visibility map all-frozen bits set for heap pages holding tuples not frozen: cleared",
			"pages", len(frozen), "first", listMore(names, len(frozen)),
			"note", "the map file is older than the heap (restored from another copy?); vacuum freezes these pages again, and the next checkpoint writes the corrected map")
	}
}

// clearMapPastHeapEnd clears the visibility map bits of the heap blocks at
// and past the heap's end, which only a map file older than the heap (a
// copy from before vacuum cut the heap's tail) can hold, and counts and
// logs them as noteWrongMapBits does. Open calls it before anything can
// extend the heap: a change clears the bits only of a page marked
// all-visible, so a bit left there would mark the block all-visible again
// when the heap grows back into it, and neither the check of the heap's
// pages nor anything after it would clear it.
func (db *DB) clearMapPastHeapEnd() error {
	nblocks := db.pool.NBlocks()
	blocks, err := db.vm.ClearFrom(nblocks)
	if err != nil || len(blocks) == 0 {
		return err
	}
	names := db.countWrongMapBits(blocks)
	db.logger.Warn("visibility map bits set for heap blocks past the heap's end: cleared",
		"blocks", len(blocks), "heapBlocks", nblocks, "first", listMore(names, len(blocks)),
		"note", "the map file is older than the heap (restored from another copy?); the next checkpoint writes the corrected map")
	return nil
}

// countWrongMapBits adds blocks to Damage's count of heap blocks whose
// wrong map bits were cleared, and returns the names of the first of them.
func (db *DB) countWrongMapBits(blocks []uint32) []string {
	var names []string
	for _, blk := range blocks[:min(len(blocks), maxZeroListed)] {
		names = append(names, db.heapBlockName(blk))
	}
	d := &db.damage
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mapWrong += len(blocks)
	if n := maxZeroListed - len(d.mapWrongShown); n > 0 {
		d.mapWrongShown = append(d.mapWrongShown, names[:min(n, len(names))]...)
	}
	d.mapWrongNames = listMore(d.mapWrongShown, d.mapWrong)
	// The bits are cleared already: the next checkpoint writes them.
	db.mapBitsCleared.Store(true)
	return names
}

// scanStoredTuples reads heap blocks 0 to nblocks-1 from disk, not through
// the buffer pool, skipping the blocks skip names, pages that cannot be
// read and pages never used, and calls fn for every tuple that decodes
// (key and val alias the page, valid during the call only). It stops
// early when stop (nil: never) is closed. The damage checks call it: they
// must see what is on disk, and keep nothing of the pages they read.
func (db *DB) scanStoredTuples(nblocks uint32, skip func(uint32) bool, stop <-chan struct{}, fn func(tid heap.TID, h heap.TupleHeader, key, val []byte)) {
	page := make([]byte, heap.PageSize)
	for blk := uint32(0); blk < nblocks; blk++ {
		select {
		case <-stop:
			return
		default:
		}
		if skip(blk) || db.storage.ReadBlock(blk, page) != nil || heap.IsNew(page) {
			continue
		}
		for s := 0; s < heap.NumSlots(page); s++ {
			raw, err := heap.Tuple(page, uint16(s))
			if err != nil {
				continue
			}
			h, key, val, err := heap.DecodeTuple(raw)
			if err != nil {
				continue
			}
			fn(heap.TID{Block: blk, Slot: uint16(s)}, h, key, val)
		}
	}
}

// lostValues reads the heap's first written blocks again and returns the
// versions whose out-of-line value has a chunk, or a directory of chunks,
// on a block bad says is damaged: their keys are lost too. It keeps only
// the indirect pointers' directory lists and the damaged directories, so
// that it stays small beside the heap; it runs only when damage was found.
//
// The pointer of a version whose inserter aborted (or crashed: in
// progress in the CLOG, below the next xid and not running), by its hint
// bits or the CLOG as xminStateOf decides, is not followed, as Verify
// does not follow it (toastCheck.Report): nobody reads that value, and a
// key whose newest version is such a one reads the committed version
// below it, so a damaged page holding the aborted write's chunk loses
// nothing.
func (db *DB) lostValues(written uint32, bad func(uint32) bool) map[heap.TID]bool {
	lost := map[heap.TID]bool{}
	indirect := map[heap.TID][]heap.TID{} // pointer -> its directories
	badDirs := map[heap.TID]bool{}
	onBad := func(t heap.TID) bool { return bad(t.Block) }
	db.scanStoredTuples(written, bad, db.stopBG, func(tid heap.TID, h heap.TupleHeader, _, val []byte) {
		switch {
		case h.Infomask&heap.External == 0:
		case isDirectory(h.Infomask):
			if tids, err := parseDirectory(val, -1); err == nil && slices.ContainsFunc(tids, onBad) {
				badDirs[tid] = true
			}
		case h.Infomask&heap.Chunk == 0:
			if _, aborted := db.xminStateOf(h.Xmin, h.Infomask); aborted {
				return
			}
			p, err := parseToastPointer(val)
			switch {
			case err != nil:
			case slices.ContainsFunc(p.tids, onBad):
				lost[tid] = true
			case p.indirect:
				indirect[tid] = p.tids
			}
		}
	})
	for tid, dirs := range indirect {
		if slices.ContainsFunc(dirs, func(d heap.TID) bool { return badDirs[d] }) {
			lost[tid] = true
		}
	}
	return lost
}

// damagedInPool reads blk through the buffer pool and reports whether that
// read fails as corruption too: the pool's own copy, if it holds one, is
// the page. The read is not counted or logged as a failed read (the scan
// reports the page itself).
func (db *DB) damagedInPool(blk uint32) bool {
	d := &db.damage
	d.mu.Lock()
	d.quiet = blk + 1
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.quiet = 0
		d.mu.Unlock()
	}()
	buf, err := db.pool.Get(blk)
	if err != nil {
		return errors.Is(err, ErrCorruption)
	}
	buf.Release()
	// A page zero_damaged_pages emptied reads, and is lost all the same.
	return db.zeroedOutPage(blk)
}

// isZeroPageErr reports whether a heap read failed for a page of zeros
// below the written length.
func isZeroPageErr(err error) bool { return errors.Is(err, heap.ErrZeroedPage) }

// checkIndexPath reports as corruption a directory, or anything else that
// is not a regular file, where the key index file belongs: a checkpoint
// could not replace it, and opening would fail later with a bare rename
// error.
func (db *DB) checkIndexPath() error {
	name := filepath.Join(db.dir, indexFileName)
	if _, err := db.fs.ReadDir(name); err == nil {
		return fmt.Errorf("%w: %s is a directory where the key index file belongs (checkpoints write the index there); move it away", ErrCorruption, name)
	}
	return nil
}

// DamageInfo is the damage a database has met since Open, for a server to
// show (mvkv serve's INFO) and to warn about: the heap pages of zeros and
// those failing their checksum or header checks that the background scan
// found, and heap pages whose reads failed their checks. Reads of
// a damaged page fail with ErrCorruption naming its file and block; each
// such page is also logged once, at Error.
type DamageInfo struct {
	// ScanRunning is true while Open's background scan of the heap pages
	// (run when the key index came from the index file: damage, and the
	// visibility map bits against the pages) is going.
	ScanRunning bool
	// ZeroedPages counts the heap pages of zeros that scan found below
	// the length the last checkpoint wrote; Zeroed names the first ones
	// (file, offset, block), "" when none. CorruptPages and Corrupt are
	// the same for the pages there that fail their checksum or header
	// checks. KeysLost counts the keys whose newest version the index
	// places on either kind, or whose out-of-line value has a chunk there
	// (not the value of a write that aborted or crashed, which nobody
	// reads: the key reads the committed version below it).
	ZeroedPages  int
	CorruptPages int
	KeysLost     int
	Zeroed       string
	Corrupt      string
	// MapBitsCleared counts the heap pages whose visibility map bits were
	// set though the page is not marked all-visible (PostgreSQL's "page is
	// not marked all-visible but visibility map bit is set"), or whose
	// all-frozen bit was set though a tuple on it is not frozen, found by
	// Open's check of the heap, which cleared them; MapBits names the
	// first ones (file, offset, block), "" when none. A map file restored
	// from an older copy of the directory is the usual cause. Until the
	// check has passed a page, index-only reads do not trust its bits.
	MapBitsCleared int
	MapBits        string
	// PagesZeroedOut counts the distinct heap pages that
	// Options.ZeroDamagedPages took as empty pages, whose versions are
	// lost; ZeroedOut names the first ones (file, offset, block).
	PagesZeroedOut int
	ZeroedOut      string
	// DamagedPages counts the distinct heap pages known to be damaged:
	// those the scan found, and the pages whose read through the buffer
	// pool failed its checks (checksum, line pointers, zeros below the
	// written length). FailedReads counts those failed reads; LastError
	// is the newest one's text, naming file, offset and block.
	DamagedPages int
	FailedReads  uint64
	LastError    string
}

// damageLog keeps what DamageInfo reports. Safe for concurrent use.
type damageLog struct {
	mu          sync.Mutex
	zeroed      int
	keysLost    int
	zeroedNames string
	// corrupt and corruptNames are the scan's pages that fail their
	// checksum or header checks.
	corrupt      int
	corruptNames string
	// mapWrong and mapWrongNames are the pages whose wrong map bits
	// checkMapBits cleared.
	mapWrong      int
	mapWrongNames string
	mapWrongShown []string
	blocks        map[uint32]bool
	// zeroedOut are the blocks zero_damaged_pages has taken as empty
	// pages.
	zeroedOut map[uint32]bool
	// quiet is the block (plus one) the scan is reading through the pool,
	// whose failure it reports itself; 0 when none.
	quiet  uint32
	failed uint64
	last   string
}

// waitOpenScan returns once Open's background scan of the heap (damage,
// and the visibility map against the pages) has ended, or at once if none
// was started. Close ends the scan early.
func (db *DB) waitOpenScan() {
	if db.scanDone != nil {
		<-db.scanDone
	}
}

// Damage returns the damage met since Open. Safe to call concurrently.
func (db *DB) Damage() DamageInfo {
	scanning := db.scanDone != nil
	if scanning {
		select {
		case <-db.scanDone:
			scanning = false
		default:
		}
	}
	d := &db.damage
	d.mu.Lock()
	defer d.mu.Unlock()
	return DamageInfo{
		ScanRunning: scanning, ZeroedPages: d.zeroed, KeysLost: d.keysLost, Zeroed: d.zeroedNames,
		CorruptPages: d.corrupt, Corrupt: d.corruptNames,
		MapBitsCleared: d.mapWrong, MapBits: d.mapWrongNames,
		PagesZeroedOut: len(d.zeroedOut), ZeroedOut: d.zeroedOutNames(db),
		DamagedPages: len(d.blocks), FailedReads: d.failed, LastError: d.last,
	}
}

// noteDamagedRead records a heap read that failed as corruption, and logs
// the page the first time.
func (db *DB) noteDamagedRead(block uint32, err error) {
	d := &db.damage
	d.mu.Lock()
	if d.quiet == block+1 {
		d.mu.Unlock()
		return
	}
	d.failed++
	d.last = err.Error()
	first := !d.blocks[block]
	if first {
		if d.blocks == nil {
			d.blocks = map[uint32]bool{}
		}
		d.blocks[block] = true
	}
	d.mu.Unlock()
	if first && db.logger != nil {
		db.logger.Error("heap page cannot be read: the versions on it are lost or damaged", "block", block, "err", err,
			"note", "reads of keys on this page fail; with a usable key index file, mvkv verify --lost-keys lists them")
	}
}

// listMore joins the first of n findings, shown, with ", " and says how
// many were left out.
func listMore(shown []string, n int) string {
	s := strings.Join(shown, ", ")
	if n > len(shown) {
		s += fmt.Sprintf(" and %d more", n-len(shown))
	}
	return s
}

// heapSegmentPath is the path of heap segment file seg.
func (db *DB) heapSegmentPath(seg uint32) string {
	return filepath.Join(db.dir, heapDir, fmt.Sprintf("%08d", seg))
}

// heapBlockName names heap block blk as the storage layer's errors do:
// "FILE at offset OFF (block BLK)".
func (db *DB) heapBlockName(blk uint32) string {
	return fmt.Sprintf("%s at offset %d (block %d)", db.heapSegmentPath(blk/heap.SegmentBlocks), int64(blk%heap.SegmentBlocks)*heap.PageSize, blk)
}
