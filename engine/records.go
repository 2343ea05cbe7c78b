package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// WAL record types written by the engine. The wal package reserves types
// below 16. Part of the format; do not change the numbers.
//
// Every heap record carries after-images only (docs/DESIGN.md rule 8): the whole
// new tuple, or the xid that becomes a tuple's xmax. Redo compares each
// record's end LSN with the page LSN, so replaying a record twice changes
// nothing.
const (
	// recHeapInsert places a new tuple. Payload:
	//
	//	+---------+--------+------------------+
	//	| block 4 | slot 2 | tuple (rest)     |
	//	+---------+--------+------------------+
	recHeapInsert wal.RecordType = 16
	// recHeapUpdate sets xmax = record xid on the old version and places the
	// new version, as PostgreSQL's XLOG_HEAP_UPDATE. Payload:
	//
	//	+-------------+------------+-------------+------------+--------------+
	//	| oldBlock 4  | oldSlot 2  | newBlock 4  | newSlot 2  | tuple (rest) |
	//	+-------------+------------+-------------+------------+--------------+
	recHeapUpdate wal.RecordType = 17
	// recHeapDelete sets xmax = record xid on a tuple. Payload: block 4, slot 2.
	recHeapDelete wal.RecordType = 18
	// recCommit ends a transaction that committed. Payload: commit time as
	// Unix microseconds, 8 bytes.
	recCommit wal.RecordType = 19
	// recAbort ends a transaction that rolled back. Payload: as recCommit.
	recAbort wal.RecordType = 20
	// recCheckpoint marks a completed checkpoint. Payload: redo LSN 8,
	// next xid 8, checkpoint id 8, system id 8 (records of older versions:
	// the first two, or the first three).
	recCheckpoint wal.RecordType = 21
	// recFPI is a full-page image, as PostgreSQL's XLOG_FPI: the whole
	// page as it was just before the first change to it after a
	// checkpoint's redo point. Redo restores it unconditionally, which
	// repairs a page torn by a power loss; the change record that follows
	// is then applied on top. Payload: block 4, then the page, without
	// its free space when the record carries flagFPIHole (encodeFPI).
	recFPI wal.RecordType = 22
	// recHeap2Prune is the pruning record, vacuum's and that of a writer
	// or reader pruning a page, as PostgreSQL's XLOG_HEAP2_PRUNE (with
	// freezing folded in, as PostgreSQL 17's XLOG_HEAP2_PRUNE_VACUUM_SCAN):
	// for each page it names (one in every record the engine writes now;
	// older ones named several), the slots that become unused, the Prev
	// links rewritten and the tuples frozen, all as after-images. The
	// payload is drawn in prune.go.
	recHeap2Prune wal.RecordType = 25
	// recFPIForHint is a full-page image logged before the first hint-bit
	// change to a page after a checkpoint's redo point, as PostgreSQL's
	// XLOG_FPI_FOR_HINT (hints.go). Payload and redo as recFPI.
	recFPIForHint wal.RecordType = 27
	// recHeap2Visible sets PD_ALL_VISIBLE on a heap page and its
	// visibility map bits, as PostgreSQL's XLOG_HEAP2_VISIBLE. Its end LSN
	// becomes both pages' LSN, so the map page cannot reach disk before
	// it. Payload (engine/vm.go):
	//
	//	+---------+--------+--------------+
	//	| block 4 | bits 1 | cutoffXid 8  |
	//	+---------+--------+--------------+
	recHeap2Visible wal.RecordType = 24
	// recCLOGTruncate records a CLOG truncation, as PostgreSQL's
	// CLOG_TRUNCATE: segments entirely below the segment of the oldest xid
	// are removed once the record is durable; redo repeats the truncation.
	// Payload: oldest xid 8 (see clogtrunc.go).
	recCLOGTruncate wal.RecordType = 23
	// recIndexHead records a change to the key index that no heap record
	// implies: vacuum moving a key's head off a version it frees, or
	// dropping a key whose last version it frees. Redo changes no page;
	// Open applies it to the index loaded from the index file
	// (indexfile.go). Payload:
	//
	//	+---------+--------+-------------+
	//	| block 4 | slot 2 | key (rest)  |
	//	+---------+--------+-------------+
	//
	// An invalid TID (block and slot all ones) drops the key. The engine
	// no longer writes it (recIndexHeads carries a page's changes in one
	// record); Open still applies it from a WAL written before.
	recIndexHead wal.RecordType = 28
	// recIndexHeads is recIndexHead for every head one vacuum of a heap
	// page moves or drops, in one record logged before the page's pruning
	// record (vacuum.go's revisit, zerodamaged.go), so that vacuum after a
	// mass delete writes one index record a page, not one a removed key,
	// as PostgreSQL's vacuum removes index entries page by page. Redo
	// changes no page; Open applies the changes in order to the index
	// loaded from the index file. Payload (encodeIndexHeads):
	//
	//	+---------+----------------------------------------------------+
	//	| count 2 | count times: block 4 | slot 2 | keyLen 2 | key     |
	//	+---------+----------------------------------------------------+
	//
	// count is at least 1; each keyLen 1 to MaxKeySize (keys are never
	// empty), and the entries fill the payload exactly. An invalid TID
	// drops the key.
	recIndexHeads wal.RecordType = 33
	// recBulkLoadBegin starts a bulk load (bulkload.go) by transaction
	// XID: its pages will be written from block first on, outside the
	// WAL. It is made durable before the first page is written, so that
	// recovery finds a load that never ended (no recBulkLoad and no
	// recAbort of XID) and cuts the heap back to first, removing pages
	// no record names. Payload: first block 4.
	recBulkLoadBegin wal.RecordType = 29
	// recBulkLoad commits a bulk load: the pages of blocks [first,
	// first+pages) were written and fsynced before it, so redo needs
	// only their range (the heap length, the CLOG status of XID), not
	// their contents, as PostgreSQL's wal_level=minimal skips the WAL
	// of a COPY into a new relation and syncs it before the commit.
	// It is the load's commit record. Payload:
	//
	//	+---------+---------+---------+
	//	| first 4 | pages 4 | keys 8  |
	//	+---------+---------+---------+
	recBulkLoad wal.RecordType = 30
	// recBulkVisible sets the visibility map bits of blocks [first,
	// first+pages), a committed bulk load's pages, whose tuples were
	// frozen and whose PD_ALL_VISIBLE was set when they were written (the
	// bits of PostgreSQL's COPY FREEZE). It is logged only once every
	// open snapshot sees the load. Its end LSN becomes the map pages'
	// LSN. Payload: first 4, pages 4, bits 1.
	recBulkVisible wal.RecordType = 31
)

