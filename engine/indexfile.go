package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"slices"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// The index file: the key index, written at each checkpoint, so that Open
// reads it and the WAL since the checkpoint instead of every heap page.
//
// What it holds. The in-memory index maps each key to its newest version
// (index.go), and every change to that mapping is in the WAL: a new
// version's insert or update record names its key and TID, and vacuum logs
// an index-heads record (recIndexHeads, one for each page it prunes, with
// every head of that page it moves or drops; recIndexHead, a key a record,
// in a WAL written before) before it moves a head off a version it frees
// or drops a key. So the index at any LSN is the index at an
// earlier one with the key changes logged in between applied in order.
// The file is a copy of the index taken after the checkpoint chose its redo
// point: each entry is read at some moment after the redo point, and every
// later change to that key is in the WAL from the redo point on. Open loads
// the file and applies, in WAL order, the key changes of every record from
// the redo point to the end of the log. A key changed after the redo point
// ends with its last logged change whatever the file says of it; a key not
// changed since has not changed since the file read it. Replaying a change
// the file already holds sets what is already there.
//
// When it is trusted. The file names the checkpoint it belongs to (redo
// point, the checkpoint record's own LSN, and the random identifier the
// record carries); Open uses it only if that is the checkpoint the control
// file names, or a later checkpoint (a crash between writing the file and
// the control file), and only if it finds that checkpoint's record in the
// WAL with the same redo point and identifier. The identifier tells apart
// two copies of one directory that were written differently and reached a
// checkpoint at the same LSN: their files would otherwise look alike, and
// each copy's index points at slots that hold other versions in the other.
// A head may be of a record after the checkpoint's (the file is read
// after it): the file also says how far past its checkpoint record the WAL
// must reach, and Open does not use it if the log ends before that (the
// WAL after the checkpoint was lost, cut or replaced), since its heads
// would then name versions that no page holds and no record replays.
// A file from an older checkpoint, another database or another format
// version, or one whose checksum fails, is not used: the index is rebuilt
// from the heap and the log says why and how long that took. The header
// has no checksum of its own (the file's, at the end, covers it), so a
// file its header refuses is read to the end before that reason is given:
// if the checksum fails, the reason given is that the file is damaged, not
// what a damaged header seems to say (another checkpoint, say). A body
// that does not decode is read to the end the same way, so that a flipped
// byte is reported as damage, not as the keys out of order it makes. The file is replaced atomically, as the control file
// is: written to index.tmp, fsynced, renamed over index, directory fsynced.
//
// It also carries what the heap scan at Open used to gather: the free space
// map (categories of recorded blocks), the RelFrozenXid of the last vacuum,
// and autovacuum's count of dead versions; and vacuum's debt, the
// out-of-line chunks no version names that vacuum is still to free, read
// after the redo point was chosen (chunkdebt.go), to which Open adds the
// chunks the records replayed after it list. A chunk listed there and
// freed before the crash, its slot then reused by another value's chunk,
// is left alone by the xmin every entry carries.
//
// Format (little-endian; part of the format, do not change):
//
//	header, 80 bytes:
//	 0 magic 8 | 8 version 4 | 12 WAL needed 4 | 16 redo LSN 8
//	24 checkpoint LSN 8
//	32 keys 8  | 40 RelFrozenXid 8 | 48 dead versions 8 | 56 FSM blocks 4
//	60 vacuum's debt, chunks 4 (zero in version 3)
//	64 system identifier 8 (the control file's: the database the file is of)
//	72 checkpoint identifier 8 (the checkpoint record's)
//	WAL needed: bytes of WAL past the checkpoint record's LSN that the
//	  heads need (the log was flushed that far before the file was made
//	  durable), at most 2^32-1 (a larger need is recorded as that, a
//	  weaker check); zero in files written before the field was used
//	keys, in strictly increasing order, each:
//	  uvarint bytes shared with the previous key | uvarint length of the rest
//	  | the rest | head block 4 | head slot 2
//	FSM: per recorded block, block 4 | category 1
//	vacuum's debt: per chunk, block 4 | slot 2 | xmin 8
//	CRC-32C of everything above, 4
//
// Rejected: a B-tree file updated in place (pages, WAL records of its own,
// full-page images: the design of a second access method, for a structure
// that fits in memory), and a log of index changes beside the WAL (the WAL
// already is one).
const (
	indexFileName    = "index"
	indexFileTmpName = "index.tmp"
	indexFileMagic   = 0x6d766b76_69647866 // "mvkvidxf"
	// indexFileVersion 1 had a 64-byte header without the system
	// identifier, version 2 a 72-byte one without the checkpoint
	// identifier; such a file is refused (the index is rebuilt once).
	// Version 3 is version 4 without vacuum's debt (its field is zero),
	// and is read as a file with none.
	indexFileVersion = 4
	// indexFileVersionNoDebt is version 3.
	indexFileVersionNoDebt = 3
	indexHeaderSize        = 80
	// indexEntryMin is the fewest bytes a key entry takes: two one-byte
	// varints and a TID. It bounds the key count a file can claim.
	indexEntryMin = 1 + 1 + 6
)

// olderIndexHeaderSize is the header size of each older format version
// (indexFileVersion), to check such a file's checksum before it is refused.
var olderIndexHeaderSize = map[uint32]int{1: 64, 2: 72}

// errIndexFile marks an index file that cannot be used; Open rebuilds the
// index from the heap instead.
var errIndexFile = errors.New("index file not usable")

