package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"strings"
	"testing"
	"time"

	"mvkv/vfs"
)

// writeFixed writes n records with payloads of the given size (all bytes
// non-zero) and closes the writer.
func writeFixed(t *testing.T, fsys vfs.FS, dir string, end LSN, n, size int, salt byte) []written {
	t.Helper()
	w, err := OpenWriter(fsys, dir, end, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	var out []written
	for i := 0; i < n; i++ {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte((i+j)%251) + 1 + salt
			if data[j] == 0 {
				data[j] = 1
			}
		}
		start, e, err := w.Insert(16+RecordType(i%200), uint64(i)+1, data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, written{start, e, 16 + RecordType(i%200), uint64(i) + 1, data})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	f, err := vfs.OS{}.OpenReadOnly(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	f, err := vfs.OS{}.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// prepare makes the segment at seg as the Writer prepares one ahead (the
// segment size, a header with the log's identifier, zeros), unless it is
// there already: the Writer's own preparation runs in the background, and
// Close may stop it before it is done.
func prepare(t *testing.T, dir string, seg LSN) {
	t.Helper()
	if segmentReady(vfs.OS{}, dir, seg, testSeg) {
		return
	}
	tag, err := func() (uint16, error) {
		f, err := vfs.OS{}.OpenReadOnly(path.Join(dir, segmentName(testSeg)))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		h, err := readSegHeader(f, testSeg, testSeg)
		return h.tag, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	if err := createSegment(vfs.OS{}, dir, seg, testSeg, 0, tag, nil); err != nil {
		t.Fatal(err)
	}
}

// removeFrom removes the segment files of dir from seg on, leaving the log
// as it is before the writer has asked for them.
func removeFrom(t *testing.T, dir string, seg LSN) {
	t.Helper()
	segs, _, err := listSegments(vfs.OS{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s >= seg {
			if err := (vfs.OS{}).Remove(path.Join(dir, segmentName(s))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readToError reads dir's log from its start and returns the error that
// ends the reading (io.EOF at a clean end).
func readToError(t *testing.T, dir string) error {
	t.Helper()
	r, err := NewReader(vfs.OS{}, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			return err
		}
	}
}

// tornExtent is how many bytes a torn tail b spans: up to its last non-zero
// byte, zeros inside it included.
func tornExtent(b []byte) int64 {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	return 0
}

// TestPastEndCountsRecordsAfterTheDamage: 4 KiB of zeros laid over the
// middle of the log (as a torn write whose later sectors reached the disk,
// or pages zeroed after they were durable) end it there, and PastEnd
// names the valid records found after the zeros, which are cut off with
// them: how many, of which types, and from where to where. A tail that is
// only torn (nothing valid after the damage) has none.
func TestPastEndCountsRecordsAfterTheDamage(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	want := writeFixed(t, fsys, dir, 0, 60, 1000, 0) // one round, no mark past the start
	name := path.Join(dir, segmentName(testSeg))
	orig := readFile(t, name)
	zeroFrom, zeroTo := want[20].lsn, want[20].lsn+4096
	b := append([]byte(nil), orig...)
	clear(b[zeroFrom-testSeg : zeroTo-testSeg])
	writeFile(t, name, b)

	r, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for ; ; n++ {
		if _, err := r.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("Next after %d records: %v", n, err)
		}
	}
	if n != 20 || r.End() != zeroFrom {
		t.Fatalf("read %d records ending at %s, want 20 ending at %s", n, r.End(), zeroFrom)
	}
	first := 21
	for want[first].lsn < zeroTo {
		first++
	}
	after := want[first:]
	types := map[RecordType]int{}
	for _, w := range after {
		types[w.typ]++
	}
	p := r.PastEnd()
	if p.Records != len(after) || p.First != after[0].lsn || p.Last != after[len(after)-1].end || !maps.Equal(p.Types, types) {
		t.Fatalf("PastEnd %+v; want %d records from %s to %s, types %v", p, len(after), after[0].lsn, after[len(after)-1].end, types)
	}
	if d := r.DroppedBytes(); d != int64(after[len(after)-1].lsn+recHeaderSize+LSN(len(after[len(after)-1].data))-zeroFrom) {
		t.Fatalf("DroppedBytes %d, want from %s to the last record's last byte", d, zeroFrom)
	}

	// Only the last record torn: nothing valid after it.
	b = append([]byte(nil), orig...)
	last := want[len(want)-1]
	clear(b[last.lsn-testSeg+40 : last.lsn-testSeg+48])
	writeFile(t, name, b)
	r2, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	for {
		if _, err := r2.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if r2.End() != last.lsn || r2.PastEnd().Records != 0 || r2.PastEnd().Types != nil {
		t.Fatalf("torn last record: End %s PastEnd %+v; want %s and none", r2.End(), r2.PastEnd(), last.lsn)
	}
}

// TestTornTail cuts or zeroes the last record at every byte offset: the
// reader must end exactly at the previous record, count the dropped bytes,
// and a writer reopened there must append cleanly. A file cut short (which
// no crash makes, since segments are created whole) with the log ending at
// the cut is corruption naming the file instead.
func TestTornTail(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	want := writeFixed(t, fsys, dir, 0, 20, 93, 0)
	last := want[len(want)-1]
	name := path.Join(dir, segmentName(testSeg))
	orig := readFile(t, name)
	lastOff := int(last.lsn - testSeg)
	bodyEnd := lastOff + recHeaderSize + len(last.data) // padding after is not checked
	for off := lastOff; off < bodyEnd; off++ {
		for _, mode := range []string{"truncate", "zero"} {
			b := append([]byte(nil), orig...)
			if mode == "truncate" {
				b = b[:off]
			} else {
				clear(b[off:bodyEnd])
			}
			writeFile(t, name, b)
			if mode == "truncate" {
				err := readToError(t, dir)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cut short") || !strings.Contains(err.Error(), name) {
					t.Fatalf("truncate at %d: %v; want ErrCorrupt naming the file as cut short", off, err)
				}
				continue
			}
			got, end, dropped := readAll(t, fsys, dir, 0)
			checkRecords(t, got, want[:len(want)-1])
			if end != last.lsn {
				t.Fatalf("%s at %d: End %s, want %s", mode, off, end, last.lsn)
			}
			if w := tornExtent(orig[lastOff:off]); dropped != w {
				t.Fatalf("%s at %d: dropped %d bytes, want %d", mode, off, dropped, w)
			}
			if off%23 != 0 {
				continue
			}
			// Reopen at End and append: old records, then only the new ones.
			more := writeFixed(t, fsys, dir, end, 5, 40+off%7, 9)
			got, end2, dropped2 := readAll(t, fsys, dir, 0)
			checkRecords(t, got, append(append([]written(nil), want[:len(want)-1]...), more...))
			if end2 != more[len(more)-1].end || dropped2 != 0 {
				t.Fatalf("after reopen: End %s dropped %d", end2, dropped2)
			}
		}
	}
}

// TestGarbageNeverResurfaces damages a record in the middle of the tail, so
// that intact old records lie past End, then reopens and writes records of
// the same sizes: without OpenWriter's invalidation the old ones would line
// up again behind the new ones and come back.
func TestGarbageNeverResurfaces(t *testing.T) {
	t.Run("same segment", func(t *testing.T) {
		fsys, dir := vfs.OS{}, t.TempDir()
		want := writeFixed(t, fsys, dir, 0, 10, 100, 0)
		name := path.Join(dir, segmentName(testSeg))
		b := readFile(t, name)
		b[want[5].lsn-testSeg] ^= 0xff // the CRC of record 5
		writeFile(t, name, b)
		got, end, dropped := readAll(t, fsys, dir, 0)
		checkRecords(t, got, want[:5])
		if end != want[5].lsn || dropped == 0 {
			t.Fatalf("End %s dropped %d", end, dropped)
		}
		more := writeFixed(t, fsys, dir, end, 1, 100, 5)
		if more[0].end != want[6].lsn {
			t.Fatalf("the new record ends at %s, not at the old record 6 (%s): test is not aligned", more[0].end, want[6].lsn)
		}
		got, _, _ = readAll(t, fsys, dir, 0)
		checkRecords(t, got, append(want[:5:5], more...))
	})
	// A damaged record at the end of a segment the writer had moved on
	// from lies in the durable log: that is corruption, not the end.
	t.Run("later segment", func(t *testing.T) {
		fsys, dir := vfs.OS{}, t.TempDir()
		const size = 1000
		want := writeFixed(t, fsys, dir, 0, 1100, size, 0) // about 1.05 segments
		k := 0                                             // first record of segment 2
		for want[k].lsn < 2*testSeg {
			k++
		}
		if k+2 >= len(want) {
			t.Fatal("test wants records in segment 2")
		}
		name := path.Join(dir, segmentName(testSeg))
		b := readFile(t, name)
		b[want[k-1].lsn-testSeg] ^= 0xff
		writeFile(t, name, b)
		r, err := NewReader(fsys, dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := 0
		for {
			if _, err = r.Next(); err != nil {
				break
			}
			n++
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segmentName(testSeg)) {
			t.Fatalf("after %d records: %v, want ErrCorrupt naming %s", n, err, segmentName(testSeg))
		}
	})
}

// TestDurableMarkMakesDamageCorruption damages a record below the durable-LSN
// mark that a later valid record carries: corruption. The same damage in the
// unflushed tail is the end of the log.
func TestDurableMarkMakesDamageCorruption(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var lsns []LSN
	for i := 0; i < 20; i++ {
		start, end, err := w.Insert(MinUserRecordType, uint64(i), make([]byte, 100+i))
		if err != nil {
			t.Fatal(err)
		}
		lsns = append(lsns, start)
		if i < 15 {
			if err := w.Flush(end); err != nil { // records 0..14 durable one by one
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg := path.Join(dir, segmentName(testSeg))
	orig := readFile(t, seg)
	read := func() (int, error) { return countRecords(t, fsys, dir, nil) }
	for _, c := range []struct {
		rec     int
		corrupt bool
	}{{3, true}, {13, true}, {19, false}} {
		b := append([]byte(nil), orig...)
		b[lsns[c.rec]-testSeg+40] ^= 0x01 // a payload byte
		writeFile(t, seg, b)
		n, err := read()
		if c.corrupt && !errors.Is(err, ErrCorrupt) {
			t.Errorf("damage to record %d (below a later durable mark): %d records, %v; want ErrCorrupt", c.rec, n, err)
		}
		if !c.corrupt && (err != nil || n != c.rec) {
			t.Errorf("damage to record %d (unflushed tail): %d records, %v; want the end of the log after %d", c.rec, n, err, c.rec)
		}
	}
	// A zeroed sector inside the durable log is corruption too.
	b := append([]byte(nil), orig...)
	clear(b[lsns[5]-testSeg : lsns[5]-testSeg+512])
	writeFile(t, seg, b)
	if _, err := read(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zeroed sector in the durable log: %v, want ErrCorrupt", err)
	}
}

func TestSegmentHeaders(t *testing.T) {
	build := func(t *testing.T) (string, []written) {
		dir := t.TempDir()
		// 3 segments with records: 1, 2, 3 (4 is prepared and empty).
		return dir, writeFixed(t, vfs.OS{}, dir, 0, 2100, 1000, 0)
	}
	endOfSeg := func(want []written, seg LSN) ([]written, LSN) {
		i := 0
		for i < len(want) && want[i].lsn < seg+testSeg {
			i++
		}
		end := want[i-1].end
		if seg+testSeg-end >= recHeaderSize {
			end = seg + testSeg // after the explicit switch record
		}
		return want[:i], end
	}
	t.Run("bad header over valid records is corruption", func(t *testing.T) {
		dir, want := build(t)
		if want[len(want)-1].lsn < 3*testSeg {
			t.Fatal("test wants records in segment 3")
		}
		name := path.Join(dir, segmentName(3*testSeg))
		b := readFile(t, name)
		b[10] ^= 1
		writeFile(t, name, b)
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset 0: the segment header is damaged") {
			t.Fatalf("Next: %v, want ErrCorrupt naming the segment's header", err)
		}
		// The header and the first 4 KiB zeroed: the records after them
		// still show it.
		clear(b[:4096])
		writeFile(t, name, b)
		if err := readToError(t, dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "the segment header is damaged") {
			t.Fatalf("Next, with the first 4 KiB zeroed: %v, want ErrCorrupt naming the segment's header", err)
		}
	})
	t.Run("bad header over no valid record is corruption", func(t *testing.T) {
		dir, want := build(t)
		if want[len(want)-1].lsn < 3*testSeg {
			t.Fatal("test wants records in segment 3")
		}
		// The whole segment zeroed, and no segment after it: a file of
		// the segment size under its final name always has a valid
		// header after a crash (it is renamed into place synced), so
		// this one was zeroed later, and the records it held are lost.
		removeFrom(t, dir, 4*testSeg)
		name := path.Join(dir, segmentName(3*testSeg))
		writeFile(t, name, make([]byte, testSeg))
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset 0: the segment header is all zeros") {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s at offset 0", err, name)
		}
		// The way on the error gives: with the file removed, the log
		// ends with segment 2 and goes on from there.
		if err := (vfs.OS{}).Remove(name); err != nil {
			t.Fatal(err)
		}
		got, end, _ := readAll(t, vfs.OS{}, dir, 0)
		w, wantEnd := endOfSeg(want, 2*testSeg)
		checkRecords(t, got, w)
		if end != wantEnd || !strings.Contains(err.Error(), "the log then ends at "+end.String()) {
			t.Fatalf("End %s, want %s, as the error said: %v", end, wantEnd, err)
		}
		more := writeFixed(t, vfs.OS{}, dir, end, 3, 10, 1)
		got, _, _ = readAll(t, vfs.OS{}, dir, 0)
		checkRecords(t, got, append(w[:len(w):len(w)], more...))
	})
	t.Run("bad header after a log ending inside its segment is corruption", func(t *testing.T) {
		// Segment 3 zeroed whole and the last 64 KiB of segment 2 too:
		// the log ends inside 2, and the file after it still cannot be
		// a crash's.
		dir, _ := build(t)
		removeFrom(t, dir, 4*testSeg)
		name := path.Join(dir, segmentName(3*testSeg))
		writeFile(t, name, make([]byte, testSeg))
		name2 := path.Join(dir, segmentName(2*testSeg))
		b := readFile(t, name2)
		clear(b[len(b)-64<<10:])
		writeFile(t, name2, b)
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset 0: the segment header is all zeros") ||
			!strings.Contains(err.Error(), "in "+segmentName(2*testSeg)+")") {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s at offset 0 and where 2's log ends", err, name)
		}
		// Cut short instead: named as such.
		writeFile(t, name, make([]byte, testSeg/2))
		err = readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" is 524288 bytes, cut short") {
			t.Fatalf("Next, with %s cut short: %v, want ErrCorrupt naming it", name, err)
		}
	})
	t.Run("bad header over no valid record before a prepared segment is corruption", func(t *testing.T) {
		dir, _ := build(t)
		// Segment 4 was asked for only once the log had moved into 3.
		prepare(t, dir, 4*testSeg)
		name := path.Join(dir, segmentName(3*testSeg))
		writeFile(t, name, make([]byte, testSeg))
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), segmentName(4*testSeg)+" exists") {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s and segment 4", err, name)
		}
	})
	t.Run("header naming another segment is corruption", func(t *testing.T) {
		dir, _ := build(t)
		// Segment 1's bytes under segment 3's name, with nothing after
		// it (the writer never renames an old segment ahead).
		removeFrom(t, dir, 4*testSeg)
		name := path.Join(dir, segmentName(3*testSeg))
		writeFile(t, name, readFile(t, path.Join(dir, segmentName(testSeg))))
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset 0: the segment header names segment "+segmentName(testSeg)) {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s at offset 0", err, name)
		}
	})
	t.Run("bad header before a valid segment is corruption", func(t *testing.T) {
		dir, _ := build(t)
		name := path.Join(dir, segmentName(2*testSeg))
		b := readFile(t, name)
		b[20] ^= 1
		writeFile(t, name, b)
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Next: %v, want ErrCorrupt", err)
		}
	})
	t.Run("missing segment before a valid segment is corruption", func(t *testing.T) {
		dir, _ := build(t)
		if err := (vfs.OS{}).Remove(path.Join(dir, segmentName(2*testSeg))); err != nil {
			t.Fatal(err)
		}
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), segmentName(2*testSeg)+" is missing") {
			t.Fatalf("Next: %v, want ErrCorrupt naming the missing segment", err)
		}
	})
	t.Run("newest segment missing before a prepared one is corruption", func(t *testing.T) {
		// Segment 4 prepared and empty, segment 3 (the newest with
		// records) removed: 4 was asked for only once the log had moved
		// into 3, so 3 was lost. Also when 4 is still being prepared
		// (under its temporary name, with any part of its bytes).
		for _, c := range []struct {
			name string
			make func(t *testing.T, dir string)
		}{
			{"prepared", func(t *testing.T, dir string) { prepare(t, dir, 4*testSeg) }},
			{"being prepared", func(t *testing.T, dir string) {
				removeFrom(t, dir, 4*testSeg)
				writeFile(t, path.Join(dir, segmentName(4*testSeg)+tempSuffix), nil)
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				dir, _ := build(t)
				c.make(t, dir)
				name := path.Join(dir, segmentName(3*testSeg))
				if err := (vfs.OS{}).Remove(name); err != nil {
					t.Fatal(err)
				}
				err := readToError(t, dir)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" is missing") && !strings.Contains(err.Error(), "is missing ("+name+")") {
					t.Fatalf("Next: %v, want ErrCorrupt naming %s as missing", err, name)
				}
			})
		}
	})
	t.Run("newest segment missing before a zeroed one is corruption", func(t *testing.T) {
		// Segment 3 removed and segment 4, prepared, zeroed whole: 4
		// is still the evidence that the log went on into 3, its
		// damage named as well.
		dir, _ := build(t)
		prepare(t, dir, 4*testSeg)
		writeFile(t, path.Join(dir, segmentName(4*testSeg)), make([]byte, testSeg))
		name := path.Join(dir, segmentName(3*testSeg))
		if err := (vfs.OS{}).Remove(name); err != nil {
			t.Fatal(err)
		}
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is missing ("+name+")") ||
			!strings.Contains(err.Error(), segmentName(4*testSeg)+" exists (with a segment header that is all zeros)") {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s as missing and segment 4's header", err, name)
		}
	})
	t.Run("zeroed segment past a prepared one is named at offset 0", func(t *testing.T) {
		// Segment 4 prepared and never written, as after every switch,
		// and a file of the segment size at 5 with a header of zeros:
		// no crash leaves that file, and the log is whole up to its
		// end in 3. The error is the one for a damaged header (the
		// file at offset 0, and the way on), not a claim that 3 was
		// durable to its end and that the log went on into 4.
		dir, _ := build(t)
		prepare(t, dir, 4*testSeg)
		name := path.Join(dir, segmentName(5*testSeg))
		writeFile(t, name, make([]byte, testSeg))
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset 0: the segment header is all zeros") ||
			!strings.Contains(err.Error(), "remove "+name+" and every segment file after it") {
			t.Fatalf("Next: %v, want ErrCorrupt naming %s at offset 0 and the way on", err, name)
		}
	})
	t.Run("log ending inside the segment before a lost one is corruption", func(t *testing.T) {
		// Segment 3 removed, the last 64 KiB of segment 2 zeroed, and
		// segment 4 prepared: the log now ends inside 2, and no record
		// or mark says it was durable past there, but 4 was asked for
		// only once 2 had been synced whole and the log had moved on.
		dir, _ := build(t)
		prepare(t, dir, 4*testSeg)
		if err := (vfs.OS{}).Remove(path.Join(dir, segmentName(3*testSeg))); err != nil {
			t.Fatal(err)
		}
		name := path.Join(dir, segmentName(2*testSeg))
		b := readFile(t, name)
		clear(b[len(b)-64<<10:])
		writeFile(t, name, b)
		err := readToError(t, dir)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name+" at offset") ||
			!strings.Contains(err.Error(), "is missing ("+path.Join(dir, segmentName(3*testSeg))+")") {
			t.Fatalf("Next: %v, want ErrCorrupt naming where 2's log ends and 3 as missing", err)
		}
	})
	t.Run("newest segment missing and nothing after it ends the log", func(t *testing.T) {
		dir, want := build(t)
		// No later segment: nothing shows that 3 was ever there.
		removeFrom(t, dir, 3*testSeg)
		got, end, _ := readAll(t, vfs.OS{}, dir, 0)
		w, wantEnd := endOfSeg(want, 2*testSeg)
		checkRecords(t, got, w)
		if end != wantEnd {
			t.Fatalf("End %s, want %s", end, wantEnd)
		}
	})
	t.Run("prepared segment never written opens cleanly", func(t *testing.T) {
		dir, want := build(t)
		prepare(t, dir, 4*testSeg)
		got, end, dropped := readAll(t, vfs.OS{}, dir, 0)
		checkRecords(t, got, want)
		if end != want[len(want)-1].end || dropped != 0 {
			t.Fatalf("End %s dropped %d, want %s and 0", end, dropped, want[len(want)-1].end)
		}
		// And while segment 4 is still being prepared (a crash during
		// the preparation leaves its temporary file).
		removeFrom(t, dir, 4*testSeg)
		writeFile(t, path.Join(dir, segmentName(4*testSeg)+tempSuffix), nil)
		if _, end2, _ := readAll(t, vfs.OS{}, dir, 0); end2 != end {
			t.Fatalf("with segment 4 being prepared: End %s, want %s", end2, end)
		}
	})
	t.Run("start on a boundary", func(t *testing.T) {
		dir, want := build(t)
		_, end := endOfSeg(want, testSeg)
		w, _ := endOfSeg(want, 2*testSeg)
		i := 0
		for want[i].lsn < end {
			i++
		}
		got, _, _ := readAll(t, vfs.OS{}, dir, 2*testSeg)
		checkRecords(t, got[:len(w)-i], w[i:])
	})
}

func TestEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	_, end, dropped := readAll(t, vfs.OS{}, dir, 0)
	if end != 0 || dropped != 0 {
		t.Fatalf("empty log: End %s dropped %d", end, dropped)
	}
	w, err := OpenWriter(vfs.OS{}, dir, end, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if w.InsertLSN() != FirstLSN(testSeg) {
		t.Fatalf("new log starts at %s, want %s", w.InsertLSN(), FirstLSN(testSeg))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, end, _ = readAll(t, vfs.OS{}, dir, 0)
	if end != FirstLSN(testSeg) {
		t.Fatalf("End of an empty log %s, want %s", end, FirstLSN(testSeg))
	}
	if _, err := OpenWriter(vfs.OS{}, dir, 0, testOpts()); err == nil {
		t.Fatal("OpenWriter at 0 over an existing log succeeded")
	}
}

// TestSegmentOfAnotherLog: two logs written alike have records at the same
// LSNs that pass every check; a segment of one copied among the other's is
// told apart by the log identifier in its header, and reading it is
// ErrCorrupt naming the file, not the other log's records and not the end
// of the log. A segment without an identifier (older builds) is read.
func TestSegmentOfAnotherLog(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFixed(t, vfs.OS{}, a, 0, 2100, 1000, 0)
	writeFixed(t, vfs.OS{}, b, 0, 2100, 1000, 0)
	seg2 := segmentName(2 * testSeg)
	mine := readFile(t, path.Join(a, seg2))
	theirs := readFile(t, path.Join(b, seg2))
	if bytes.Equal(mine[6:8], theirs[6:8]) {
		// Two logs draw the same identifier once in 65,535 pairs.
		t.Skip("the two logs drew the same identifier")
	}
	writeFile(t, path.Join(a, seg2), theirs)
	err := readToError(t, a)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path.Join(a, seg2)+" at offset 6") || !strings.Contains(err.Error(), "another write-ahead log") {
		t.Fatalf("reading a log with another log's segment: %v", err)
	}
	// The same segment with its identifier cleared, as an older build
	// wrote it, is read: nothing tells it apart.
	var h [segHeaderSize]byte
	copy(h[:], theirs)
	sh, derr := decodeSegHeader(h[:])
	if derr != nil {
		t.Fatal(derr)
	}
	sh.tag = 0
	encodeSegHeader(theirs, sh)
	writeFile(t, path.Join(a, seg2), theirs)
	if err := readToError(t, a); err != io.EOF {
		t.Fatalf("a segment without an identifier: %v", err)
	}
	// A writer continuing a log keeps its identifier in the segments it
	// makes.
	w, err := OpenWriter(vfs.OS{}, b, 0, testOpts())
	if err == nil {
		w.Close()
		t.Fatal("OpenWriter at 0 over an existing log succeeded")
	}
	r, err := NewReader(vfs.OS{}, b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = r.Next(); err != nil {
			break
		}
	}
	end := r.End()
	r.Close()
	writeFixed(t, vfs.OS{}, b, end, 3000, 1000, 1)
	if err := readToError(t, b); err != io.EOF {
		t.Fatalf("a log continued by a second writer: %v", err)
	}
}

