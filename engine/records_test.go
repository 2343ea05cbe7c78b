package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

// encodeInsert and encodeUpdate encode a heap record into a new slice.
func encodeInsert(tid heap.TID, tup []byte) []byte { return appendInsert(nil, tid, tup) }

func encodeUpdate(old, new heap.TID, tup []byte) []byte { return appendUpdate(nil, old, new, tup) }

func TestHeapRecordRoundTrip(t *testing.T) {
	tup := heap.AppendTuple(nil, heap.TupleHeader{Xmin: 7, Prev: heap.TID{Block: 3, Slot: 4}}, []byte("key"), []byte("value"))
	old, new := heap.TID{Block: 1, Slot: 2}, heap.TID{Block: 9, Slot: 8}
	cases := []struct {
		typ  wal.RecordType
		data []byte
		want heapRecord
	}{
		{recHeapInsert, encodeInsert(new, tup), heapRecord{Old: heap.InvalidTID, New: new, Tuple: tup}},
		{recHeapUpdate, encodeUpdate(old, new, tup), heapRecord{Old: old, New: new, Tuple: tup}},
		{recHeapDelete, encodeDelete(old), heapRecord{Old: old, New: heap.InvalidTID}},
	}
	for _, c := range cases {
		got, err := decodeHeapRecord(c.typ, c.data)
		if err != nil {
			t.Fatalf("%s: %v", recordTypeName(c.typ), err)
		}
		if got.Old != c.want.Old || got.New != c.want.New || !bytes.Equal(got.Tuple, c.want.Tuple) {
			t.Fatalf("%s: got %+v want %+v", recordTypeName(c.typ), got, c.want)
		}
		// Every truncation is rejected, never a panic.
		for n := 0; n < len(c.data); n++ {
			if _, err := decodeHeapRecord(c.typ, c.data[:n]); err == nil && c.typ != recHeapInsert && c.typ != recHeapUpdate {
				t.Fatalf("%s truncated to %d bytes accepted", recordTypeName(c.typ), n)
			}
		}
	}
	if _, err := decodeHeapRecord(recCommit, nil); !errors.Is(err, errBadRecord) {
		t.Fatalf("wrong type accepted: %v", err)
	}
	want := checkpointRecord{redo: 0x1234, nextXid: 99, id: 0xfeedface, systemID: 0xc0ffee}
	if got, err := decodeCheckpoint(encodeCheckpoint(want)); err != nil || got != want {
		t.Fatalf("checkpoint round trip: %+v %v", got, err)
	}
	// A record written before the system identifier existed.
	if got, err := decodeCheckpoint(encodeCheckpoint(want)[:24]); err != nil || got != (checkpointRecord{redo: 0x1234, nextXid: 99, id: 0xfeedface}) {
		t.Fatalf("24-byte checkpoint record: %+v %v", got, err)
	}
	// A record written before the identifier existed.
	pre := encodeCheckpoint(want)[:16]
	if got, err := decodeCheckpoint(pre); err != nil || got != (checkpointRecord{redo: 0x1234, nextXid: 99}) {
		t.Fatalf("16-byte checkpoint record: %+v %v", got, err)
	}
	if _, err := decodeCheckpoint(pre[:15]); !errors.Is(err, errBadRecord) {
		t.Fatalf("15-byte checkpoint record accepted: %v", err)
	}
}

func TestControlFile(t *testing.T) {
	c := controlData{RedoLSN: 1 << 24, CheckpointLSN: 1<<24 + 64, NextXid: 1000, HeapBlocks: 7, SystemID: newIdentifier()}
	b := c.encode()
	got, err := decodeControl(b, "control")
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// A version 1 file (no system identifier) is still read.
	v1 := bytes.Clone(b[:controlSizeV1-4])
	binary.LittleEndian.PutUint32(v1[8:], 1)
	v1 = binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, castagnoli))
	old := c
	old.SystemID = 0
	if got, err := decodeControl(v1, "control"); err != nil || got != old {
		t.Fatalf("version 1: %+v %v, want %+v", got, err, old)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, err := decodeControl(bad, "control"); !errors.Is(err, ErrCorruption) {
			t.Fatalf("flipped byte %d accepted: %v", i, err)
		}
	}
}

// A directory where the control file belongs is named as such, not as a
// control file of the directory's size.
func TestControlFileIsDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, controlName), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("Open with a directory for the control file: %v", err)
	}
}