// indexFileHeader is the file's first indexHeaderSize bytes.
type indexFileHeader struct {
	// walNeeded is how many bytes of WAL past checkpoint the file's
	// heads need (0: none recorded).
	walNeeded        uint32
	redo, checkpoint wal.LSN
	keys             uint64
	relFrozenXid     uint64
	dead             int64
	fsmBlocks        uint32
	debtChunks       uint32
	systemID         uint64
	checkpointID     uint64
}

func (h indexFileHeader) encode() []byte {
	b := make([]byte, 0, indexHeaderSize)
	b = binary.LittleEndian.AppendUint64(b, indexFileMagic)
	b = binary.LittleEndian.AppendUint32(b, indexFileVersion)
	b = binary.LittleEndian.AppendUint32(b, h.walNeeded)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.redo))
	b = binary.LittleEndian.AppendUint64(b, uint64(h.checkpoint))
	b = binary.LittleEndian.AppendUint64(b, h.keys)
	b = binary.LittleEndian.AppendUint64(b, h.relFrozenXid)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.dead))
	b = binary.LittleEndian.AppendUint32(b, h.fsmBlocks)
	b = binary.LittleEndian.AppendUint32(b, h.debtChunks)
	b = binary.LittleEndian.AppendUint64(b, h.systemID)
	return binary.LittleEndian.AppendUint64(b, h.checkpointID)
}

// decodeIndexHeader reads the fields of a header whose magic and version
// the caller has checked.
func decodeIndexHeader(head []byte) indexFileHeader {
	return indexFileHeader{
		walNeeded:    binary.LittleEndian.Uint32(head[12:]),
		redo:         wal.LSN(binary.LittleEndian.Uint64(head[16:])),
		checkpoint:   wal.LSN(binary.LittleEndian.Uint64(head[24:])),
		keys:         binary.LittleEndian.Uint64(head[32:]),
		relFrozenXid: binary.LittleEndian.Uint64(head[40:]),
		dead:         int64(binary.LittleEndian.Uint64(head[48:])),
		fsmBlocks:    binary.LittleEndian.Uint32(head[56:]),
		debtChunks:   binary.LittleEndian.Uint32(head[60:]),
		systemID:     binary.LittleEndian.Uint64(head[64:]),
		checkpointID: binary.LittleEndian.Uint64(head[72:]),
	}
}

// crcWriter passes writes on and keeps a running CRC-32C of them.
type crcWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// writeIndexFile writes the index, the free space map, the vacuum
// counters and vacuum's debt to the index file for the checkpoint with the
// given redo point and record LSN. The caller is the checkpoint, after the
// redo point was chosen; the index is read in batches, so writers are not
// held off. The file is replaced atomically and durably.
func (db *DB) writeIndexFile(redo, ckpt wal.LSN, ckptID uint64) (keys uint64, size int64, err error) {
	tmp := filepath.Join(db.dir, indexFileTmpName)
	// A failed file operation here is ErrWriteFailed, not ErrIOFailure:
	// the file is only a copy of what the heap and the WAL hold, named by
	// its checkpoint, so the checkpoint fails, writes go on, and the next
	// one writes a new file (no page the kernel may have dropped is
	// trusted).
	failed := func(op, name string, err error) error {
		return fmt.Errorf("%w: %w", ErrWriteFailed, withPath(op, name, err))
	}
	f, err := db.fs.Create(tmp)
	if err != nil {
		return 0, 0, failed("create", tmp, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = db.fs.Remove(tmp)
		}
	}()
	// The header goes in last, at offset 0, once the counts are known.
	// The checksum covers the body, then the header (crc32.Update
	// continues a CRC), so that it can be computed in one pass.
	fw := &fileWriter{f: f, off: indexHeaderSize}
	bw := bufio.NewWriterSize(fw, indexFileBuffer)
	cw := &crcWriter{w: bw, crc: crc32.New(castagnoli)}
	var prev []byte
	var rec []byte
	after, all := "", true
	for {
		batch := db.idx.entriesAfter(after, all, 4096)
		for _, e := range batch {
			tid := e.headTID()
			if !tid.Valid() {
				continue
			}
			k := e.key()
			shared := 0
			for shared < len(prev) && shared < len(k) && prev[shared] == k[shared] {
				shared++
			}
			rec = binary.AppendUvarint(rec[:0], uint64(shared))
			rec = binary.AppendUvarint(rec, uint64(len(k)-shared))
			rec = append(rec, k[shared:]...)
			rec = appendTID(rec, tid)
			if _, err := cw.Write(rec); err != nil {
				return 0, 0, failed("write", tmp, err)
			}
			prev = append(prev[:0], k...)
			keys++
		}
		if len(batch) < 4096 {
			break
		}
		after, all = batch[len(batch)-1].key(), false
	}
	fsm := db.fsm.snapshot()
	for _, b := range fsm {
		rec = binary.LittleEndian.AppendUint32(rec[:0], b.blk)
		rec = append(rec, b.cat)
		if _, err := cw.Write(rec); err != nil {
			return 0, 0, failed("write", tmp, err)
		}
	}
	// Read after the redo point was chosen: every record before it that
	// listed chunks has put them in the debt (chunkdebt.go).
	debt := db.vac.debt.list()
	for _, c := range debt {
		rec = appendTID(rec[:0], c.tid)
		rec = binary.LittleEndian.AppendUint64(rec, c.xmin)
		if _, err := cw.Write(rec); err != nil {
			return 0, 0, failed("write", tmp, err)
		}
	}
	// Every head above is of a record inserted by now, and the log is
	// flushed this far below, before the file is made durable.
	need := db.wal.InsertLSN()
	hdr := indexFileHeader{walNeeded: uint32(min(uint64(need-min(need, ckpt)), math.MaxUint32)),
		redo: redo, checkpoint: ckpt, keys: keys,
		relFrozenXid: db.vac.relFrozenXid.Load(), dead: db.av.dead.Load(),
		fsmBlocks: uint32(len(fsm)), debtChunks: uint32(len(debt)), systemID: db.systemID, checkpointID: ckptID}
	head := hdr.encode()
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], crc32.Update(cw.crc.Sum32(), castagnoli, head))
	if _, err := bw.Write(sum[:]); err != nil {
		return 0, 0, failed("write", tmp, err)
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, failed("write", tmp, err)
	}
	if _, err := f.WriteAt(head, 0); err != nil {
		return 0, 0, failed("write", tmp, err)
	}
	size = indexHeaderSize + cw.n + 4
	// Rule 1 for the file: a head it names was set after its record was
	// inserted, possibly after this checkpoint's record, and that record
	// must be durable before the file is, or a crash would leave the file
	// naming a version the WAL never held and no page has. Likewise the
	// records that listed the debt's chunks (a first pass may have logged
	// one since the checkpoint's record): lost with the file kept, the
	// version they removed would be back after recovery, naming chunks
	// the debt says are free.
	if err := db.flushWAL(uint64(need)); err != nil {
		return 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, 0, failed("fsync", tmp, err)
	}
	if err := f.Close(); err != nil {
		return 0, 0, failed("close", tmp, err)
	}
	if err := db.fs.Rename(tmp, filepath.Join(db.dir, indexFileName)); err != nil {
		return 0, 0, failed("rename", tmp, err)
	}
	if err := db.fs.SyncDir(db.dir); err != nil {
		return 0, 0, failed("fsync", db.dir, err)
	}
	return keys, size, nil
}