// Record flags (wal.Record.Flags). Part of the format; do not change.
const (
	// flagInitPage on recHeapInsert or recHeapUpdate: the new tuple's page
	// was empty (never initialized) before this record, so redo
	// initializes it without reading it, as PostgreSQL's
	// XLOG_HEAP_INIT_PAGE.
	flagInitPage uint8 = 1 << 0
	// flagAllVisibleCleared on recHeapInsert, recHeapDelete and
	// recHeapUpdate: the change cleared PD_ALL_VISIBLE on the page of the
	// insert or delete, or the old version's page of an update, so redo
	// clears that block's visibility map bits, even when the heap page
	// already reflects the record (XLH_INSERT_ALL_VISIBLE_CLEARED,
	// XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED).
	flagAllVisibleCleared uint8 = 1 << 1
	// flagNewAllVisibleCleared on recHeapUpdate: as flagAllVisibleCleared,
	// for the new version's page when it is another block
	// (XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED).
	flagNewAllVisibleCleared uint8 = 1 << 2
	// flagPruneNoRepair on recHeap2Prune: the named slots become unused
	// but no tuple moves (heap.SetUnused), so the freed storage stays a
	// hole in the page. Without the flag the page is compacted after the
	// changes (heap.Prune), and a page part may then be empty: compaction
	// alone (repairFragmentation). The engine no longer sets it (every
	// pruning record compacts its page); vacuum used to free slots in
	// place and compact each page once a run, and redo still applies such
	// records from an older WAL. The holes they left are packed by the
	// page's next prune, by vacuum (which compacts a page with holes in
	// its record of it) or by repairFragmentation.
	flagPruneNoRepair uint8 = 1 << 3
	// flagFPIHole on recFPI and recFPIForHint: the image leaves out the
	// page's free space, which redo restores as zeroes (encodeFPI).
	flagFPIHole uint8 = 1 << 4
	// flagPruneChunks on recHeap2Prune: the page parts are followed by
	// the out-of-line chunks of the versions (or directories) the record
	// frees, which become vacuum's to free in its second pass; Open keeps
	// them in vacuum's debt across a crash (engine/chunkdebt.go).
	flagPruneChunks uint8 = 1 << 5
)

