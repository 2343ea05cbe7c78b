package clog

import (
	"bytes"
	"testing"
)

func TestStatusBits(t *testing.T) {
	b := make([]byte, PageSize)
	const base = 7 * XidsPerPage
	// xid base+5 is the second status of byte 17: bits 2 and 3.
	if !setStatus(b, base+5, StatusAborted) {
		t.Fatal("setStatus reported no change")
	}
	if b[headerSize+1] != byte(StatusAborted)<<2 {
		t.Fatalf("byte %d = %08b", headerSize+1, b[headerSize+1])
	}
	if setStatus(b, base+5, StatusAborted) {
		t.Error("setting the same status reported a change")
	}
	setStatus(b, base+4, StatusSubCommitted)
	setStatus(b, base+7, StatusCommitted)
	for x, want := range map[uint64]Status{base + 4: StatusSubCommitted, base + 5: StatusAborted, base + 6: StatusInProgress, base + 7: StatusCommitted} {
		if got := getStatus(b, x); got != want {
			t.Errorf("getStatus(%d) = %v, want %v", x, got, want)
		}
	}
	setStatus(b, base+XidsPerPage-1, StatusCommitted)
	if b[PageSize-1] != byte(StatusCommitted)<<6 {
		t.Errorf("last xid of the page: last byte %08b", b[PageSize-1])
	}
}

func TestDecodePage(t *testing.T) {
	zero := make([]byte, PageSize)
	if err := decodePage(zero, 12); err != nil {
		t.Errorf("zero page: %v", err)
	}
	if err := decodePage(zero[:100], 12); err == nil {
		t.Error("short page accepted")
	}
	b := make([]byte, PageSize)
	setStatus(b, 12*XidsPerPage+9, StatusCommitted)
	encodePage(b, 12)
	if err := decodePage(b, 12); err != nil {
		t.Fatalf("valid page: %v", err)
	}
	if err := decodePage(b, 13); err == nil {
		t.Error("page 12 accepted as page 13")
	}
	// Every single-byte change anywhere is caught.
	for i := range PageSize {
		b[i] ^= 0x01
		if err := decodePage(b, 12); err == nil {
			t.Fatalf("flipped bit in byte %d not detected", i)
		}
		b[i] ^= 0x01
	}
	// A header that checks out but has a version or reserved byte wrong.
	for _, i := range []int{12, 13, 15} {
		c := bytes.Clone(b)
		c[i] = 9
		stampChecksum(c)
		if err := decodePage(c, 12); err == nil {
			t.Errorf("byte %d = 9 with a good checksum accepted", i)
		}
	}
}

// stampChecksum recomputes only the checksum, leaving the header as it is.
func stampChecksum(b []byte) {
	sum := crcOf(b)
	b[0], b[1], b[2], b[3] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
}

// FuzzDecodePage feeds arbitrary bytes to the page decoder: it must never
// panic, must accept only all-zero images or images whose header it would
// itself have written, and must reject any single-byte change to a valid
// image.
func FuzzDecodePage(f *testing.F) {
	valid := make([]byte, PageSize)
	setStatus(valid, 3*XidsPerPage+100, StatusCommitted)
	encodePage(valid, 3)
	f.Add(valid, uint64(3), uint16(0), byte(1))
	f.Add(valid[:64], uint64(3), uint16(8191), byte(0xff))
	f.Add(make([]byte, PageSize), uint64(0), uint16(4), byte(0x80))
	f.Add([]byte{1, 2, 3}, uint64(1), uint16(12), byte(7))
	f.Fuzz(func(t *testing.T, data []byte, pageno uint64, pos uint16, xor byte) {
		// Short inputs are padded with zeros so the fuzzer, which works
		// best on small inputs, still reaches the checks past the length.
		padded := make([]byte, PageSize)
		copy(padded, data)
		for _, img := range [][]byte{data, padded} {
			err := decodePage(img, pageno)
			if err == nil && !isZero(img) {
				again := bytes.Clone(img)
				encodePage(again, pageno)
				if !bytes.Equal(again, img) {
					t.Fatalf("accepted a page its own encoder would not write")
				}
			}
		}
		// Build a valid page from the fuzz bytes and damage one byte.
		page := padded
		encodePage(page, pageno)
		if err := decodePage(page, pageno); err != nil {
			t.Fatalf("freshly encoded page rejected: %v", err)
		}
		if xor == 0 {
			return
		}
		page[int(pos)%PageSize] ^= xor
		if err := decodePage(page, pageno); err == nil && !isZero(page) {
			t.Fatalf("damage at byte %d (xor %02x) not detected", int(pos)%PageSize, xor)
		}
	})
}