func FuzzDecodeHeapRecord(f *testing.F) {
	tup := heap.AppendTuple(nil, heap.TupleHeader{Xmin: 7}, []byte("k"), []byte("v"))
	f.Add(uint8(recHeapInsert), encodeInsert(heap.TID{Block: 1, Slot: 2}, tup))
	f.Add(uint8(recHeapUpdate), encodeUpdate(heap.TID{Block: 1}, heap.TID{Block: 2}, tup))
	f.Add(uint8(recHeapDelete), encodeDelete(heap.TID{Block: 1}))
	f.Add(uint8(recCheckpoint), encodeCheckpoint(checkpointRecord{redo: 1, nextXid: 2, id: 3, systemID: 4}))
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		r, err := decodeHeapRecord(wal.RecordType(typ), data)
		if err != nil {
			return
		}
		if r.Tuple != nil {
			if _, _, _, err := heap.DecodeTuple(r.Tuple); err != nil {
				t.Fatalf("accepted a record whose tuple does not decode: %v", err)
			}
		}
		decodeCheckpoint(data)
	})
}

func FuzzDecodeControl(f *testing.F) {
	f.Add(controlData{RedoLSN: 5, CheckpointLSN: 6, NextXid: 7, SystemID: 8}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeControl(b, "control")
		if err == nil && len(b) == controlSize && !bytes.Equal(c.encode(), b) {
			t.Fatalf("accepted bytes that do not re-encode identically")
		}
		if err == nil && len(b) == controlSizeV1 && (c.SystemID != 0 || !bytes.Equal(c.encode()[12:44], b[12:44])) {
			t.Fatalf("a version 1 file decoded to %+v", c)
		}
	})
}

// A control file whose CRC holds but whose heap length no heap can have
// (block numbers are 32 bits) is refused naming the field's offset, where
// Open took it and then blamed a heap truncation that was never logged for
// the length it compared the files against.
func TestControlHeapLengthBounded(t *testing.T) {
	c := controlData{RedoLSN: 5, CheckpointLSN: 6, NextXid: 7, HeapBlocks: math.MaxUint32, SystemID: 8}
	if _, err := decodeControl(c.encode(), "control"); err != nil {
		t.Fatalf("the longest heap length refused: %v", err)
	}
	c.HeapBlocks = math.MaxUint32 + 1
	_, err := decodeControl(c.encode(), "control")
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "control offset 36: heap length 4294967296 blocks") {
		t.Fatalf("decode of a heap length of 2^32 blocks: %v; want ErrCorruption naming offset 36", err)
	}
}

// An FPI leaves out the page's free space when it is long enough and redo
// rebuilds the same page; a page without room is imaged whole.
func TestFPIRoundTrip(t *testing.T) {
	page := make([]byte, heap.PageSize)
	heap.InitPage(page)
	for i := 0; i < 10; i++ {
		tup := heap.AppendTuple(nil, heap.TupleHeader{Xmin: uint64(i + 3), Prev: heap.InvalidTID}, []byte(fmt.Sprint("key", i)), bytes.Repeat([]byte{'v'}, 100))
		if _, err := heap.AddTuple(page, tup); err != nil {
			t.Fatal(err)
		}
	}
	heap.SetChecksum(page, 7)
	data, flags := encodeFPI(7, page)
	if flags != flagFPIHole || len(data) > heap.PageSize/2 {
		t.Fatalf("image of a page with %d free bytes: %d bytes, flags %#x", heap.FreeSpace(page), len(data), flags)
	}
	blk, got, err := decodeFPI(data, flags)
	if err != nil || blk != 7 || !bytes.Equal(got, page) {
		t.Fatalf("round trip: block %d, err %v, same page %v", blk, err, bytes.Equal(got, page))
	}
	// Damage in the stored bytes or the hole description is caught.
	for _, bad := range [][]byte{data[:len(data)-1], append(bytes.Clone(data), 0)} {
		if _, _, err := decodeFPI(bad, flags); err == nil {
			t.Errorf("decodeFPI accepted a %d-byte payload", len(bad))
		}
	}
	moved := bytes.Clone(data)
	moved[4]++ // the hole one byte later: the page no longer verifies
	if _, _, err := decodeFPI(moved, flags); err == nil {
		t.Error("decodeFPI accepted a moved hole")
	}
	if _, _, err := decodeFPI(data, 0); err == nil {
		t.Error("an image with a hole decoded as a whole page")
	}
	// A full page is imaged whole.
	for {
		tup := heap.AppendTuple(nil, heap.TupleHeader{Xmin: 99, Prev: heap.InvalidTID}, []byte("fill"), []byte("x"))
		if _, err := heap.AddTuple(page, tup); err != nil {
			break
		}
	}
	heap.SetChecksum(page, 7)
	data, flags = encodeFPI(7, page)
	if flags != 0 || len(data) != 4+heap.PageSize {
		t.Fatalf("image of a full page: %d bytes, flags %#x", len(data), flags)
	}
	if _, got, err := decodeFPI(data, flags); err != nil || !bytes.Equal(got, page) {
		t.Fatalf("whole-page round trip: %v", err)
	}
}