var errBadRecord = errors.New("malformed WAL record")

func recordTypeName(t wal.RecordType) string {
	switch t {
	case recHeapInsert:
		return "HEAP_INSERT"
	case recHeapUpdate:
		return "HEAP_UPDATE"
	case recHeapDelete:
		return "HEAP_DELETE"
	case recCommit:
		return "COMMIT"
	case recAbort:
		return "ABORT"
	case recCheckpoint:
		return "CHECKPOINT"
	case recFPI:
		return "FPI"
	case recHeap2Prune:
		return "HEAP2_PRUNE"
	case recFPIForHint:
		return "FPI_FOR_HINT"
	case recHeap2Visible:
		return "HEAP2_VISIBLE"
	case recCLOGTruncate:
		return "CLOG_TRUNCATE"
	case recIndexHead:
		return "INDEX_HEAD"
	case recIndexHeads:
		return "INDEX_HEADS"
	case recBulkLoadBegin:
		return "BULK_LOAD_BEGIN"
	case recBulkLoad:
		return "BULK_LOAD"
	case recBulkVisible:
		return "BULK_VISIBLE"
	case recHeapTruncate:
		return "HEAP_TRUNCATE"
	}
	return fmt.Sprintf("TYPE_%d", t)
}

func appendTID(b []byte, t heap.TID) []byte {
	b = binary.LittleEndian.AppendUint32(b, t.Block)
	return binary.LittleEndian.AppendUint16(b, t.Slot)
}

func readTID(b []byte) heap.TID {
	return heap.TID{Block: binary.LittleEndian.Uint32(b), Slot: binary.LittleEndian.Uint16(b[4:])}
}

// heapRecord is a decoded heap record. For recHeapInsert only New and Tuple
// are set; for recHeapDelete only Old.
type heapRecord struct {
	Old, New heap.TID
	Tuple    []byte
}

// appendInsert and appendUpdate append the record to dst (growing it once
// at most), so that writers can encode into a reused buffer.
func appendInsert(dst []byte, tid heap.TID, tup []byte) []byte {
	dst = slices.Grow(dst, 6+len(tup))
	dst = appendTID(dst, tid)
	return append(dst, tup...)
}

func appendUpdate(dst []byte, old, new heap.TID, tup []byte) []byte {
	dst = slices.Grow(dst, 12+len(tup))
	dst = appendTID(dst, old)
	dst = appendTID(dst, new)
	return append(dst, tup...)
}

// scratchBufs holds the buffers writers build tuples and heap records in:
// each write built one of each and dropped it as soon as the page and the
// WAL had copied it, and those were a fifth of the bytes a bloat run
// allocated (docs/BENCHMARKS.md). Buffers above maxScratch are not kept.
var scratchBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 64 << 10

func getScratch() *[]byte { return scratchBufs.Get().(*[]byte) }

// putScratch keeps b's storage (grown to hold used) for the next write.
func putScratch(b *[]byte, used []byte) {
	if cap(used) > maxScratch {
		return
	}
	*b = used[:0]
	scratchBufs.Put(b)
}

func encodeDelete(old heap.TID) []byte { return appendTID(make([]byte, 0, 6), old) }

