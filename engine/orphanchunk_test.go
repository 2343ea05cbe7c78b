package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// verifyOrphans runs Verify, which must find no problem, and returns its
// report.
func verifyOrphans(t *testing.T, db *DB) VerifyReport {
	t.Helper()
	rep, err := db.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", err, rep.Problems)
	}
	return rep
}

// TestVerifyOrphansOfLostDirectory: the directory chunk of a value above
// 1 MiB is lost with its page (read as empty under zero_damaged_pages);
// the key is deleted and vacuum frees what it can find, which is not the
// data chunks the directory listed. Verify reports those as orphans,
// naming each one's file, offset, block and slot and counting their
// bytes, without a problem (the data is intact); an Open from the index
// file and vacuum leave them; an Open that rebuilds the index from the
// heap queues them (Verify then reports none), and vacuum frees them.
func TestVerifyOrphansOfLostDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	const size = 2 << 20 // one directory of 266 data chunks
	mustPut(t, db, "big", string(patterned(size, 1)))
	mustPut(t, db, "small", "s")
	_, ptr := rawPointer(t, db, "big")
	p, err := parseToastPointer(ptr)
	if err != nil || !p.indirect || len(p.tids) != 1 {
		t.Fatalf("pointer of a %d-byte value: %+v, %v; the test needs one directory", size, p, err)
	}
	dirTID := p.tids[0]
	listed, err := db.directoryTIDs(dirTID)
	if err != nil {
		t.Fatal(err)
	}
	// The orphans: the listed data chunks not on the directory's page
	// (those are lost with it), with their tuples' sizes.
	type orphan struct {
		tid  heap.TID
		size int
	}
	var want []orphan
	var wantBytes int64
	for i, tid := range listed {
		if tid.Block == dirTID.Block {
			continue
		}
		n := largeChunkSize
		if i == len(listed)-1 {
			n = size - i*largeChunkSize
		}
		want = append(want, orphan{tid, heap.TupleHeaderSize + n})
		wantBytes += int64(heap.TupleHeaderSize + n)
	}
	slices.SortFunc(want, func(a, b orphan) int { return int(a.tid.Pack()) - int(b.tid.Pack()) })
	if len(want) < maxOrphansNamed+1 {
		t.Fatalf("%d orphans: the test no longer has more than Verify names", len(want))
	}
	if rep := verifyOrphans(t, db); rep.OrphanChunks != 0 || len(rep.Notes) != 0 {
		t.Fatalf("Verify of an intact value: %d orphans, notes %q", rep.OrphanChunks, rep.Notes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tearBlock(t, dir, dirTID.Block)

	o.ZeroDamagedPages = true
	db = openTest(t, dir, o)
	mustDelete(t, db, "big")
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ChunksRemoved != 0 {
		t.Fatalf("vacuum freed %d chunks of a value whose directory was lost: the test no longer leaves orphans", st.ChunksRemoved)
	}
	checkOrphans := func(when string) {
		t.Helper()
		rep := verifyOrphans(t, db)
		if rep.OrphanChunks != len(want) || rep.OrphanBytes != wantBytes {
			t.Fatalf("%s: Verify found %d orphan chunks of %d bytes, want %d of %d: %q", when, rep.OrphanChunks, rep.OrphanBytes, len(want), wantBytes, rep.Notes)
		}
		// A summary, the first ones named, and how many more.
		if len(rep.Notes) != 1+maxOrphansNamed+1 {
			t.Fatalf("%s: %d notes, want %d: %q", when, len(rep.Notes), maxOrphansNamed+2, rep.Notes)
		}
		if !strings.Contains(rep.Notes[0], fmt.Sprintf("%d out-of-line value chunks (%d bytes)", len(want), wantBytes)) || strings.Contains(rep.Notes[0], "aborted") {
			t.Fatalf("%s: summary note %q", when, rep.Notes[0])
		}
		for i, w := range want[:maxOrphansNamed] {
			name := fmt.Sprintf("orphan data chunk: %s, slot %d, %d bytes, xmin ", db.heapBlockName(w.tid.Block), w.tid.Slot, w.size)
			if n := rep.Notes[1+i]; !strings.HasPrefix(n, name) || !strings.Contains(n, "(committed") {
				t.Fatalf("%s: note %d is %q, want it to begin %q and say the writer committed", when, i+1, n, name)
			}
		}
		if n := rep.Notes[len(rep.Notes)-1]; n != fmt.Sprintf("%d more chunks that no version names", len(want)-maxOrphansNamed) {
			t.Fatalf("%s: last note %q", when, n)
		}
		if s := rep.String(); !strings.Contains(s, "note: "+rep.Notes[1]+"\n") || !strings.HasSuffix(s, "ok\n") {
			t.Fatalf("%s: report reads\n%s", when, s)
		}
	}
	checkOrphans("after vacuum")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// An Open from the index file knows nothing of them; vacuum neither.
	o.ZeroDamagedPages = false
	db = openTest(t, dir, o)
	if !db.Recovery().IndexFromFile {
		t.Fatalf("Open rebuilt the index: %q", db.Recovery().IndexRebuildReason)
	}
	if st, err := db.Vacuum(ctx); err != nil || st.ChunksRemoved != 0 {
		t.Fatalf("vacuum after an Open from the index file: %+v, %v", st, err)
	}
	checkOrphans("after an Open from the index file")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Without the index file, Open rebuilds the index from the heap and
	// hands the orphans to vacuum: queued, they are not reported.
	if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, o)
	defer db.Close()
	if db.Recovery().IndexFromFile {
		t.Fatal("Open used an index file that was removed")
	}
	if rep := verifyOrphans(t, db); rep.OrphanChunks != 0 || len(rep.Notes) != 0 {
		t.Fatalf("Verify with the orphans queued for vacuum: %d orphans, notes %q", rep.OrphanChunks, rep.Notes)
	}
	st, err = db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ChunksRemoved != uint64(len(want)) {
		t.Fatalf("vacuum after the rebuild freed %d chunks, want %d", st.ChunksRemoved, len(want))
	}
	if n := chunkTuples(t, db); n != 0 {
		t.Fatalf("%d chunk tuples left", n)
	}
	if rep := verifyOrphans(t, db); rep.OrphanChunks != 0 || len(rep.Notes) != 0 {
		t.Fatalf("Verify after vacuum: %d orphans, notes %q", rep.OrphanChunks, rep.Notes)
	}
	if v, ok := get(t, db, "small"); !ok || v != "s" {
		t.Fatalf("small: %q, %v", v, ok)
	}
}

