package clog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// Page and segment geometry. See the package documentation for the
// diagram; these numbers are part of the format.
const (
	// PageSize is the size in bytes of one CLOG page, in memory and on disk.
	PageSize = 8192
	// headerSize is the size in bytes of the page header that precedes the
	// status bits.
	headerSize = 16
	// pageVersion is the format version stored in byte 12 of every written
	// page.
	pageVersion = 1
	// bitsPerXid is the width of one transaction's status, as PostgreSQL's
	// CLOG_BITS_PER_XACT.
	bitsPerXid = 2
	// xidsPerByte is how many statuses one byte holds.
	xidsPerByte = 8 / bitsPerXid
	// XidsPerPage is how many transaction statuses one page holds: four
	// to a byte in the 8,176 bytes after the 16-byte header.
	XidsPerPage = 32704
	// PagesPerSegment is how many pages one segment file holds, as
	// PostgreSQL's SLRU_PAGES_PER_SEGMENT. A full segment file is 256 KiB.
	PagesPerSegment = 32
	// segmentNameLen is the fixed number of upper-case hex digits in a
	// segment file name. 12 digits cover segment numbers up to 2^48, and the
	// largest 64-bit xid lives in segment (2^64-1)/(32704*32) < 2^45.
	segmentNameLen = 12
)

// XidsPerPage is written out so that its documentation shows the number; a
// geometry that disagreed with it would make one of these constants
// negative and fail to compile.
const (
	_ = uint((PageSize-headerSize)*xidsPerByte - XidsPerPage)
	_ = uint(XidsPerPage - (PageSize-headerSize)*xidsPerByte)
)

// crcTable is CRC-32C (Castagnoli), the polynomial PostgreSQL uses for WAL
// records and the one CPUs accelerate (SSE4.2, ARMv8 CRC). It is read-only
// after package initialization.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// xidPage returns the page number holding xid.
func xidPage(xid uint64) uint64 { return xid / XidsPerPage }

// xidByte returns the byte offset, within the whole page image, of the byte
// holding xid's status.
func xidByte(xid uint64) int { return headerSize + int(xid%XidsPerPage)/xidsPerByte }

// xidShift returns the bit shift of xid's status within its byte. The lowest
// xid of a byte takes the lowest two bits, as in PostgreSQL's clog.c.
func xidShift(xid uint64) uint { return uint(xid%xidsPerByte) * bitsPerXid }

// pageSegment returns the segment number holding page and the byte offset of
// the page within that segment's file.
func pageSegment(pageno uint64) (segno uint64, off int64) {
	return pageno / PagesPerSegment, int64(pageno%PagesPerSegment) * PageSize
}

// XidFile returns where xid's status lives on disk: the segment file's name
// (without directory) and the byte offset in it of the byte holding the
// status, so that a finding about xid can name the file and offset.
func XidFile(xid uint64) (name string, offset int64) {
	segno, off := pageSegment(xidPage(xid))
	return segmentName(segno), off + int64(xidByte(xid))
}

// ParseSegmentName returns the number of the segment whose file name
// (without directory) is name: 12 upper-case hex digits. ok is false for
// any other name, the CLOG's own truncation point file included
// (IsOwnFile).
func ParseSegmentName(name string) (seg uint64, ok bool) {
	if len(name) != segmentNameLen || strings.ToUpper(name) != name {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 16, 64)
	return n, err == nil
}

// IsOwnFile reports whether name (without directory) is a file the CLOG
// keeps in its directory beside its segments: its truncation point, or
// that file being replaced.
func IsOwnFile(name string) bool { return name == oldestName || name == oldestTmpName }

// SegmentOf returns the number of the segment holding xid's status.
func SegmentOf(xid uint64) uint64 {
	seg, _ := pageSegment(xidPage(xid))
	return seg
}

// segmentName returns the file name (without directory) of segment segno.
func segmentName(segno uint64) string {
	return fmt.Sprintf("%0*X", segmentNameLen, segno)
}

// encodePage stamps the header of the page image b (len PageSize) for page
// number pageno: it fills in the page number, version and reserved bytes,
// then the checksum over everything after the checksum field. The status bits
// in b[headerSize:] are left as they are.
func encodePage(b []byte, pageno uint64) {
	binary.LittleEndian.PutUint64(b[4:12], pageno)
	b[12] = pageVersion
	b[13], b[14], b[15] = 0, 0, 0
	binary.LittleEndian.PutUint32(b[0:4], crcOf(b))
}

// crcOf returns the checksum of the page image b: CRC-32C of every byte
// after the checksum field.
func crcOf(b []byte) uint32 { return crc32.Checksum(b[4:PageSize], crcTable) }

// isZero reports whether every byte of b is zero.
func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decodePage checks a page image read from disk that is expected to be page
// number pageno. An all-zero image (a page never written, or a hole in a
// sparse file) is valid and means every xid on it is in progress. Otherwise
// the checksum, page number, version and reserved bytes must all check out.
// The returned error does not wrap ErrCorrupt and names no file: the caller
// adds both, since only it knows where the bytes came from.
func decodePage(b []byte, pageno uint64) error {
	if len(b) != PageSize {
		return fmt.Errorf("page is %d bytes, want %d", len(b), PageSize)
	}
	if isZero(b) {
		return nil
	}
	stored := binary.LittleEndian.Uint32(b[0:4])
	if sum := crcOf(b); sum != stored {
		return fmt.Errorf("checksum mismatch: stored %08x, computed %08x", stored, sum)
	}
	if got := binary.LittleEndian.Uint64(b[4:12]); got != pageno {
		return fmt.Errorf("page number %d in header, want %d", got, pageno)
	}
	if b[12] != pageVersion {
		return fmt.Errorf("unknown page version %d", b[12])
	}
	if b[13]|b[14]|b[15] != 0 {
		return fmt.Errorf("reserved header bytes %02x%02x%02x are not zero", b[13], b[14], b[15])
	}
	return nil
}

// getStatus reads xid's status from the page image b, which must hold xid's
// page.
func getStatus(b []byte, xid uint64) Status {
	return Status(b[xidByte(xid)]>>xidShift(xid)) & statusMask
}

// setStatus writes xid's status into the page image b and reports whether
// the bits changed.
func setStatus(b []byte, xid uint64, s Status) bool {
	i, sh := xidByte(xid), xidShift(xid)
	old := b[i]
	b[i] = old&^(byte(statusMask)<<sh) | byte(s)<<sh
	return b[i] != old
}