func decodeHeapRecord(t wal.RecordType, data []byte) (heapRecord, error) {
	r := heapRecord{Old: heap.InvalidTID, New: heap.InvalidTID}
	switch t {
	case recHeapInsert:
		if len(data) < 6+heap.TupleHeaderSize {
			return r, errBadRecord
		}
		r.New, r.Tuple = readTID(data), data[6:]
	case recHeapUpdate:
		if len(data) < 12+heap.TupleHeaderSize {
			return r, errBadRecord
		}
		r.Old, r.New, r.Tuple = readTID(data), readTID(data[6:]), data[12:]
	case recHeapDelete:
		if len(data) != 6 {
			return r, errBadRecord
		}
		r.Old = readTID(data)
	default:
		return r, errBadRecord
	}
	if r.Tuple != nil {
		if _, _, _, err := heap.DecodeTuple(r.Tuple); err != nil {
			return r, fmt.Errorf("%w: %v", errBadRecord, err)
		}
		if len(r.Tuple) > heap.MaxTupleSize {
			return r, errBadRecord
		}
	}
	return r, nil
}

// checkpointRecord is a CHECKPOINT record's payload:
//
//	| redo 8 | next xid 8 | checkpoint identifier 8 | system identifier 8 |
//
// The identifier is random, drawn anew for every checkpoint, and written
// into the index file the checkpoint writes too: two copies of one
// database that reach a checkpoint at the same LSN with the same redo
// point (a directory copied, then written differently) still have
// different identifiers, so neither accepts the other's index file. A
// record without it (16 bytes, written before it existed) decodes with
// identifier 0, which no index file carries.
//
// The system identifier is the database's, as in the control file (and in
// PostgreSQL's WAL page headers): Open compares the two, so that a control
// file and a WAL from different databases are not taken for one, even
// where their LSNs line up. A record without it (16 or 24 bytes) decodes
// with 0, which is not compared.
type checkpointRecord struct {
	redo     wal.LSN
	nextXid  uint64
	id       uint64
	systemID uint64
}

func encodeCheckpoint(c checkpointRecord) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(c.redo))
	b = binary.LittleEndian.AppendUint64(b, c.nextXid)
	b = binary.LittleEndian.AppendUint64(b, c.id)
	return binary.LittleEndian.AppendUint64(b, c.systemID)
}

func decodeCheckpoint(data []byte) (checkpointRecord, error) {
	if len(data) != 16 && len(data) != 24 && len(data) != 32 {
		return checkpointRecord{}, errBadRecord
	}
	c := checkpointRecord{redo: wal.LSN(binary.LittleEndian.Uint64(data)), nextXid: binary.LittleEndian.Uint64(data[8:])}
	if len(data) >= 24 {
		c.id = binary.LittleEndian.Uint64(data[16:])
	}
	if len(data) == 32 {
		c.systemID = binary.LittleEndian.Uint64(data[24:])
	}
	return c, nil
}

// minFPIHole is the smallest free space in bytes that an FPI leaves out;
// below it the four bytes that describe the hole are not worth it.
const minFPIHole = 64

// fpiScratch holds the page copies encodeFPI checksums, one a concurrent
// caller: after a checkpoint every first change to a page logs an image.
var fpiScratch = sync.Pool{New: func() any { return new([heap.PageSize]byte) }}

// encodeFPI copies a page into an FPI record, with the copy's checksum set
// so that redo can verify the image before restoring it. When the page's
// free space (heap.FreeRange, zero bytes) is at least minFPIHole long it is
// left out and the record carries flagFPIHole: the pages an FPI is taken of
// most often after a checkpoint, those of updated keys, keep room for the
// next versions, and leaving it out shrinks the wave of images that
// follows every checkpoint, as PostgreSQL's "hole" does. Payload:
//
//	without flagFPIHole:  | block 4 | page 8192                          |
//	with flagFPIHole:     | block 4 | holeOff 2 | holeLen 2 | page bytes |
//	                        (the page without [holeOff, holeOff+holeLen))
func encodeFPI(block uint32, page []byte) ([]byte, uint8) {
	lower, upper := heap.FreeRange(page)
	if upper-lower < minFPIHole {
		b := make([]byte, 4, 4+len(page))
		binary.LittleEndian.PutUint32(b, block)
		b = append(b, page...)
		heap.SetChecksum(b[4:], block)
		return b, 0
	}
	// The checksum is computed over the page as redo will rebuild it,
	// with the hole zeroed (it is zero already; this makes sure).
	scratch := fpiScratch.Get().(*[heap.PageSize]byte)
	defer fpiScratch.Put(scratch)
	img := scratch[:]
	copy(img, page)
	clear(img[lower:upper])
	heap.SetChecksum(img, block)
	b := make([]byte, 8, 8+heap.PageSize-(upper-lower))
	binary.LittleEndian.PutUint32(b, block)
	binary.LittleEndian.PutUint16(b[4:], uint16(lower))
	binary.LittleEndian.PutUint16(b[6:], uint16(upper-lower))
	b = append(b, img[:lower]...)
	b = append(b, img[upper:]...)
	return b, flagFPIHole
}

