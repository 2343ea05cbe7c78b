package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// LSN is a byte position in the logical WAL stream: segment start LSN plus
// the byte offset inside the segment file. LSN 0 is invalid (it lies inside
// the header of a segment, where no record can start). It plays the part of
// PostgreSQL's XLogRecPtr.
type LSN uint64

// String formats the LSN the way PostgreSQL prints an XLogRecPtr: the high
// and low 32 bits in hexadecimal, separated by a slash, the low half padded
// to 8 digits as PostgreSQL 18 pads it (e.g. "0/01000020").
func (l LSN) String() string {
	return fmt.Sprintf("%X/%08X", uint64(l)>>32, uint32(l))
}

// RecordType says what a record's payload means. 0 is invalid; the wal
// package reserves 1..15 for itself (segment switch); callers use 16..255.
type RecordType uint8

const (
	// typeSwitch ends a segment early: the rest of the segment after it is
	// unused and the next record starts right after the next segment's header
	// (PostgreSQL's XLOG_SWITCH, used here only when a record does not fit).
	typeSwitch RecordType = 1
	// MinUserRecordType is the smallest RecordType callers may insert.
	MinUserRecordType RecordType = 16
)

// Record is one WAL record as returned by Reader.Next.
type Record struct {
	LSN   LSN        // start of this record
	End   LSN        // start of the next record: what a caller flushes up to
	Type  RecordType // the caller's type, 16..255 (switch records are not returned)
	Flags uint8      // as given to InsertFlags; the package gives them no meaning
	XID   uint64     // the transaction id given to Insert
	// Data is the payload, owned by the caller after Next returns, or
	// valid only until the next call to Next with Reader.SetBorrowData.
	Data []byte
}

// Sentinel errors. Test with errors.Is; the returned errors wrap these with
// the file name and byte offset where that applies.
var (
	// ErrCorrupt reports bytes on disk that cannot be part of a valid log
	// where a valid log is known to exist (e.g. a bad segment header).
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrClosed is returned by operations on a closed Writer or Reader.
	ErrClosed = errors.New("wal: closed")
	// ErrRecordTooLarge is returned by Insert for a payload above
	// MaxRecordSize or above what fits in one segment.
	ErrRecordTooLarge = errors.New("wal: record too large")
	// ErrSyncFailed is returned, sticky, by every Flush and Insert after a
	// write or fsync of a segment file failed. The failure is never retried:
	// after a failed fsync the kernel may have dropped the dirty pages, so a
	// later successful fsync proves nothing (the 2018 "fsyncgate").
	ErrSyncFailed = errors.New("wal: write or sync failed")
)