// fileWriter writes sequentially to a vfs file from offset off.
type fileWriter struct {
	f   vfs.File
	off int64
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// indexFileData is a decoded index file.
type indexFileData struct {
	hdr  indexFileHeader
	fsm  []fsmBlock
	debt []chunkID
}

// fileReader reads a vfs file sequentially.
type fileReader struct {
	f   vfs.File
	off int64
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.f.ReadAt(p, r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// indexLoadLook is how many keys loadIndexFile decodes between looks at
// OpenContext's context (decodeIndexFile's stop): ten million keys take
// about a second.
const indexLoadLook = 1 << 14

// loadIndexFile reads the index file into db.idx (which must be empty) and
// returns what else it holds. Any problem with the file (missing,
// damaged, another format) is returned wrapped in errIndexFile, with the
// file name and offset; db.idx is then left empty. spare is the number of
// keys to leave room for beyond the file's. It returns an error wrapping
// ErrOpenStopped, not errIndexFile, when OpenContext's context ends
// meanwhile.
func (db *DB) loadIndexFile(spare int, accept func(indexFileHeader) error) (indexFileData, error) {
	name := filepath.Join(db.dir, indexFileName)
	size, err := db.fs.Stat(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return indexFileData{}, fmt.Errorf("%w: %s does not exist", errIndexFile, name)
		}
		return indexFileData{}, fmt.Errorf("%w: %v", errIndexFile, err)
	}
	f, err := db.fs.OpenReadOnly(name)
	if err != nil {
		return indexFileData{}, fmt.Errorf("%w: %v", errIndexFile, err)
	}
	defer f.Close()
	// Blocks a truncation replayed since the file's checkpoint cut off
	// may still be named by keys that redo's changes drop.
	// An OpenContext whose context ends stops the load as it stops redo:
	// the file is still good, and the next Open loads it.
	stop := func() error { return db.openStopped(0, 1) }
	d, err := decodeIndexFile(&fileReader{f: f}, size, name, db.idx, max(db.pool.NBlocks(), db.redoPeakBlocks), spare, accept, stop)
	if err != nil {
		db.idx.reset()
		if errors.Is(err, ErrOpenStopped) {
			return indexFileData{}, err
		}
		return indexFileData{}, fmt.Errorf("%w: %w", errIndexFile, err)
	}
	return d, nil
}

// decodeIndexFile decodes an index file of size bytes from r into ix,
// checking every length against what is left of the file, every key
// against MaxKeySize and the order, every TID against a heap of nblocks
// blocks, and the checksum at the end. Errors name the file and offset.
// The hash table is sized for the file's keys and spare more. stop, if
// not nil, is called before the first key and then every indexLoadLook
// keys; an error from it ends the decoding and is returned as it is.
func decodeIndexFile(r io.Reader, size int64, name string, ix *index, nblocks uint32, spare int, accept func(indexFileHeader) error, stop func() error) (indexFileData, error) {
	var d indexFileData
	var off int64
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s offset %d: %s", ErrCorruption, name, off, fmt.Sprintf(format, args...))
	}
	// damaged reports a checksum that fails. It says that some byte of
	// the file is wrong, not which: the file is named from its start, as
	// a damaged control file is, and the stored checksum's own offset is
	// given as such, not as the place of the damage.
	damaged := func(got, want uint32, format string, args ...any) error {
		off = 0
		return bad("the file is damaged: checksum over its %d bytes: stored %#x (at offset %d), computed %#x%s", size, got, size-4, want, fmt.Sprintf(format, args...))
	}
	if size < indexHeaderSize+4 {
		return d, bad("file of %d bytes is shorter than a header and checksum", size)
	}
	head := make([]byte, indexHeaderSize)
	if _, err := io.ReadFull(r, head); err != nil {
		return d, bad("reading the header: %v", err)
	}
	body := size - indexHeaderSize - 4
	// refuseAs returns err, a refusal of the file for what its header says,
	// if the file's checksum holds; if it fails, the header may be what
	// is damaged (the checksum covers it too, but is read last), and
	// what it says is not a reason: the file is reported as damaged. Only
	// a refused file is read to its end for this; it is rebuilt from the
	// heap anyway.
	//
	// hdrSize is the header size of the format the header names (an older
	// format's is shorter, and its body starts earlier): the checksum
	// covers the body, then the header, as each format computes it;
	// refuse is refuseAs for this build's format.
	refuseAs := func(hdrSize int, err error, says string) error {
		crc := crc32.New(castagnoli)
		crc.Write(head[hdrSize:])
		var sum [4]byte
		if _, rerr := io.CopyN(crc, r, body); rerr != nil {
			return err
		}
		if _, rerr := io.ReadFull(r, sum[:]); rerr != nil {
			return err
		}
		got, want := binary.LittleEndian.Uint32(sum[:]), crc32.Update(crc.Sum32(), castagnoli, head[:hdrSize])
		if got == want {
			return err
		}
		return damaged(got, want, " (the damage may be in the header, which reads: %s)", says)
	}
	refuse := func(err error, says string) error { return refuseAs(indexHeaderSize, err, says) }
	if m := binary.LittleEndian.Uint64(head); m != indexFileMagic {
		says := fmt.Sprintf("bad magic %#x", m)
		return d, refuse(bad("%s", says), says)
	}
	v := binary.LittleEndian.Uint32(head[8:])
	if v != indexFileVersion && v != indexFileVersionNoDebt {
		says := fmt.Sprintf("format version %d, this build reads %d", v, indexFileVersion)
		if old, ok := olderIndexHeaderSize[v]; ok {
			// An older format, whose checksum covers a shorter header
			// (the body follows it): checked as that format computes
			// it, so that a damaged version field (3 is two bits from
			// 1 and 2) is reported as damage, not as an old file.
			return d, refuseAs(old, bad("%s", says), says)
		}
		return d, refuse(bad("%s", says), says)
	}
	d.hdr = decodeIndexHeader(head)
	h := &d.hdr
	if z := binary.LittleEndian.Uint32(head[60:]); z != 0 && v == indexFileVersionNoDebt {
		off = 60
		says := fmt.Sprintf("reserved field of format version %d is %#x, not zero", v, z)
		return d, refuse(bad("%s", says), says)
	}
	if accept != nil {
		if err := accept(*h); err != nil {
			return d, refuse(err, err.Error())
		}
	}
	if h.keys > uint64(body)/indexEntryMin || uint64(h.fsmBlocks)*5+uint64(h.debtChunks)*chunkIDSize > uint64(body) {
		says := fmt.Sprintf("%d keys, %d free space entries and %d chunks of vacuum's debt, more than %d bytes hold", h.keys, h.fsmBlocks, h.debtChunks, body)
		return d, refuse(bad("header claims %s", says), says)
	}
	// The body is read through a buffer that cannot run past it, so that
	// the checksum after it is read apart.
	crc := crc32.New(castagnoli)
	br := &bodyReader{r: io.TeeReader(io.LimitReader(r, body), crc), buf: make([]byte, indexFileBuffer)}
	at := func() int64 { return indexHeaderSize + br.base + int64(br.pos) }
	// badBody reports what decoding the body found wrong, unless the
	// file's checksum fails: then the file is damaged, and what decoding
	// met is a symptom of the damage, not a reason of its own (a flipped
	// byte in a key reads as keys out of order). The rest of the body is
	// read for this only when decoding has failed; the index is rebuilt
	// from the heap anyway.
	badBody := func(format string, args ...any) error {
		err := bad(format, args...)
		if br.err != nil && br.err != io.EOF {
			return err // a read failed: no checksum to compare
		}
		if _, rerr := io.Copy(io.Discard, br.r); rerr != nil {
			return err
		}
		var sum [4]byte
		if _, rerr := io.ReadFull(r, sum[:]); rerr != nil {
			return err
		}
		got, want := binary.LittleEndian.Uint32(sum[:]), crc32.Update(crc.Sum32(), castagnoli, head)
		if got == want {
			return err
		}
		return damaged(got, want, " (decoding stopped at offset %d: %s)", off, fmt.Sprintf(format, args...))
	}
	key := make([]byte, 0, MaxKeySize)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.tree.Len() != 0 {
		return d, fmt.Errorf("decoding %s into an index that is not empty", name)
	}
	// Keys come in order, so the tree is built a full leaf at a time
	// (leafTree), on this goroutine, which also decodes. The hash table
	// is filled on a second one, a batch of leaves behind: each insert
	// there is a cache miss, and the two structures are independent
	// (both under ix.mu, held here throughout). A leaf is handed over
	// once full and not touched here again.
	const leavesPerBatch = 64
	toTable := make(chan []*leaf, 16)
	tabled := make(chan struct{})
	go func() {
		defer close(tabled)
		// Sized once: growing a table of millions of keys rehashes it
		// again and again and leaves the old slots as garbage.
		ix.table.reserve(int(h.keys) + spare)
		for ls := range toTable {
			for _, l := range ls {
				ix.table.insertAll(l.es)
			}
		}
	}()
	var arena entryArena
	var cur *leaf
	pending := make([]*leaf, 0, leavesPerBatch)
	defer func() {
		if cur != nil {
			pending = append(pending, cur)
		}
		if len(pending) > 0 {
			toTable <- pending
		}
		close(toTable)
		<-tabled
	}()
	// The most bytes a key's record takes.
	const maxRecord = 2*binary.MaxVarintLen64 + MaxKeySize + 6
	for i := uint64(0); i < h.keys; i++ {
		if stop != nil && i%indexLoadLook == 0 {
			if err := stop(); err != nil {
				return d, err
			}
		}
		off = at()
		p := br.fill(maxRecord)
		shared, n1 := binary.Uvarint(p)
		if n1 <= 0 {
			return d, badBody("key %d: %v", i, br.short(n1))
		}
		rest, n2 := binary.Uvarint(p[n1:])
		if n2 <= 0 {
			return d, badBody("key %d: %v", i, br.short(n2))
		}
		if shared > uint64(len(key)) || rest > MaxKeySize || shared+rest > MaxKeySize {
			return d, badBody("key %d: %d bytes shared with a key of %d and %d more (max key %d)", i, shared, len(key), rest, MaxKeySize)
		}
		p = p[n1+n2:]
		if uint64(len(p)) < rest+6 {
			return d, badBody("key %d: %v", i, br.short(0))
		}
		key = append(key[:shared], p[:rest]...)
		// The previous key is its entry's.
		if cur != nil && string(key) <= cur.es[len(cur.es)-1].key() {
			return d, badBody("key %d is not greater than the key before it", i)
		}
		tid := readTID(p[rest : rest+6])
		if tid.Block >= nblocks || int(tid.Slot) >= heap.PageSize {
			return d, badBody("key %d: head %s lies outside a heap of %d blocks", i, tid, nblocks)
		}
		br.pos += n1 + n2 + int(rest) + 6
		e := arena.new(key, tid.Pack(), h.keys-i-1)
		ix.tree.n++
		if cur != nil && len(cur.es) < leafMax {
			cur.es = append(cur.es, e)
			continue
		}
		if cur != nil {
			if pending = append(pending, cur); len(pending) == leavesPerBatch {
				toTable <- pending
				pending = make([]*leaf, 0, leavesPerBatch)
			}
		}
		cur = newLeaf(e, leafMax)
		ix.tree.add(cur)
	}
	for i := uint32(0); i < h.fsmBlocks; i++ {
		off = at()
		p := br.fill(5)
		if len(p) < 5 {
			return d, badBody("free space entry %d: %v", i, br.short(0))
		}
		b := fsmBlock{blk: binary.LittleEndian.Uint32(p), cat: p[4]}
		if b.blk >= nblocks || int(b.cat) > fsmEmpty {
			return d, badBody("free space entry %d: block %d category %d (heap of %d blocks)", i, b.blk, b.cat, nblocks)
		}
		br.pos += 5
		d.fsm = append(d.fsm, b)
	}
	for i := uint32(0); i < h.debtChunks; i++ {
		off = at()
		p := br.fill(chunkIDSize)
		if len(p) < chunkIDSize {
			return d, badBody("chunk %d of vacuum's debt: %v", i, br.short(0))
		}
		// A block past the heap is not refused: the entry is stale
		// (a truncation cuts off only pages without tuples), and Open
		// drops it rather than rebuild the whole index for it.
		c := chunkID{readTID(p), binary.LittleEndian.Uint64(p[6:])}
		if c.tid.Block == noBlock || int(c.tid.Slot) >= maxSlotsPerPage {
			return d, badBody("chunk %d of vacuum's debt: %s is not a heap slot", i, c.tid)
		}
		br.pos += chunkIDSize
		d.debt = append(d.debt, c)
	}
	off = at()
	if off != size-4 {
		return d, badBody("%d bytes follow the last entry, want 4 (the checksum)", size-off)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return d, bad("reading the checksum: %v", noEOF(err))
	}
	if got, want := binary.LittleEndian.Uint32(sum[:]), crc32.Update(crc.Sum32(), castagnoli, head); got != want {
		return d, damaged(got, want, "")
	}
	return d, nil
}

// noEOF reports a file that ends early as such.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// indexFileBuffer is the size of the buffers the index file is written and
// read through (bytes): large enough to hold any record (a key is at most
// MaxKeySize) many times over and to keep the calls few, small enough that
// allocating it at every Open and checkpoint costs little.
const indexFileBuffer = 256 << 10

// bodyReader reads the index file's body through a buffer that decoding
// works on directly: a key's record is parsed from the buffer's bytes, not
// through a reader's methods a byte at a time.
type bodyReader struct {
	r        io.Reader
	buf      []byte
	pos, end int   // buf[pos:end] is read and not yet decoded
	base     int64 // body offset of buf[0]
	err      error // the error that ended reading, io.EOF at the end
}

// fill returns the bytes read and not yet decoded, at least n of them
// unless the body ends (or reading fails) first.
func (b *bodyReader) fill(n int) []byte {
	if b.end-b.pos >= n || b.err != nil {
		return b.buf[b.pos:b.end]
	}
	copy(b.buf, b.buf[b.pos:b.end])
	b.base += int64(b.pos)
	b.end -= b.pos
	b.pos = 0
	for b.end < n && b.err == nil {
		m, err := b.r.Read(b.buf[b.end:])
		b.end += m
		b.err = err
	}
	return b.buf[b.pos:b.end]
}

// short says why fewer bytes than a record needs were there, given what
// binary.Uvarint returned (0: too few bytes; below 0: overflow).
func (b *bodyReader) short(n int) error {
	switch {
	case n < 0:
		return errors.New("varint overflows a 64-bit integer")
	case b.err != nil && b.err != io.EOF:
		return b.err
	}
	return io.ErrUnexpectedEOF
}

// noteIndexChange notes in changes the key index change rec carries, if
// any: a new version's key and TID, or a head vacuum moved or dropped
// (invalid TID). It reports whether rec placed a version (an insert or an
// update, chunks not counted) and whether it set an xmax on one (an update
// or a delete), which replayDead counts for autovacuum as the writing
// transaction ends. Records were checked by redo.
func noteIndexChange(rec wal.Record, changes map[string]heap.TID) (placed, obsoleted bool) {
	switch rec.Type {
	case recHeapInsert, recHeapUpdate:
		hr, err := decodeHeapRecord(rec.Type, rec.Data)
		if err != nil {
			return false, false
		}
		h, key, _, err := heap.DecodeTuple(hr.Tuple)
		if err != nil || h.Infomask&heap.Chunk != 0 {
			return false, false
		}
		changes[string(key)] = hr.New
		return true, rec.Type == recHeapUpdate
	case recHeapDelete:
		return false, true
	case recIndexHead:
		if key, head, err := decodeIndexHead(rec.Data); err == nil {
			changes[string(key)] = head
		}
	case recIndexHeads:
		// In the record's order, as if each were a record of its own.
		if cs, err := decodeIndexHeads(rec.Data); err == nil {
			for _, c := range cs {
				changes[string(c.key)] = c.head
			}
		}
	}
	return false, false
}

// replayDead counts, for autovacuum, the dead versions the transactions
// recovery replays leave, as each transaction's end counts them in the
// running system (autovacuumState.noteEnd): a commit the versions it
// superseded or deleted, an abort (a record, or no end in the log: the
// crash aborted it) the versions it placed. Counting update and delete
// records alone, as before, forgot every version an aborted or crashed
// transaction inserted, and counted an aborted delete's live version.
//
// The slots the replayed pruning records free (vacuum's and pruning's by
// updates and reads) are taken off, as noteRemoved and a completed Vacuum
// take them off the running count: without that, every version that died
// since the checkpoint counted again after a crash, vacuumed or not: a
// process updating and deleting 3,000 keys under autovacuum (200 ms
// naptime), killed with SIGKILL after 4 to 6 s and reopened three times,
// came back with 2,088, 8,226 and 14,108 dead, growing with each cycle;
// with them taken off, 295, 64 and 0.
//
// It is close, not exact: a transaction's records before the redo point
// are not replayed (the index file's count, taken after the checkpoint,
// holds no such transaction ended later), one that ended between the redo
// point and the index file's writing is counted twice, a chunk listed
// before the redo point or written by an aborted transaction is taken
// off as if it were a version when a replayed record frees it, and a
// vacuum takes off what it removed rather than the count at its start.
// Each errs by the transactions around one checkpoint or one vacuum run.
//
// The chunks a replayed record listed (those of the out-of-line versions
// it freed, freed by vacuum's later revisit) are not taken off when their
// slots are freed: a 12 KB value has a few chunks, and counting each as a
// version took off several times what the vacuum removed, so that a crash
// after vacuuming large values forgot the versions that died after the
// run (30 such values vacuumed, 7 updated after: 0 dead after the crash).
type replayDead struct {
	open    map[uint64]*[2]int64 // xid: versions placed, versions obsoleted
	dead    int64
	removed int64 // slots the replayed pruning records freed, less chunks
	// chunks are the slots of the chunks replayed records listed and no
	// replayed record has freed yet.
	chunks map[heap.TID]struct{}
}

// notePrune takes the slots a pruning record frees (its decoded pages)
// off the count, but for those of the chunks an earlier replayed record
// listed, and remembers the chunks this one lists.
func (r *replayDead) notePrune(pages []*prunePage, listed []chunkID) {
	for _, p := range pages {
		for _, s := range p.unused {
			tid := heap.TID{Block: p.block, Slot: s}
			if _, ok := r.chunks[tid]; ok {
				delete(r.chunks, tid)
				continue
			}
			r.removed++
		}
	}
	// After the record's own slots: its chunks are freed by a later one.
	for _, c := range listed {
		if r.chunks == nil {
			r.chunks = make(map[heap.TID]struct{})
		}
		r.chunks[c.tid] = struct{}{}
	}
}

// note counts rec, which noteIndexChange said placed or obsoleted a version.
func (r *replayDead) note(rec wal.Record, placed, obsoleted bool) {
	switch rec.Type {
	case recCommit, recAbort:
		if c, ok := r.open[rec.XID]; ok {
			delete(r.open, rec.XID)
			if rec.Type == recCommit {
				r.dead += c[1]
			} else {
				r.dead += c[0]
			}
		}
		return
	}
	if (!placed && !obsoleted) || rec.XID == 0 {
		return
	}
	if r.open == nil {
		r.open = make(map[uint64]*[2]int64)
	}
	c := r.open[rec.XID]
	if c == nil {
		c = new([2]int64)
		r.open[rec.XID] = c
	}
	if placed {
		c[0]++
	}
	if obsoleted {
		c[1]++
	}
}

// total is the count at the end of the log: a transaction still open
// there was cut off by the crash and is aborted.
// It may be negative (versions the index file's count held, pruned
// since): the caller adds that count and clamps the sum at zero.
func (r *replayDead) total() int64 {
	d := r.dead - r.removed
	for _, c := range r.open {
		d += c[0]
	}
	return d
}

// noteRedoTouched remembers that redo changed blk, whose free space the
// index file's map may no longer describe, and the page's free space after
// the change: read here, while redo holds the page, because reading the
// blocks again after redo would fetch from disk every one the buffer pool
// evicted meanwhile (a second at ten million keys after 400 MB of redo).
func (db *DB) noteRedoTouched(blk uint32, page []byte) {
	if db.redoTouched != nil {
		free := -1
		if !heap.IsNew(page) {
			free = heap.FreeSpace(page)
		}
		db.redoTouched[blk] = free
	}
}

// openIndex loads the index file after redo and applies the key changes
// redo met, then restores the free space map, the vacuum counters and
// vacuum's debt the file carries, the debt with the chunks the replayed
// records listed (listed, noteListedChunks). bulkLSN is the LSN of the last
// bulk load commit redo replayed (0: none); the file of a checkpoint whose
// redo point is not past it is not used, nor one whose heads need WAL past
// end, where the log recovered ends. It returns why the file was not
// used ("" when it was), in which case the caller rebuilds from the heap;
// the error is for failures that must stop Open.
func (db *DB) openIndex(ctrl controlData, ckpts map[wal.LSN]checkpointRecord, end wal.LSN, changes map[string]heap.TID, listed map[chunkID]struct{}, replayedDead int64, bulkLSN wal.LSN) (string, error) {
	// Room in the hash table for the keys redo added, so that applying
	// them does not grow it (a growth moves a shard to a new array).
	d, err := db.loadIndexFile(len(changes), func(h indexFileHeader) error {
		if h.systemID != db.systemID {
			return fmt.Errorf("it belongs to the database with system identifier %d, not to this one (%d)", h.systemID, db.systemID)
		}
		if bulkLSN != 0 && bulkLSN >= h.redo {
			// The file of a checkpoint before the commit of a bulk
			// load that redo replayed lacks the loaded keys, which no
			// replayed record names one by one.
			return fmt.Errorf("a bulk load committed at %s, after the index file's checkpoint (redo %s)", bulkLSN, h.redo)
		}
		if err := checkpointMatches(h, ctrl, ckpts); err != nil {
			return err
		}
		return walReaches(h, end)
	})
	if err != nil {
		if errors.Is(err, errIndexFile) {
			return err.Error(), nil
		}
		return "", err
	}
	ix := db.idx
	ix.mu.Lock()
	for k, tid := range changes {
		if tid.Valid() {
			ix.getOrCreateLocked([]byte(k)).head.Store(tid.Pack())
		} else if e := ix.lookupLocked(k); e != nil {
			ix.removeEntryLocked(e)
		}
	}
	if n := db.pool.NBlocks(); db.redoPeakBlocks > n {
		// Every key a truncation's blocks held was dropped before it.
		var past *indexEntry
		ix.tree.Ascend(func(e *indexEntry) bool {
			if t := e.headTID(); t.Valid() && t.Block >= n {
				past = e
				return false
			}
			return true
		})
		if past != nil {
			ix.mu.Unlock()
			db.idx.reset()
			return fmt.Sprintf("key %q has its head at %s, past the %d blocks the heap was cut back to", truncKey([]byte(past.key())), past.headTID(), n), nil
		}
	}
	ix.mu.Unlock()
	db.fsm.restore(d.fsm)
	db.fsm.forgetFrom(db.pool.NBlocks())
	for blk, free := range db.redoTouched {
		if free >= 0 {
			db.fsm.record(blk, free)
		}
	}
	if n := db.pool.NBlocks(); n > 0 {
		db.targets.blk[0].Store(n - 1)
	}
	db.vac.relFrozenXid.Store(max(d.hdr.relFrozenXid, db.clog.OldestXid()))
	db.av.dead.Store(max(0, d.hdr.dead+replayedDead))
	// Slots past the heap's end now went with a truncation, which cuts
	// off only pages without tuples.
	debt := d.debt
	for c := range listed {
		debt = append(debt, c)
	}
	n := db.pool.NBlocks()
	debt = slices.DeleteFunc(debt, func(c chunkID) bool { return c.tid.Block >= n })
	db.vac.debt.reset(debt)
	return "", nil
}

// verifyIndexFile checks the index file the checkpoint Verify just took
// wrote: it must decode, name the control file's checkpoint, and hold
// exactly the keys and heads of the index in memory (entries without a
// version aside). Without concurrent writers the two are equal; a key
// whose head in memory changed says so (changed: its version was written
// or deleted by a transaction that had not ended when Verify began, so
// that the file may hold the head before it) and is not reported.
func (db *DB) verifyIndexFile(problem func(format string, args ...any), changed func(heap.TID) bool) {
	ctrl, _, err := readControl(db.fs, db.dir)
	if err != nil {
		return // reported with the control file
	}
	file := newIndex()
	name := filepath.Join(db.dir, indexFileName)
	size, err := db.fs.Stat(name)
	if err != nil {
		problem("index file: %v", err)
		return
	}
	f, err := db.fs.OpenReadOnly(name)
	if err != nil {
		problem("index file: %v", err)
		return
	}
	defer f.Close()
	d, err := decodeIndexFile(&fileReader{f: f}, size, name, file, db.pool.NBlocks(), 0, nil, nil)
	if err != nil {
		problem("index file: %v", err)
		return
	}
	if d.hdr.systemID != ctrl.SystemID {
		problem("index file %s is of the database with system identifier %d, the control file of %d", name, d.hdr.systemID, ctrl.SystemID)
	}
	if d.hdr.redo != ctrl.RedoLSN || d.hdr.checkpoint != ctrl.CheckpointLSN {
		problem("index file %s names the checkpoint at %s (redo %s), the control file the one at %s (redo %s)",
			name, d.hdr.checkpoint, d.hdr.redo, ctrl.CheckpointLSN, ctrl.RedoLSN)
	} else if id := db.ckptID.Load(); d.hdr.checkpointID != id {
		problem("index file %s names the checkpoint identifier %016x, the checkpoint just taken %016x", name, d.hdr.checkpointID, id)
	}
	// The differences are collected under the index's lock and judged
	// after it (changed reads the heap through the pool, whose page locks
	// come before the index's mutex).
	type difference struct {
		key       string
		got, want heap.TID // got: the file's head, want: the memory's
		inFile    bool
	}
	var diffs []difference
	db.idx.mu.RLock()
	db.idx.tree.Ascend(func(e *indexEntry) bool {
		want := e.headTID()
		if !want.Valid() {
			return true
		}
		got := file.lookupLocked(e.key())
		switch {
		case got == nil:
			diffs = append(diffs, difference{key: e.key(), want: want})
		case got.headTID() != want:
			diffs = append(diffs, difference{key: e.key(), got: got.headTID(), want: want, inFile: true})
		}
		return true
	})
	file.tree.Ascend(func(fe *indexEntry) bool {
		if e := db.idx.lookupLocked(fe.key()); e == nil || !e.headTID().Valid() {
			diffs = append(diffs, difference{key: fe.key(), got: fe.headTID(), want: heap.InvalidTID, inFile: true})
		}
		return true
	})
	db.idx.mu.RUnlock()
	shown := 0
	differ := func(format string, args ...any) {
		if shown++; shown <= 10 {
			problem("index file %s: "+format, append([]any{name}, args...)...)
		}
	}
	for _, d := range diffs {
		key := truncKey([]byte(d.key))
		switch {
		case d.want.Valid() && changed(d.want):
		case !d.inFile:
			differ("key %q is missing (head %s in memory)", key, d.want)
		case d.want.Valid():
			differ("key %q has head %s, %s in memory", key, d.got, d.want)
		default:
			differ("key %q is not in the index in memory", key)
		}
	}
	if shown > 10 {
		problem("index file %s: %d more differences", name, shown-10)
	}
}

// checkpointMatches says why an index file whose header is h does not
// belong to the control file's checkpoint or one after it whose record is
// in ckpts (nil when it does): it must name such a checkpoint record, with
// its redo point and its identifier.
func checkpointMatches(h indexFileHeader, ctrl controlData, ckpts map[wal.LSN]checkpointRecord) error {
	c, ok := ckpts[h.checkpoint]
	if ok && h.checkpoint >= ctrl.CheckpointLSN && c.redo == h.redo {
		if c.id == h.checkpointID {
			return nil
		}
		return fmt.Errorf("it names the checkpoint at %s (redo %s) with identifier %016x, but the checkpoint record there has %016x: it was written by a copy of this database",
			h.checkpoint, h.redo, h.checkpointID, c.id)
	}
	return fmt.Errorf("it belongs to the checkpoint at %s (redo %s), not to the control file's at %s (redo %s) or one after it in the WAL",
		h.checkpoint, h.redo, ctrl.CheckpointLSN, ctrl.RedoLSN)
}

// indexFileLooksUsable reads the index file's header only and reports
// whether it names the checkpoint Open would accept (openIndex decides for
// good, after redo, checksum included).
func (db *DB) indexFileLooksUsable(ctrl controlData, ckpts map[wal.LSN]checkpointRecord, end wal.LSN) bool {
	f, err := db.fs.OpenReadOnly(filepath.Join(db.dir, indexFileName))
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, indexHeaderSize)
	if _, err := f.ReadAt(head, 0); err != nil {
		return false
	}
	if binary.LittleEndian.Uint64(head) != indexFileMagic || binary.LittleEndian.Uint32(head[8:]) != indexFileVersion {
		return false
	}
	h := decodeIndexHeader(head)
	return checkpointMatches(h, ctrl, ckpts) == nil && walReaches(h, end) == nil
}