func FuzzDecodeFPI(f *testing.F) {
	page := make([]byte, heap.PageSize)
	heap.InitPage(page)
	heap.AddTuple(page, heap.AppendTuple(nil, heap.TupleHeader{Xmin: 3, Prev: heap.InvalidTID}, []byte("k"), []byte("v")))
	heap.SetChecksum(page, 1)
	data, flags := encodeFPI(1, page)
	f.Add(flags, data)
	f.Add(uint8(0), append([]byte{1, 0, 0, 0}, page...))
	f.Fuzz(func(t *testing.T, flags uint8, data []byte) {
		blk, got, err := decodeFPI(data, flags)
		if err != nil {
			return
		}
		if err := heap.VerifyPage(got, blk); err != nil {
			t.Fatalf("decoded image does not verify: %v", err)
		}
	})
}

// FuzzDescribeRecord gives describeRecord, which mvkv waldump runs over
// every record of a WAL it is pointed at, any type, flags and payload: it
// must never panic, whatever the payload, and every record type's decoder
// is reached through it (the bulk load records, HEAP_TRUNCATE, INDEX_HEAD
// and INDEX_HEADS have no fuzz target of their own). A payload those
// decoders accept encodes back to the same bytes.
func FuzzDescribeRecord(f *testing.F) {
	tup := heap.AppendTuple(nil, heap.TupleHeader{Xmin: 7}, []byte("k"), []byte("v"))
	page := make([]byte, heap.PageSize)
	heap.InitPage(page)
	fpi, fpiFlags := encodeFPI(3, page)
	seeds := []struct {
		typ   wal.RecordType
		flags uint8
		data  []byte
	}{
		{recHeapInsert, 0, encodeInsert(heap.TID{Block: 1, Slot: 2}, tup)},
		{recHeapUpdate, 0, encodeUpdate(heap.TID{Block: 1}, heap.TID{Block: 2}, tup)},
		{recHeapDelete, 0, encodeDelete(heap.TID{Block: 1})},
		{recCommit, 0, timestampPayload(new([8]byte))},
		{recAbort, 0, timestampPayload(new([8]byte))},
		{recCheckpoint, 0, encodeCheckpoint(checkpointRecord{redo: 1, nextXid: 2, id: 3, systemID: 4})},
		{recHeap2Prune, 0, encodePrune([]*prunePage{{block: 4, unused: []uint16{1, 3}, prev: []prevFix{{slot: 2, prev: heap.InvalidTID}}}}, nil)},
		{recHeap2Prune, flagPruneChunks, encodePrune([]*prunePage{{block: 4, unused: []uint16{1}}}, []chunkID{{heap.TID{Block: 9, Slot: 1}, 11}})},
		{recHeap2Visible, 0, encodeVisible(visibleRecord{Block: 5, Bits: visibility.AllVisible, CutoffXid: 9})},
		{recFPI, fpiFlags, fpi},
		{recCLOGTruncate, 0, encodeCLOGTruncate(1 << 20)},
		{recIndexHead, 0, encodeIndexHead([]byte("key"), heap.TID{Block: 6, Slot: 7})},
		{recIndexHead, 0, encodeIndexHead([]byte("gone"), heap.InvalidTID)},
		{recIndexHeads, 0, encodeIndexHeads([]headChange{{[]byte("key"), heap.TID{Block: 6, Slot: 7}}, {[]byte("gone"), heap.InvalidTID}})},
		{recBulkLoadBegin, 0, encodeBulkLoadBegin(8)},
		{recBulkLoad, 0, encodeBulkLoad(8, 100, 4500)},
		{recBulkVisible, 0, encodeBulkVisible(8, 100, visibility.AllVisible|visibility.AllFrozen)},
		{recHeapTruncate, 0, encodeHeapTruncate(10, 20)},
	}
	for _, s := range seeds {
		f.Add(uint8(s.typ), s.flags, s.data)
	}
	f.Fuzz(func(t *testing.T, typ, flags uint8, data []byte) {
		rt := wal.RecordType(typ)
		if d := describeRecord(wal.Record{Type: rt, Flags: flags, XID: 12, Data: data}); d == "" {
			t.Fatal("empty description")
		}
		switch rt {
		case recIndexHead:
			if key, head, err := decodeIndexHead(data); err == nil {
				if got := encodeIndexHead(key, head); !bytes.Equal(got, data) {
					t.Fatalf("INDEX_HEAD %x decodes to %q %v, which encodes to %x", data, key, head, got)
				}
			}
		case recIndexHeads:
			if cs, err := decodeIndexHeads(data); err == nil {
				if len(cs) == 0 || len(cs) > maxHeadChanges {
					t.Fatalf("INDEX_HEADS %x decodes to %d changes", data, len(cs))
				}
				for _, c := range cs {
					if len(c.key) > MaxKeySize {
						t.Fatalf("INDEX_HEADS %x decodes to a key of %d bytes", data, len(c.key))
					}
				}
				if got := encodeIndexHeads(cs); !bytes.Equal(got, data) {
					t.Fatalf("INDEX_HEADS %x decodes to %v, which encodes to %x", data, cs, got)
				}
			}
		case recHeapTruncate:
			if n, old, err := decodeHeapTruncate(data); err == nil {
				if n > old {
					t.Fatalf("HEAP_TRUNCATE accepted from %d to %d blocks", old, n)
				}
				if got := encodeHeapTruncate(n, old); !bytes.Equal(got, data) {
					t.Fatalf("HEAP_TRUNCATE %x re-encodes to %x", data, got)
				}
			}
		case recBulkLoadBegin, recBulkLoad, recBulkVisible:
			if r, err := decodeBulkLoad(rt, data); err == nil {
				if uint64(r.first)+uint64(r.pages) >= noBlock {
					t.Fatalf("%s accepted %d blocks from block %d", recordTypeName(rt), r.pages, r.first)
				}
				var got []byte
				switch rt {
				case recBulkLoadBegin:
					got = encodeBulkLoadBegin(r.first)
				case recBulkLoad:
					got = encodeBulkLoad(r.first, r.pages, r.keys)
				default:
					got = encodeBulkVisible(r.first, r.pages, r.bits)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("%s %x re-encodes to %x", recordTypeName(rt), data, got)
				}
			}
		}
	})
}