// decodeFPI rebuilds the page of an FPI record with the record's flags and
// verifies it (checksum, header, line pointers). Every length is checked
// against the payload, so it never panics.
func decodeFPI(data []byte, flags uint8) (block uint32, page []byte, err error) {
	if flags&flagFPIHole == 0 {
		if len(data) != 4+heap.PageSize {
			return 0, nil, errBadRecord
		}
		block, page = binary.LittleEndian.Uint32(data), data[4:]
	} else {
		if len(data) < 8 {
			return 0, nil, errBadRecord
		}
		block = binary.LittleEndian.Uint32(data)
		off, n := int(binary.LittleEndian.Uint16(data[4:])), int(binary.LittleEndian.Uint16(data[6:]))
		if n < minFPIHole || off < heap.PageHeaderSize || off+n > heap.PageSize || len(data) != 8+heap.PageSize-n {
			return 0, nil, fmt.Errorf("%w: full-page image of block %d: hole of %d bytes at %d in a %d-byte payload", errBadRecord, block, n, off, len(data))
		}
		page = make([]byte, heap.PageSize)
		copy(page, data[8:8+off])
		copy(page[off+n:], data[8+off:])
	}
	if err := heap.VerifyPage(page, block); err != nil {
		return 0, nil, fmt.Errorf("%w: full-page image of block %d: %v", errBadRecord, block, err)
	}
	if flags&flagFPIHole != 0 {
		if lower, upper := heap.FreeRange(page); lower != int(binary.LittleEndian.Uint16(data[4:])) || upper-lower != int(binary.LittleEndian.Uint16(data[6:])) {
			return 0, nil, fmt.Errorf("%w: full-page image of block %d: hole does not match the page's free space", errBadRecord, block)
		}
	}
	return block, page, nil
}

// decodeIndexHead decodes recIndexHead's payload.
func decodeIndexHead(data []byte) (key []byte, head heap.TID, err error) {
	// A key is 1 to MaxKeySize bytes: a record of an empty key is damage.
	if len(data) <= 6 || len(data)-6 > MaxKeySize {
		return nil, heap.InvalidTID, fmt.Errorf("%w: index head record of %d bytes", errBadRecord, len(data))
	}
	return data[6:], readTID(data), nil
}

// headChange is one change a recIndexHeads record carries: key's head
// becomes head, or the key is dropped when head is invalid. Decoded, key
// points into the record's payload.
type headChange struct {
	key  []byte
	head heap.TID
}

// maxHeadChanges is the most changes a recIndexHeads record carries: its
// count is 2 bytes. One page's vacuum moves at most a head a slot, far
// fewer.
const maxHeadChanges = 1<<16 - 1

// encodeIndexHeads is recIndexHeads's payload for changes (1 to
// maxHeadChanges of them, keys at most MaxKeySize bytes).
func encodeIndexHeads(changes []headChange) []byte {
	n := 2
	for _, c := range changes {
		n += 8 + len(c.key)
	}
	b := binary.LittleEndian.AppendUint16(make([]byte, 0, n), uint16(len(changes)))
	for _, c := range changes {
		b = appendTID(b, c.head)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(c.key)))
		b = append(b, c.key...)
	}
	return b
}

// logHeadChanges logs changes (none: nothing) in recIndexHeads records,
// maxHeadChanges a record, before the caller logs the page they belong
// to; a failed insert fails the database.
func (db *DB) logHeadChanges(changes []headChange) error {
	for len(changes) > 0 {
		batch := changes[:min(len(changes), maxHeadChanges)]
		changes = changes[len(batch):]
		if _, _, err := db.wal.Insert(recIndexHeads, 0, encodeIndexHeads(batch)); err != nil {
			return db.fail(err)
		}
	}
	return nil
}