// walReaches says why an index file whose header is h cannot be used with
// a WAL that ends at end (nil when it can): its heads may be of records
// past end, which recovery did not replay.
func walReaches(h indexFileHeader, end wal.LSN) error {
	if need := h.checkpoint + wal.LSN(h.walNeeded); end < need {
		return fmt.Errorf("its heads need the WAL up to %s (%d bytes past its checkpoint at %s), but the log ends at %s: the WAL after its checkpoint was lost or cut",
			need, h.walNeeded, h.checkpoint, end)
	}
	return nil
}

// removeRefusedIndexFile removes the index file recovery did not use, and
// makes that durable, before anything is logged: the checkpoint after the
// rebuild replaces it, but a crash or a failed index file write before
// that leaves it, and each such Open logs a checkpoint record. A file
// refused because the log ended before what its heads need would
// otherwise be taken as usable once records logged since (reusing the
// LSNs of the lost ones) carry the log that far again, and its heads
// name versions no page holds. A missing file is no error.
func (db *DB) removeRefusedIndexFile() error {
	name := filepath.Join(db.dir, indexFileName)
	if err := db.fs.Remove(name); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, withPath("remove", name, err))
	}
	if err := db.fs.SyncDir(db.dir); err != nil {
		return fmt.Errorf("%w: %w", ErrIOFailure, withPath("fsync", db.dir, err))
	}
	return nil
}