// TestIndexHeadsRecord: a page's head changes round-trip in order, and a
// payload cut short, carrying bytes after its changes, a count of zero or
// one it cannot hold, or a key that is empty or over MaxKeySize is refused
// with errBadRecord, not decoded in part; so is an INDEX_HEAD record of an
// empty key.
func TestIndexHeadsRecord(t *testing.T) {
	want := []headChange{
		{[]byte("a"), heap.InvalidTID},
		{[]byte("bb"), heap.TID{Block: 3, Slot: 9}},
		{bytes.Repeat([]byte("k"), MaxKeySize), heap.InvalidTID},
	}
	data := encodeIndexHeads(want)
	got, err := decodeIndexHeads(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d changes, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].key, want[i].key) || got[i].head != want[i].head {
			t.Fatalf("change %d decodes to %q %v, want %q %v", i, got[i].key, got[i].head, want[i].key, want[i].head)
		}
	}
	for n := range len(data) {
		if _, err := decodeIndexHeads(data[:n]); !errors.Is(err, errBadRecord) {
			t.Fatalf("a payload cut to %d of %d bytes: %v, want errBadRecord", n, len(data), err)
		}
	}
	bad := map[string][]byte{
		"trailing byte": append(slices.Clone(data), 0),
		"no change":     {0, 0},
		"count too big": {0xff, 0xff, 1, 0, 0, 0, 2, 0, 0, 0},
		"key too long":  encodeIndexHeads([]headChange{{bytes.Repeat([]byte("k"), MaxKeySize+1), heap.InvalidTID}}),
		"empty key":     encodeIndexHeads([]headChange{{[]byte("a"), heap.InvalidTID}, {nil, heap.InvalidTID}}),
	}
	for name, b := range bad {
		if _, err := decodeIndexHeads(b); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: %v, want errBadRecord", name, err)
		}
	}
	if _, _, err := decodeIndexHead(encodeIndexHead(nil, heap.InvalidTID)); !errors.Is(err, errBadRecord) {
		t.Errorf("an INDEX_HEAD record of an empty key: %v, want errBadRecord", err)
	}
	if d := describeRecord(wal.Record{Type: recIndexHeads, Data: data}); !strings.Contains(d, `3 keys: "a" dropped, "bb" head (3,9)`) {
		t.Errorf("waldump describes the record as %q", d)
	}
}

// encodeIndexHead is recIndexHead's payload, which the engine no longer
// writes (recIndexHeads carries a page's changes): the tests make a WAL
// written before with it.
func encodeIndexHead(key []byte, head heap.TID) []byte {
	return append(appendTID(make([]byte, 0, 6+len(key)), head), key...)
}