// TestVerifyNoFalseOrphans: chunks nothing names yet, or whose version
// vacuum has yet to remove, are not orphans: those of a writer still
// running that has placed them but not its version; those of an aborted
// value and of a deleted one before vacuum. Once the running writer
// aborts without placing its version, its chunks are garbage that
// vacuum's next run frees (pruning frees a chunk whose writer aborted),
// not leaked space: no orphans, before the run or after it, and the run
// frees them.
func TestVerifyNoFalseOrphans(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, VacuumFreezeMinAge: -1})
	defer db.Close()
	noOrphans := func(when string) {
		t.Helper()
		if rep := verifyOrphans(t, db); rep.OrphanChunks != 0 || len(rep.Notes) != 0 {
			t.Fatalf("%s: %d orphans, notes %q", when, rep.OrphanChunks, rep.Notes)
		}
	}
	mustPut(t, db, "deleted", string(patterned(3*chunkSize, 1)))
	mustPut(t, db, "large-deleted", string(patterned(2<<20, 2)))
	mustDelete(t, db, "deleted")
	mustDelete(t, db, "large-deleted")
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("aborted"), patterned(3*chunkSize, 3)); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	noOrphans("deleted and aborted values before vacuum")

	// A writer between placing its value's chunks and its version, as
	// toastValue leaves it.
	tx, err = db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("small"), []byte("s")); err != nil {
		t.Fatal(err)
	}
	xid := tx.st.xid.Load()
	if _, err := db.toastValue(xid, patterned(3*chunkSize, 4)); err != nil {
		t.Fatal(err)
	}
	noOrphans("a writer that has placed chunks and not its version")
	tx.Rollback()
	noOrphans("the chunks of a writer that aborted before placing its version")
	before := chunkTuples(t, db)
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noOrphans("after vacuum")
	// The three values' chunks: deleted, aborted, and the writer's.
	if n := chunkTuples(t, db); n != 0 || st.ChunksRemoved != uint64(before) {
		t.Fatalf("after vacuum: %d chunk tuples left of %d, ChunksRemoved %d", n, before, st.ChunksRemoved)
	}
	if st.RelFrozenXid <= xid {
		t.Fatalf("RelFrozenXid %d after vacuum, held at or below the aborted writer's xid %d", st.RelFrozenXid, xid)
	}
}