// TestSegmentOfAnotherLogBelow: another log's segment placed below this
// log's first one is read first, and its log ends inside it; the segment
// after it is this log's. That is named as two logs mixed, not as a
// damaged record.
func TestSegmentOfAnotherLogBelow(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFixed(t, vfs.OS{}, a, 0, 2100, 1000, 0)
	writeFixed(t, vfs.OS{}, b, 0, 300, 1000, 0) // ends inside its first segment
	first := FirstLSN(testSeg) - LSN(uint64(FirstLSN(testSeg))%testSeg)
	seg0, seg1 := segmentName(first), segmentName(first+testSeg)
	theirs := readFile(t, path.Join(b, seg0))
	if bytes.Equal(readFile(t, path.Join(a, seg0))[6:8], theirs[6:8]) {
		t.Skip("the two logs drew the same identifier")
	}
	writeFile(t, path.Join(a, seg0), theirs)
	err := readToError(t, a)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "different write-ahead logs") ||
		!strings.Contains(err.Error(), path.Join(a, seg0)) || !strings.Contains(err.Error(), path.Join(a, seg1)) {
		t.Fatalf("reading a log whose first segment is another log's: %v", err)
	}
}

// FuzzReader feeds arbitrary bytes to the reader as the records of a
// segment (after a valid header) or as a whole segment file. It must never
// panic, and whatever it returns must be consistent.
func FuzzReader(f *testing.F) {
	seedDir := f.TempDir()
	writeFixedF(f, seedDir)
	seg := readFileF(f, path.Join(seedDir, segmentName(testSeg)))
	f.Add(seg[segHeaderSize:4096], false)
	f.Add(seg[:4096], true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, b []byte, raw bool) {
		const dir = "wal"
		file := b
		if !raw {
			file = make([]byte, segHeaderSize+len(b))
			encodeSegHeader(file, segHeader{size: testSeg, start: testSeg})
			copy(file[segHeaderSize:], b)
		}
		if len(file) > testSeg {
			file = file[:testSeg]
		}
		fsys := roFS{path.Join(dir, segmentName(testSeg)): file}
		if len(b) > 0 && b[0]&1 == 1 {
			// A second segment, so the switch paths are reached too.
			next := make([]byte, segHeaderSize+len(b))
			encodeSegHeader(next, segHeader{size: testSeg, start: 2 * testSeg})
			copy(next[segHeaderSize:], b)
			fsys[path.Join(dir, segmentName(2*testSeg))] = next
		}
		r, err := NewReader(fsys, dir, 0)
		if err != nil {
			if raw {
				return
			}
			t.Fatalf("NewReader with a valid header: %v", err)
		}
		defer r.Close()
		prev := LSN(testSeg + segHeaderSize)
		for i := 0; ; i++ {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if errors.Is(err, ErrCorrupt) {
				break // a short file ending at the cut, say
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if rec.LSN < prev || rec.End <= rec.LSN || rec.End > 3*testSeg || rec.Type < MinUserRecordType {
				t.Fatalf("record %d: %+v after %s", i, rec, prev)
			}
			if rec.LSN < 2*testSeg {
				hdr := file[rec.LSN-testSeg:]
				if !bytes.Equal(hdr[recHeaderSize:recHeaderSize+len(rec.Data)], rec.Data) {
					t.Fatalf("record %d payload differs from the file", i)
				}
			}
			prev = rec.End
		}
		if r.End() < prev || r.End() > 3*testSeg || r.DroppedBytes() < 0 || r.DroppedBytes() > testSeg {
			t.Fatalf("End %s dropped %d after %s", r.End(), r.DroppedBytes(), prev)
		}
	})
}