// On-disk sizes and constants; part of the format (see the package
// documentation).
const (
	segHeaderSize = 32
	recHeaderSize = 32
	alignment     = 8

	segMagic   = 0x4c41574d // "MWAL" little-endian: 'M','W','A','L'
	segVersion = 1

	// MaxRecordSize is the largest payload Insert accepts, in bytes. A record
	// must also fit in one segment after its header: with 1 MiB segments the
	// limit is MaxPayload(1 MiB), smaller than this.
	MaxRecordSize = 4 << 20

	// MinSegmentSize and MaxSegmentSize bound Options.SegmentSize (bytes).
	MinSegmentSize = 1 << 20
	MaxSegmentSize = 1 << 30
	// DefaultSegmentSize is PostgreSQL's default wal_segment_size.
	DefaultSegmentSize = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FirstLSN returns the LSN of the first record of an empty log with the given
// segment size (bytes): the log starts in segment 1, as PostgreSQL's does,
// right after its header. The result is never 0.
func FirstLSN(segmentSize int64) LSN {
	return LSN(segmentSize) + segHeaderSize
}

// MaxPayload returns the largest payload (bytes) a record may carry in a log
// with the given segment size: MaxRecordSize, or less if a record of that
// size would not fit in a fresh segment.
func MaxPayload(segmentSize int64) int {
	fit := segmentSize - segHeaderSize - recHeaderSize
	fit -= fit % alignment
	if fit < MaxRecordSize {
		return int(fit)
	}
	return MaxRecordSize
}

// recordSize is the number of log bytes a record with an n-byte payload
// occupies: header plus payload rounded up to the alignment.
func recordSize(n int) int64 {
	return (recHeaderSize + int64(n) + alignment - 1) &^ (alignment - 1)
}

// SegmentFile returns the name of the segment file that holds lsn, in a log
// of segmentSize-byte segments (a positive size), and lsn's byte offset in
// it: for reports that must name the file and offset of damage.
func SegmentFile(lsn LSN, segmentSize int64) (name string, offset int64) {
	off := int64(uint64(lsn) % uint64(segmentSize))
	return segmentName(lsn - LSN(off)), off
}

func segmentName(start LSN) string {
	return fmt.Sprintf("%016X", uint64(start))
}

// IsSegmentName reports whether name (without directory) is a WAL segment
// file's, or that of a segment being prepared (its name with ".tmp"): for
// checks that look for files in the WAL directory that the log does not
// own.
func IsSegmentName(name string) bool {
	_, ok := parseSegmentName(strings.TrimSuffix(name, tempSuffix))
	return ok
}

// parseSegmentName returns the start LSN encoded in a segment file name; ok
// is false for anything that is not exactly 16 upper-case hex digits (temp
// files and strangers are ignored).
func parseSegmentName(name string) (LSN, bool) {
	if len(name) != 16 {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'F') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(name, 16, 64)
	if err != nil {
		return 0, false
	}
	return LSN(v), true
}

func validSegmentSize(n int64) bool {
	return n >= MinSegmentSize && n <= MaxSegmentSize && n&(n-1) == 0
}

// segHeader is the decoded segment header.
type segHeader struct {
	size  int64
	start LSN
	// durable is the segment's durable-LSN mark, 0 for none: when the
	// segment was prepared, the log was durable below it. A crash cannot
	// get ahead of it (the segment is made durable whole before its name
	// appears), so a valid log ending below a mark present in the directory
	// has lost its tail. Stored in bytes 24..28 as the distance below start
	// in 8-byte units plus one (0: no mark), which old readers ignore.
	durable LSN
	// tag identifies the log the segment belongs to: drawn at random when
	// a new log's first segment is made and copied into every later one,
	// so that a segment of another database's log, at the same LSN, is
	// told apart (PostgreSQL's long page header carries the system
	// identifier for this). 0 in segments of builds that did not write
	// one; stored in bytes 6..8, which those builds wrote as zero and
	// older readers ignore.
	tag uint16
}

// encodeDurableMark returns the header field for mark in a segment starting
// at start: 0 (no mark) unless mark lies at most 32 GiB below start.
func encodeDurableMark(start, mark LSN) uint32 {
	if mark == 0 || mark > start {
		return 0
	}
	units := (uint64(start-mark) + alignment - 1) / alignment
	if units >= 1<<32-1 {
		return 0
	}
	return uint32(units + 1)
}

func encodeSegHeader(b []byte, h segHeader) {
	_ = b[segHeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], segMagic)
	binary.LittleEndian.PutUint16(b[4:], segVersion)
	binary.LittleEndian.PutUint16(b[6:], h.tag)
	binary.LittleEndian.PutUint64(b[8:], uint64(h.size))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.start))
	binary.LittleEndian.PutUint32(b[24:], encodeDurableMark(h.start, h.durable))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
}