// rewriteTuple changes the tuple at tid in the heap file of the closed
// database in dir with fn and gives the page a valid checksum again, so
// that only the checks of the tuple itself can tell.
func rewriteTuple(t *testing.T, dir string, tid heap.TID, fn func(raw []byte)) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, heapDir, "00000000"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, heap.PageSize)
	off := int64(tid.Block) * heap.PageSize
	if _, err := f.ReadAt(page, off); err != nil {
		t.Fatal(err)
	}
	raw, err := heap.Tuple(page, tid.Slot)
	if err != nil {
		t.Fatal(err)
	}
	fn(raw)
	heap.SetChecksum(page, tid.Block)
	if _, err := f.WriteAt(page, off); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyDamagedChunkHeader: a directory chunk whose header or value
// was damaged on a page whose checksum still passes (a bug's write) makes
// Verify report a problem, never panic; orphans are looked for only when
// every tuple decoded, and then the data chunks the damaged directory no
// longer names are reported.
func TestVerifyDamagedChunkHeader(t *testing.T) {
	const size = 2 << 20
	for _, tc := range []struct {
		name    string
		damage  func(raw []byte)
		problem string // in some problem
		orphans bool   // the data chunks are reported as orphans
	}{
		{"value length past the tuple", func(raw []byte) { binary.LittleEndian.PutUint32(raw[28:], 1<<31) }, "", false},
		{"key length past the tuple", func(raw []byte) { binary.LittleEndian.PutUint16(raw[24:], 0xffff) }, "", false},
		{"listed chunks past the heap", func(raw []byte) {
			for i := heap.TupleHeaderSize; i < len(raw); i++ {
				raw[i] = 0xff
			}
		}, "which is not a data chunk", true},
		{"not a directory", func(raw []byte) {
			binary.LittleEndian.PutUint16(raw[22:], binary.LittleEndian.Uint16(raw[22:])&^heap.External)
		}, "which is not a directory", true},
		{"not a chunk", func(raw []byte) {
			// A version's pointer now, which does not decode.
			binary.LittleEndian.PutUint16(raw[22:], binary.LittleEndian.Uint16(raw[22:])&^heap.Chunk)
		}, "external value pointer", false},
		{"xmin of another transaction", func(raw []byte) { binary.LittleEndian.PutUint64(raw[0:], 2) }, "a chunk of another value", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, o)
			mustPut(t, db, "big", string(patterned(size, 1)))
			_, ptr := rawPointer(t, db, "big")
			p, err := parseToastPointer(ptr)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			rewriteTuple(t, dir, p.tids[0], tc.damage)
			db = openTest(t, dir, o)
			defer db.Close()
			rep, err := db.Verify()
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), tc.problem) {
				t.Fatalf("Verify of a damaged directory: problems %q, want one with %q", rep.Problems, tc.problem)
			}
			if got := rep.OrphanChunks > 0; got != tc.orphans {
				t.Fatalf("Verify reported %d orphan chunks, want some: %v; notes %q", rep.OrphanChunks, tc.orphans, rep.Notes)
			}
			if !tc.orphans && (len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "were not checked")) {
				t.Fatalf("notes %q, want one saying orphans were not looked for", rep.Notes)
			}
		})
	}
}