// FuzzDecode checks the pure header decoders on arbitrary bytes.
func FuzzDecode(f *testing.F) {
	var h [segHeaderSize]byte
	encodeSegHeader(h[:], segHeader{size: testSeg, start: 5 * testSeg})
	f.Add(h[:], uint64(5*testSeg+32), int64(1000))
	var r [recHeaderSize]byte
	encodeRecHeader(r[:], 96, 16, 0, 7, 10, payloadCRC(make([]byte, 10)), 0)
	f.Add(r[:], uint64(96), int64(100))
	f.Fuzz(func(t *testing.T, b []byte, lsn uint64, room int64) {
		if sh, err := decodeSegHeader(b); err == nil {
			if !validSegmentSize(sh.size) || uint64(sh.start)%uint64(sh.size) != 0 {
				t.Fatalf("accepted bad segment header %+v", sh)
			}
		}
		rh, ok := decodeRecHeader(b, LSN(lsn), room, MaxPayload(testSeg))
		if ok {
			if rh.n < 0 || rh.n > MaxPayload(testSeg) || recordSize(rh.n) > room || rh.lsn != LSN(lsn) {
				t.Fatalf("accepted bad record header %+v (room %d)", rh, room)
			}
		}
	})
}

func writeFixedF(f *testing.F, dir string) {
	w, err := OpenWriter(vfs.OS{}, dir, 0, testOpts())
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, _, err := w.Insert(RecordType(16+i), uint64(i), bytes.Repeat([]byte{byte(i)}, i*7)); err != nil {
			f.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
}

func readFileF(f *testing.F, name string) []byte {
	fl, err := vfs.OS{}.OpenReadOnly(name)
	if err != nil {
		f.Fatal(err)
	}
	defer fl.Close()
	b := make([]byte, 8192)
	if _, err := fl.ReadAt(b, 0); err != nil {
		f.Fatal(err)
	}
	return b
}

// TestSetStopReadsALiveLog reads a log while its writer goes on appending,
// switching segments and preparing the next with a durable-LSN mark past
// the end the read first saw: a read bounded by the flushed LSN taken
// before it ends there cleanly, where an unbounded one takes the moving end
// for records lost after they were durable.
func TestSetStopReadsALiveLog(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, Options{SegmentSize: MinSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := uint64(0)
	insert := func(n int) {
		t.Helper()
		for range n {
			next++
			_, end, err := w.Insert(MinUserRecordType, next, make([]byte, 1000))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(end); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(10)
	stop := w.FlushedLSN()
	bounded, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer bounded.Close()
	bounded.SetStop(stop)
	unbounded, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unbounded.Close()
	for i := range 10 {
		if _, err := bounded.Next(); err != nil {
			t.Fatalf("bounded read, record %d: %v", i, err)
		}
		if _, err := unbounded.Next(); err != nil {
			t.Fatalf("unbounded read, record %d: %v", i, err)
		}
	}

	// The writer goes on into the third segment, and the fourth is
	// prepared with a mark past stop.
	insert(2600)
	fourth := LSN(testSeg + 3*MinSegmentSize)
	for deadline := time.Now().Add(10 * time.Second); !segmentReady(fsys, dir, fourth, MinSegmentSize); {
		if time.Now().After(deadline) {
			t.Fatalf("segment %s was not prepared", segmentName(fourth))
		}
		time.Sleep(time.Millisecond)
	}

	if _, err := bounded.Next(); !errors.Is(err, io.EOF) || bounded.End() != stop {
		t.Errorf("bounded read after the writer went on: %v, end %s; want io.EOF at %s", err, bounded.End(), stop)
	}
	// The hazard the bound is for: without it the same read reports the
	// writer's progress as loss (so this test does reach it).
	if _, err := unbounded.Next(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("unbounded read after the writer went on: %v; want the false alarm ErrCorrupt this scenario exists to show", err)
	}
}

// TestSetStopFindsLossBelowStop damages the last record below the stop,
// which an unbounded read takes for the torn end of the log: a bounded read
// knows it was durable and reports the loss with the file and offset.
func TestSetStopFindsLossBelowStop(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	w, err := OpenWriter(fsys, dir, 0, Options{SegmentSize: MinSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	var last LSN
	for i := range 10 {
		start, end, err := w.Insert(MinUserRecordType, uint64(i), make([]byte, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(end); err != nil {
			t.Fatal(err)
		}
		last = start
	}
	stop := w.FlushedLSN()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	seg := path.Join(dir, segmentName(testSeg))
	b := readFile(t, seg)
	b[last-testSeg+40] ^= 0x01
	writeFile(t, seg, b)

	if n, err := countRecords(t, fsys, dir, nil); err != nil || n != 9 {
		t.Fatalf("unbounded read: %d records, %v; want the end of the log after 9", n, err)
	}
	n, err := countRecords(t, fsys, dir, func(r *Reader) { r.SetStop(stop) })
	want := fmt.Sprintf("%s at offset %d", seg, last-testSeg)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("bounded read: %d records, %v; want ErrCorrupt naming %q", n, err, want)
	}
}

// TestFailedDirSyncOfPreparedSegment: the preparer's fsync of the WAL
// directory, after it renamed a new segment into place, fails. The name may
// then vanish in a power loss, and every record written into the segment
// with it: no flush may succeed past that failure, and every flush that did
// succeed survives the power loss. (Records went into such a segment and
// were acknowledged, then lost.)
func TestFailedDirSyncOfPreparedSegment(t *testing.T) {
	for _, nth := range []int64{1, 0} { // once, and every time from then on
		t.Run(fmt.Sprintf("nth=%d", nth), func(t *testing.T) {
			m := vfs.NewMemFS()
			if err := m.MkdirAll("/wal"); err != nil {
				t.Fatal(err)
			}
			m.SyncDir("/")
			ffs := vfs.NewFaultFS(m)
			w, err := OpenWriter(ffs, "/wal", 0, Options{SegmentSize: MinSegmentSize})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			second := LSN(testSeg + MinSegmentSize)
			for deadline := time.Now().Add(10 * time.Second); !segmentReady(m, "/wal", second, MinSegmentSize); {
				if time.Now().After(deadline) {
					t.Fatal("the second segment was not prepared")
				}
				time.Sleep(time.Millisecond)
			}
			// The next directory fsync is the preparation of the third
			// segment, asked for at the switch into the second.
			flt := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpSyncDir), Contains: "/wal", Nth: nth})
			var acked []LSN
			var flushErr error
			for i := range 200 { // 12 MiB, well past the third segment
				start, end, err := w.Insert(MinUserRecordType, uint64(i), make([]byte, 60<<10))
				if err == nil {
					err = w.Flush(end)
				}
				if err != nil {
					flushErr = err
					break
				}
				acked = append(acked, start)
			}
			if flt.Fired() == 0 {
				t.Fatal("no directory fsync failed")
			}
			if !errors.Is(flushErr, ErrSyncFailed) {
				t.Errorf("writing on after the failed directory fsync: %v; want ErrSyncFailed", flushErr)
			}
			got := map[LSN]bool{}
			r, err := NewReader(m.CrashCopy(vfs.DropUnsynced, nil), "/wal", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for {
				rec, err := r.Next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						t.Fatalf("reading the log after a power loss: %v", err)
					}
					break
				}
				got[rec.LSN] = true
			}
			for _, lsn := range acked {
				if !got[lsn] {
					t.Errorf("the record at %s was flushed, and is lost in a power loss (%d of %d flushed records read back)", lsn, len(got), len(acked))
					break
				}
			}
			t.Logf("%d records flushed, then: %v", len(acked), flushErr)
		})
	}
}

// countRecords reads the log in dir from its start, after setup (if not
// nil) has set the Reader up, and returns how many records it read before
// io.EOF (nil) or another error.
func countRecords(t *testing.T, fsys vfs.FS, dir string, setup func(*Reader)) (int, error) {
	t.Helper()
	r, err := NewReader(fsys, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if setup != nil {
		setup(r)
	}
	n := 0
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

// TestUntaggedLogKeepsOneIdentifier: a log written by a build that left
// the log identifier 0 is continued by this one, reopened once while still
// in an untagged segment, and written on across two more segment
// boundaries. Each open over an untagged segment used to draw a new
// identifier while keeping the prepared next segment, which carried the
// previous open's: the log ended up with two identifiers and was refused
// as "another write-ahead log" after a clean restart.
func TestUntaggedLogKeepsOneIdentifier(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	writeFixed(t, fsys, dir, 0, 10, 100, 0)
	// As an older build left it: identifier 0, no prepared next segment.
	seg1 := path.Join(dir, segmentName(testSeg))
	b := readFile(t, seg1)
	h, err := decodeSegHeader(b[:segHeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	h.tag = 0
	encodeSegHeader(b, h)
	writeFile(t, seg1, b)
	if err := fsys.Remove(path.Join(dir, segmentName(2*testSeg))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	// An open that writes a record, still in segment 1, and has the next
	// segment prepared.
	_, end, _ := readAll(t, fsys, dir, 0)
	writeOneAndPrepare(t, fsys, dir, end)
	// Another open writes on past two segment boundaries.
	_, end, _ = readAll(t, fsys, dir, 0)
	writeFixed(t, fsys, dir, end, 2500, 1000, 1)
	if err := readToError(t, dir); err != io.EOF {
		t.Fatalf("reading the log after a clean restart and 2.5 MB of records: %v", err)
	}
}

// TestForeignPreparedSegmentNotKept: an empty prepared segment past the end
// of the log whose header carries another log's identifier (copied in, or
// left by another database) is removed at open, not kept and written into.
func TestForeignPreparedSegmentNotKept(t *testing.T) {
	fsys, dir := vfs.OS{}, t.TempDir()
	writeOneAndPrepare(t, fsys, dir, 0)
	seg2 := path.Join(dir, segmentName(2*testSeg))
	b := readFile(t, seg2)
	h, err := decodeSegHeader(b[:segHeaderSize])
	if err != nil {
		t.Fatal(err)
	}
	h.tag ^= 0x5a5a
	encodeSegHeader(b, h)
	writeFile(t, seg2, b)
	_, end, _ := readAll(t, fsys, dir, 0)
	writeFixed(t, fsys, dir, end, 2500, 1000, 1)
	if err := readToError(t, dir); err != io.EOF {
		t.Fatalf("reading the log written on past the foreign segment's place: %v", err)
	}
}

// writeOneAndPrepare opens the log in dir at end, writes and flushes one
// record (in segment 1), waits until segment 2 is prepared, and closes.
func writeOneAndPrepare(t *testing.T, fsys vfs.FS, dir string, end LSN) {
	t.Helper()
	w, err := OpenWriter(fsys, dir, end, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if _, e, err := w.Insert(MinUserRecordType, 1, []byte("one")); err != nil {
		t.Fatal(err)
	} else if err := w.Flush(e); err != nil {
		t.Fatal(err)
	}
	waitPrepared(t, fsys, dir)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentOfAnotherLogAfterGap: another log's segment placed past this
// log's end, after a gap, carries a durable-LSN mark beyond this log's
// end; that is named as another log's segment, not as records of this log
// lost.
func TestSegmentOfAnotherLogAfterGap(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFixed(t, vfs.OS{}, a, 0, 300, 1000, 0) // ends inside its first segment
	// b flushes as it goes, so its later segments carry durable-LSN
	// marks, as a database's do.
	w, err := OpenWriter(vfs.OS{}, b, 0, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4500 {
		if _, _, err := w.Insert(16, uint64(i)+1, bytes.Repeat([]byte{7}, 1000)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if err := w.FlushAll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	first := FirstLSN(testSeg) - LSN(uint64(FirstLSN(testSeg))%testSeg)
	seg3 := segmentName(first + 3*testSeg)
	theirs := readFile(t, path.Join(b, seg3))
	if bytes.Equal(readFile(t, path.Join(a, segmentName(first)))[6:8], theirs[6:8]) {
		t.Skip("the two logs drew the same identifier")
	}
	writeFile(t, path.Join(a, seg3), theirs)
	err = readToError(t, a)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "different write-ahead log") ||
		!strings.Contains(err.Error(), path.Join(a, seg3)) || strings.Contains(err.Error(), "is lost") {
		t.Fatalf("reading a log with another log's segment after a gap: %v", err)
	}
}

// TestDurableMarkFoundPastZeros: the log seems to end at a damaged record,
// and the evidence that it was durable past there (a later record's
// durable mark) lies after a run of zeros, short (a record's header and
// a few bytes, at each 8-byte length), across the 4 KiB pieces the run is
// measured in, or longer than the chunks the search skips zeros by, at
// every 8-byte alignment against those chunks: the search must still find
// it and report the damage, not take the damage for the torn end of the
// log.
func TestDurableMarkFoundPastZeros(t *testing.T) {
	var sizes []int
	for j := range 10 {
		sizes = append(sizes, 8*j, 4096-64+8*j, scanChunk+4096+8*j)
	}
	for _, size := range sizes {
		fsys, dir := vfs.OS{}, t.TempDir()
		w, err := OpenWriter(fsys, dir, 0, Options{SegmentSize: MinSegmentSize})
		if err != nil {
			t.Fatal(err)
		}
		insert := func(payload []byte) LSN {
			t.Helper()
			start, end, err := w.Insert(MinUserRecordType, 1, payload)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(end); err != nil {
				t.Fatal(err)
			}
			return start
		}
		damaged := insert(bytes.Repeat([]byte{7}, 100))
		// A record of zeros whose header is then zeroed too: with it, a
		// run of zeros of size and a header.
		zeroed := insert(make([]byte, size))
		insert(bytes.Repeat([]byte{9}, 100))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		seg := path.Join(dir, segmentName(testSeg))
		b := readFile(t, seg)
		b[damaged-testSeg+40] ^= 0x01
		clear(b[zeroed-testSeg : zeroed-testSeg+recHeaderSize])
		writeFile(t, seg, b)
		n, err := countRecords(t, fsys, dir, nil)
		want := fmt.Sprintf("%s at offset %d", seg, damaged-testSeg)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "durable up to") {
			t.Fatalf("zero run of a %d-byte payload: %d records, %v; want ErrCorrupt naming %q and the later durable mark", size, n, err, want)
		}
	}
}

// TestFirstNonZero checks the measure of a run of zeros at every place
// around its 4 KiB pieces' edges.
func TestFirstNonZero(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 5} {
		b := make([]byte, n)
		if got := firstNonZero(b); got != n {
			t.Fatalf("%d zeros: %d, want %d", n, got, n)
		}
		for _, i := range []int{0, 1, 4095, 4096, 4097, n - 1} {
			if i < 0 || i >= n {
				continue
			}
			clear(b)
			b[i], b[n-1] = 0x80, 1
			if got := firstNonZero(b); got != i {
				t.Fatalf("%d bytes, first non-zero at %d: got %d", n, i, got)
			}
		}
	}
}

// TestLastNonZero checks the search for the end of a torn tail at every
// place around its 4 KiB pieces' edges.
func TestLastNonZero(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 5} {
		b := make([]byte, n)
		if got := lastNonZero(b); got != -1 {
			t.Fatalf("%d zeros: %d, want -1", n, got)
		}
		for _, i := range []int{0, 1, 4095, 4096, 4097, n - 1} {
			if i < 0 || i >= n {
				continue
			}
			clear(b)
			b[0], b[i] = 1, 0x80
			if got := lastNonZero(b); got != i {
				t.Fatalf("%d bytes, last non-zero at %d: got %d", n, i, got)
			}
		}
	}
}