// decodeSegHeader checks a segment header; it returns a description of the
// first problem found, or nil.
func decodeSegHeader(b []byte) (segHeader, error) {
	if len(b) < segHeaderSize {
		return segHeader{}, errors.New("short segment header")
	}
	if got := binary.LittleEndian.Uint32(b[0:]); got != segMagic {
		return segHeader{}, fmt.Errorf("bad segment magic %#x", got)
	}
	if got, want := binary.LittleEndian.Uint32(b[28:]), crc32.Checksum(b[:28], castagnoli); got != want {
		return segHeader{}, fmt.Errorf("segment header checksum %#x, want %#x", got, want)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != segVersion {
		return segHeader{}, fmt.Errorf("unsupported segment format version %d", v)
	}
	h := segHeader{
		size:  int64(binary.LittleEndian.Uint64(b[8:])),
		start: LSN(binary.LittleEndian.Uint64(b[16:])),
		tag:   binary.LittleEndian.Uint16(b[6:]),
	}
	if h.size <= 0 || !validSegmentSize(h.size) {
		return segHeader{}, fmt.Errorf("bad segment size %d", h.size)
	}
	if uint64(h.start)%uint64(h.size) != 0 {
		return segHeader{}, fmt.Errorf("segment start %s not a multiple of segment size %d", h.start, h.size)
	}
	if d := binary.LittleEndian.Uint32(b[24:]); d != 0 && uint64(d-1)*alignment <= uint64(h.start) {
		h.durable = h.start - LSN(uint64(d-1)*alignment)
	}
	return h, nil
}

// payloadCRC starts a record checksum. The checksum covers the payload first
// and the header (minus the crc field) last, as PostgreSQL's XLogInsert does,
// so the expensive part can be computed before the insertion lock is taken
// and only the 28 header bytes (which hold the LSN) are summed under it.
func payloadCRC(data []byte) uint32 {
	return crc32.Update(0, castagnoli, data)
}

// encodeRecHeader writes a record header into b (recHeaderSize bytes),
// finishing the checksum begun by payloadCRC(data).
func encodeRecHeader(b []byte, lsn LSN, typ RecordType, flags uint8, xid uint64, n int, pcrc uint32, durable LSN) {
	_ = b[recHeaderSize-1]
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	binary.LittleEndian.PutUint64(b[8:], uint64(lsn))
	binary.LittleEndian.PutUint64(b[16:], xid)
	b[24] = byte(typ)
	b[25] = flags
	putUint48(b[26:32], uint64(durable))
	binary.LittleEndian.PutUint32(b[0:], crc32.Update(pcrc, castagnoli, b[4:recHeaderSize]))
}

// recHeader is a decoded record header, not yet checked against its payload.
type recHeader struct {
	durable LSN // the durable-LSN mark: the log was durable below it when the record was inserted
	crc     uint32
	n       int // payload length, bytes
	lsn     LSN
	xid     uint64
	typ     RecordType
	flags   uint8
}

// decodeRecHeader decodes and checks a record header found at lsn, room bytes
// before the end of its segment, in a log whose payload limit is maxPayload.
// ok is false when the header cannot start a valid record there; that is the
// end of the log, not an error.
func decodeRecHeader(b []byte, lsn LSN, room int64, maxPayload int) (recHeader, bool) {
	if len(b) < recHeaderSize || room < recHeaderSize {
		return recHeader{}, false
	}
	h := recHeader{
		crc:   binary.LittleEndian.Uint32(b[0:]),
		lsn:   LSN(binary.LittleEndian.Uint64(b[8:])),
		xid:   binary.LittleEndian.Uint64(b[16:]),
		typ:   RecordType(b[24]),
		flags: b[25],
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if n > uint32(maxPayload) || recordSize(int(n)) > room {
		return recHeader{}, false
	}
	h.n = int(n)
	if h.lsn != lsn || h.typ == 0 {
		return recHeader{}, false
	}
	h.durable = LSN(uint48(b[26:32]))
	if h.durable > lsn {
		return recHeader{}, false
	}
	if h.typ < MinUserRecordType && (h.typ != typeSwitch || h.n != 0) {
		return recHeader{}, false
	}
	return h, true
}

// checkRecord verifies the checksum of a record whose header is hb and
// payload is data.
func checkRecord(hb []byte, data []byte, h recHeader) bool {
	return crc32.Update(payloadCRC(data), castagnoli, hb[4:recHeaderSize]) == h.crc
}

// maxDurableMark is the largest durable-LSN mark a header can hold (48 bits,
// 256 TiB of log); a larger flushed LSN is recorded as 0, "no claim".
const maxDurableMark = 1<<48 - 1

func putUint48(b []byte, v uint64) {
	if v > maxDurableMark {
		v = 0
	}
	for i := range 6 {
		b[i] = byte(v >> (8 * i))
	}
}

func uint48(b []byte) uint64 {
	var v uint64
	for i := range 6 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}