// FuzzToastCheck feeds Verify's check of out-of-line values arbitrary
// tuples, as a heap whose pages pass their checksums could hold them: it
// must not panic, and what it reports must stay within what it was given.
// Each tuple is 8 bytes (block, slot, infomask 2, xmin, value length 2,
// unused) and its value.
func FuzzToastCheck(f *testing.F) {
	db := openTest(f, f.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	mustPut(f, db, "k", "v")
	tuple := func(blk, slot byte, infomask uint16, xmin byte, val []byte) []byte {
		b := []byte{blk, slot, byte(infomask), byte(infomask >> 8), xmin, byte(len(val)), byte(len(val) >> 8), 0}
		return append(b, val...)
	}
	ptr := binary.LittleEndian.AppendUint32(nil, 3*chunkSize)
	ptr = binary.LittleEndian.AppendUint32(ptr, 3)
	for i := range 3 {
		ptr = appendTID(ptr, heap.TID{Block: uint32(i + 1)})
	}
	seed := tuple(0, 0, heap.External, 1, ptr)
	for i := range 3 {
		seed = append(seed, tuple(byte(i+1), 0, heap.Chunk, 1, []byte("chunk"))...)
	}
	f.Add(seed)
	lptr := binary.LittleEndian.AppendUint32(nil, 2<<20)
	lptr = binary.LittleEndian.AppendUint32(lptr, indirectFlag|1)
	lptr = appendTID(lptr, heap.TID{Block: 9})
	f.Add(append(append(tuple(0, 1, heap.External, 1, lptr), tuple(9, 0, heap.Chunk|heap.External, 1, appendTID(nil, heap.TID{Block: 3}))...), tuple(3, 0, heap.Chunk, 1, nil)...))
	f.Add(tuple(4, 4, heap.Chunk|heap.External, 2, []byte{1, 2, 3}))
	f.Add(tuple(4, 4, heap.Chunk|heap.External|heap.Frozen, 200, make([]byte, 6*tidsPerDirectory+6)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &toastCheck{db: db, begun: db.procs.snapshot(), queued: []chunkID{{heap.TID{Block: 3}, 1}}}
		problems := 0
		problem := func(string, ...any) { problems++ }
		chunks := map[heap.TID]notedChunk{}
		for len(data) >= 8 {
			n := min(int(binary.LittleEndian.Uint16(data[5:])), len(data)-8)
			tid := heap.TID{Block: uint32(data[0]), Slot: uint16(data[1])}
			h := heap.TupleHeader{Infomask: binary.LittleEndian.Uint16(data[2:]), Xmin: uint64(data[4]) % 4}
			val := data[8 : 8+n]
			data = data[8+n:]
			c.Note(problem, tid, h, val)
			if h.Infomask&heap.Chunk != 0 {
				chunks[tid] = notedChunk{h.Xmin, h.Infomask, heap.TupleHeaderSize + len(val)}
			}
		}
		c.Report(problem, func(tid heap.TID) (bool, bool, uint64) {
			ch, ok := chunks[tid]
			return ok, ok && isDirectory(ch.infomask), ch.xmin
		}, func(tid heap.TID) bool { return tid.Block == 200 })
		notes := 0
		n, bytes := c.Orphans(func(string, ...any) { notes++ }, 0)
		var most int64
		for _, ch := range chunks {
			most += int64(ch.size)
		}
		if n < 0 || n > len(chunks) || bytes < 0 || bytes > most || (n == 0) != (bytes == 0) {
			t.Fatalf("%d orphans of %d bytes, of %d chunks of %d bytes", n, bytes, len(chunks), most)
		}
		if notes > 2+maxOrphansNamed || (n > 0 && notes != 1+min(n, maxOrphansNamed)+min(1, n/(maxOrphansNamed+1))) {
			t.Fatalf("%d notes for %d orphans", notes, n)
		}
	})
}