// decodeIndexHeads decodes recIndexHeads's payload. Every length it reads
// is checked against the payload, MaxKeySize and the empty key (which no
// write makes), so a malformed record
// gives an error wrapping errBadRecord that says what is wrong and where,
// never a panic; nothing is returned unless the whole payload decodes.
// The keys point into data.
func decodeIndexHeads(data []byte) ([]headChange, error) {
	if len(data) < 2 {
		return nil, fmt.Errorf("%w: index heads record of %d bytes", errBadRecord, len(data))
	}
	count := int(binary.LittleEndian.Uint16(data))
	if count == 0 {
		return nil, fmt.Errorf("%w: index heads record of no change", errBadRecord)
	}
	// Each change takes 8 bytes at least: a count the payload cannot
	// hold is refused before anything is allocated for it.
	if count > (len(data)-2)/8 {
		return nil, fmt.Errorf("%w: index heads record of %d changes in %d bytes", errBadRecord, count, len(data))
	}
	out := make([]headChange, 0, count)
	off := 2
	for i := range count {
		if len(data)-off < 8 {
			return nil, fmt.Errorf("%w: index heads record: change %d of %d at offset %d is cut short", errBadRecord, i, count, off)
		}
		head := readTID(data[off:])
		n := int(binary.LittleEndian.Uint16(data[off+6:]))
		off += 8
		if n == 0 || n > MaxKeySize || n > len(data)-off {
			return nil, fmt.Errorf("%w: index heads record: change %d of %d has a key of %d bytes at offset %d, %d left", errBadRecord, i, count, n, off, len(data)-off)
		}
		out = append(out, headChange{key: data[off : off+n : off+n], head: head})
		off += n
	}
	if off != len(data) {
		return nil, fmt.Errorf("%w: index heads record: %d bytes after its %d changes", errBadRecord, len(data)-off, count)
	}
	return out, nil
}

// bulkLoadRecord is the payload of recBulkLoadBegin (first only),
// recBulkLoad (first, pages, keys) and recBulkVisible (first, pages, bits).
type bulkLoadRecord struct {
	first, pages uint32
	keys         uint64
	bits         visibility.Bits
}

func encodeBulkLoadBegin(first uint32) []byte {
	return binary.LittleEndian.AppendUint32(nil, first)
}

func encodeBulkLoad(first, pages uint32, keys uint64) []byte {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 16), first)
	b = binary.LittleEndian.AppendUint32(b, pages)
	return binary.LittleEndian.AppendUint64(b, keys)
}

func encodeBulkVisible(first, pages uint32, bits visibility.Bits) []byte {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 9), first)
	b = binary.LittleEndian.AppendUint32(b, pages)
	return append(b, byte(bits))
}

// decodeBulkLoad decodes the payload of the three bulk load records,
// checking its length and that the block range does not overflow.
func decodeBulkLoad(t wal.RecordType, data []byte) (bulkLoadRecord, error) {
	var r bulkLoadRecord
	want := map[wal.RecordType]int{recBulkLoadBegin: 4, recBulkLoad: 16, recBulkVisible: 9}[t]
	if want == 0 || len(data) != want {
		return r, fmt.Errorf("%w: %s payload of %d bytes, want %d", errBadRecord, recordTypeName(t), len(data), want)
	}
	r.first = binary.LittleEndian.Uint32(data)
	switch t {
	case recBulkLoad:
		r.pages = binary.LittleEndian.Uint32(data[4:])
		r.keys = binary.LittleEndian.Uint64(data[8:])
	case recBulkVisible:
		r.pages = binary.LittleEndian.Uint32(data[4:])
		r.bits = visibility.Bits(data[8])
		if r.bits != visibility.AllVisible && r.bits != visibility.AllVisible|visibility.AllFrozen {
			return r, fmt.Errorf("%w: BULK_VISIBLE with bits %#x", errBadRecord, r.bits)
		}
	}
	if uint64(r.first)+uint64(r.pages) >= noBlock {
		return r, fmt.Errorf("%w: %s of %d blocks from block %d", errBadRecord, recordTypeName(t), r.pages, r.first)
	}
	return r, nil
}
