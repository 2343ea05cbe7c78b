package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"mvkv/internal/heap"
)

// TestChunkDebtSurvivesCrash: vacuum's first pass removes an overwritten
// out-of-line version, and the machine stops before its second pass frees
// the version's chunks (a copy of the live directory, as a crash that the
// operating system survives leaves it). The copy opens from its index file,
// and its next vacuum must free those chunks: the pruning record listed
// them, or the checkpoint's index file did. Before, the chunks stayed on
// the heap, named by nothing, until an Open without the index file.
func TestChunkDebtSurvivesCrash(t *testing.T) {
	for _, c := range []struct {
		name string
		// stopped: the run is canceled after its first pass removed the
		// version; else the copy is taken between its passes.
		stopped, checkpoint bool
	}{
		{"stopped run", true, false},
		{"stopped run, then a checkpoint", true, true},
		{"between the passes", false, false},
		{"between the passes, after a checkpoint", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, crash := t.TempDir(), t.TempDir()
			opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
			db := openTest(t, dir, opts)
			defer db.Close()
			mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
			old := db.idx.get([]byte("big")).headTID()
			mustPut(t, db, "big", "small now")
			takeCopy := func() {
				if c.checkpoint {
					if err := db.Checkpoint(); err != nil {
						t.Error(err)
					}
				}
				if err := db.wal.FlushAll(); err != nil {
					t.Error(err)
				}
				copyDir(t, dir, crash)
			}
			if c.stopped {
				// Err is asked before each page of pass 1: cancel once
				// the old version's page is done.
				ctx := &cancelAfter{Context: context.Background()}
				ctx.n.Store(int64(old.Block) + 1)
				if st, err := db.Vacuum(ctx); !errors.Is(err, context.Canceled) || st.TuplesRemoved != 1 {
					t.Fatalf("vacuum: %+v, %v; want one version removed, then context.Canceled", st, err)
				}
				takeCopy()
			} else {
				ctx := &hookCtx{Context: context.Background(), n: int64(db.pool.NBlocks()) + 1, fn: takeCopy}
				if st, err := db.Vacuum(ctx); err != nil || st.ChunksRemoved != 3 {
					t.Fatalf("vacuum: %+v, %v; want its 3 chunks freed", st, err)
				}
				mustHaveRun(t, ctx)
			}
			if t.Failed() {
				return
			}
			if n := chunkTuples(t, db); c.stopped && n != 3 {
				t.Fatalf("%d chunk tuples after the stopped run; want its 3", n)
			}

			cdb := openTest(t, crash, opts)
			defer cdb.Close()
			if ri := cdb.Recovery(); !ri.IndexFromFile {
				t.Fatalf("the copy rebuilt its index (%q): the test is about an Open from the index file", ri.IndexRebuildReason)
			}
			if n := chunkTuples(t, cdb); n != 3 {
				t.Fatalf("%d chunk tuples in the copy; want the 3 the first pass listed", n)
			}
			st, err := cdb.Vacuum(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n := chunkTuples(t, cdb); n != 0 || st.ChunksRemoved != 3 {
				t.Fatalf("vacuum of the copy freed %d chunks, %d left: the chunks the crash came between leaked", st.ChunksRemoved, n)
			}
			if v, _ := get(t, cdb, "big"); v != "small now" {
				t.Fatalf("big = %q", v)
			}
			mustVerify(t, cdb)
		})
	}
}

// TestChunkDebtStaleEntryLeftAlone: a chunk in vacuum's debt whose slot was
// freed and then taken by another value's chunk (as a crash after the
// index file listed it, and before Open, would leave it) is not freed: its
// xmin no longer matches. The debt forgets it once a run has looked.
func TestChunkDebtStaleEntryLeftAlone(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, opts)
	mustPut(t, db, "big", string(patterned(3*chunkSize, 1)))
	var ctids []heap.TID
	var xmin uint64
	eachHeapTuple(t, db, func(tid heap.TID, raw []byte) {
		h, key, val, err := heap.DecodeTuple(raw)
		if err != nil || string(key) != "big" || h.Infomask&heap.External == 0 || h.Infomask&heap.Chunk != 0 {
			return
		}
		if ctids, err = chunkTIDs(val); err != nil {
			t.Fatal(err)
		}
		xmin = h.Xmin
	})
	if len(ctids) == 0 {
		t.Fatal("no out-of-line version of big")
	}
	// An entry for the live value's first chunk, with another xmin: a
	// chunk of an older value that slot held once.
	db.vac.debt.add([]chunkID{{ctids[0], xmin - 1}})
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	// Close looks at the debt too, and finds the slot taken.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := db.vac.debt.len(); n != 0 {
		t.Fatalf("the debt still holds %d chunks after Close found the slot taken", n)
	}
	db = openTest(t, crash, opts)
	defer db.Close()
	if n := db.vac.debt.len(); n != 1 {
		t.Fatalf("the debt after Open holds %d chunks, want the 1 the index file carried", n)
	}
	if st, err := db.Vacuum(context.Background()); err != nil || st.ChunksRemoved != 0 {
		t.Fatalf("vacuum: %+v, %v; want nothing freed", st, err)
	}
	if n := db.vac.debt.len(); n != 0 {
		t.Fatalf("the debt still holds %d chunks after a run found the slot taken", n)
	}
	if got, _ := get(t, db, "big"); got != string(patterned(3*chunkSize, 1)) {
		t.Fatal("the live value changed")
	}
	mustVerify(t, db)
}

// TestIndexFileVersion3Read: an index file of format version 3 (version 4
// without vacuum's debt) is used as one with an empty debt, so that an
// upgrade does not rebuild the index from the heap.
func TestIndexFileVersion3Read(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, opts)
	for i := 0; i < 50; i++ {
		mustPut(t, db, string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, indexFileName)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(b[60:]) != 0 {
		t.Fatal("the file carries a debt: the test needs one without")
	}
	rewrite := func(version uint32, reserved uint32) {
		t.Helper()
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[8:], version)
		binary.LittleEndian.PutUint32(c[60:], reserved)
		sum := crc32.Update(crc32.Checksum(c[indexHeaderSize:len(c)-4], castagnoli), castagnoli, c[:indexHeaderSize])
		binary.LittleEndian.PutUint32(c[len(c)-4:], sum)
		if err := os.WriteFile(name, c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(indexFileVersionNoDebt, 0)
	db = openTest(t, dir, opts)
	if ri := db.Recovery(); !ri.IndexFromFile {
		t.Fatalf("a version 3 file was not used: %q", ri.IndexRebuildReason)
	}
	if v, _ := get(t, db, "aa"); v != "v" {
		t.Fatalf("aa = %q", v)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Version 3 with a nonzero field where version 4 counts the debt.
	b, err = os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	rewrite(indexFileVersionNoDebt, 1)
	db = openTest(t, dir, opts)
	defer db.Close()
	if ri := db.Recovery(); ri.IndexFromFile || !bytes.Contains([]byte(ri.IndexRebuildReason), []byte("not zero")) {
		t.Fatalf("a version 3 file with its reserved field set: %+v", ri)
	}
}
