package engine

import (
	"context"
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
		if !strings.Contains(rep.Notes[0], fmt.Sprintf("%d out-of-line value chunks (%d bytes)", len(want), wantBytes)) {
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
// aborts without placing its version, its chunks are orphans (nothing
// frees them but an Open that rebuilds the index), reported as aborted.
func TestVerifyNoFalseOrphans(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
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
	rep := verifyOrphans(t, db)
	if rep.OrphanChunks != 3 || len(rep.Notes) != 4 {
		t.Fatalf("after the writer aborted: %d orphans, notes %q; want its 3 chunks", rep.OrphanChunks, rep.Notes)
	}
	for _, n := range rep.Notes[1:] {
		if !strings.HasPrefix(n, "orphan data chunk: ") || !strings.HasSuffix(n, fmt.Sprintf("xmin %d (aborted)", xid)) {
			t.Fatalf("note %q does not name an aborted chunk of xid %d", n, xid)
		}
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if rep := verifyOrphans(t, db); rep.OrphanChunks != 3 {
		t.Fatalf("after vacuum: %d orphans, notes %q; vacuum frees no aborted chunk nothing names", rep.OrphanChunks, rep.Notes)
	}
}
