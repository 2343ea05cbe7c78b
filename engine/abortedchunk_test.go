package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// The chunks of an aborted large-value write are freed by pruning, by
// vacuum's and by a writer's or reader's, whether or not a version names
// them, so that they hold neither space nor RelFrozenXid (and the CLOG's
// truncation). Each test here fails if pruning leaves them (vacuum only
// recording them), as it did before.

// chunksOf lists the chunk tuples on the heap's pages whose xmin is xmin.
func chunksOf(t *testing.T, db *DB, xmin uint64) []heap.TID {
	t.Helper()
	var out []heap.TID
	eachHeapTuple(t, db, func(tid heap.TID, raw []byte) {
		if heap.TupleInfomask(raw)&heap.Chunk != 0 && heap.TupleXmin(raw) == xmin {
			out = append(out, tid)
		}
	})
	return out
}

// abortLargePut writes value for key in a transaction it rolls back and
// returns the transaction's xid: its version and its chunks stay on the
// heap, invisible.
func abortLargePut(t *testing.T, db *DB, key string, value []byte) uint64 {
	t.Helper()
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte(key), value); err != nil {
		t.Fatal(err)
	}
	xid := tx.XID()
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	return xid
}

// abortBeforeVersion places a large value's chunks for a transaction and
// rolls it back before it places the version naming them, as a write that
// fails or crashes between the two does: chunks nothing names.
func abortBeforeVersion(t *testing.T, db *DB, value []byte) uint64 {
	t.Helper()
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("other"), []byte("o")); err != nil {
		t.Fatal(err)
	}
	xid := tx.XID()
	if _, err := db.toastValue(xid, value); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	return xid
}

// TestVacuumFreesAbortedChunks: vacuum frees the chunks of an aborted
// write, named by its version or by nothing, counts them in ChunksRemoved
// and not in TuplesRemoved, and RelFrozenXid passes their xids, so that
// the CLOG segment that held them is truncated.
func TestVacuumFreesAbortedChunks(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1, VacuumFreezeMinAge: -1})
	defer db.Close()
	oldCLOGSegments(t, db, 2)
	named := abortLargePut(t, db, "aborted", patterned(3*chunkSize, 1))
	unnamed := abortBeforeVersion(t, db, patterned(2*chunkSize, 2))
	if n, u := len(chunksOf(t, db, named)), len(chunksOf(t, db, unnamed)); n != 3 || u != 2 {
		t.Fatalf("before vacuum: %d and %d chunks of the aborted writes, want 3 and 2", n, u)
	}
	// The next xids in the next CLOG segment, with a commit there, so
	// that the segment of the aborted writes can go once nothing needs it.
	db.procs.setNext(3*clogSegXids + 10)
	mustPut(t, db, "later", "x")
	st := mustVacuum(t, db)
	if n, u := len(chunksOf(t, db, named)), len(chunksOf(t, db, unnamed)); n != 0 || u != 0 {
		t.Fatalf("after vacuum: %d and %d chunks of the aborted writes left (stats %+v)", n, u, st)
	}
	// Two versions (the aborted key's head and "other") are versions;
	// the five chunks are not.
	if st.ChunksRemoved != 5 || st.TuplesRemoved != 2 {
		t.Errorf("ChunksRemoved %d, TuplesRemoved %d; want 5 and 2", st.ChunksRemoved, st.TuplesRemoved)
	}
	if s := db.Stats(); s.Vacuum.ChunksRemoved != 5 || s.Vacuum.TuplesRemoved != 2 || s.Heap.ChunksPrunedByRead+s.Heap.ChunksPrunedByUpdate != 0 {
		t.Errorf("Stats: vacuum's ChunksRemoved %d, TuplesRemoved %d; chunks pruned by reads %d and updates %d; want 5, 2, 0 and 0",
			s.Vacuum.ChunksRemoved, s.Vacuum.TuplesRemoved, s.Heap.ChunksPrunedByRead, s.Heap.ChunksPrunedByUpdate)
	}
	if st.RelFrozenXid <= max(named, unnamed) {
		t.Fatalf("RelFrozenXid %d, held at or below the aborted writes' xids %d and %d", st.RelFrozenXid, named, unnamed)
	}
	if got := db.clog.OldestXid(); got/clogSegXids != 3 {
		t.Fatalf("CLOG truncated to xid %d, want segment 3 (the aborted writes' xids %d and %d lie in segment 2)", got, named, unnamed)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := clogSegments(t, m, "/db"); len(got) == 0 || got[0] != "000000000003" {
		t.Fatalf("CLOG segments %v, want 000000000003 first", got)
	}
	mustVerify(t, db)
	if _, ok := get(t, db, "aborted"); ok {
		t.Fatal("the aborted key reads")
	}
}

// TestPruneByReadFreesAbortedChunks: a reader's prune of a page frees the
// chunk of an aborted write on it, counted as no version, and leaves its
// version (out of line, left to vacuum) naming a free slot, which a new
// tuple then takes. Verify takes that for no damage, a crash there is
// recovered to the same state (the pruning record replayed), and vacuum
// removes the version, finding its chunk gone.
func TestPruneByReadFreesAbortedChunks(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	mustPut(t, db, "a", "1")
	xid := abortLargePut(t, db, "big", patterned(3000, 1))
	chunks := chunksOf(t, db, xid)
	if len(chunks) != 1 {
		t.Fatalf("%d chunks of a 3,000-byte value, want 1", len(chunks))
	}
	c := chunks[0]
	if res := pruneBlockForTest(t, db, c.Block); res.removed != 0 {
		t.Errorf("the prune counted %d versions removed; the chunk is none", res.removed)
	}
	if left := chunksOf(t, db, xid); len(left) != 0 {
		t.Fatalf("the aborted write's chunk is still at %v after the prune", left)
	}
	if st := db.Stats(); st.Heap.PrunesByRead != 1 || st.Heap.PrunedByRead != 0 || st.Heap.ChunksPrunedByRead != 1 || st.Heap.ChunksPrunedByUpdate != 0 {
		t.Errorf("prunes by read %d, versions pruned %d, chunks pruned by reads %d and by updates %d; want 1, 0, 1 and 0",
			st.Heap.PrunesByRead, st.Heap.PrunedByRead, st.Heap.ChunksPrunedByRead, st.Heap.ChunksPrunedByUpdate)
	}
	// New tuples take the freed slot.
	for i := 0; slotState(t, db, c) != heap.LPNormal; i++ {
		if i == 100 {
			t.Fatalf("slot %s not reused", c)
		}
		mustPut(t, db, fmt.Sprintf("new%03d", i), strings.Repeat("n", 100))
	}
	mustVerify(t, db)
	if err := db.flushWAL(uint64(db.wal.InsertLSN())); err != nil {
		t.Fatal(err)
	}
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()

	db = openTest(t, "/db", Options{FS: crashed, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	if left := chunksOf(t, db, xid); len(left) != 0 {
		t.Fatalf("after the crash the aborted write's chunk is back at %v", left)
	}
	mustVerify(t, db)
	before := heapTuples(t, db)
	st := mustVacuum(t, db)
	if st.ChunksRemoved != 0 || st.TuplesRemoved != 1 {
		t.Errorf("vacuum: ChunksRemoved %d, TuplesRemoved %d; want 0 and 1 (the aborted version)", st.ChunksRemoved, st.TuplesRemoved)
	}
	if after := heapTuples(t, db); after != before-1 {
		t.Errorf("%d tuples after vacuum, %d before: want one fewer", after, before)
	}
	if got, ok := get(t, db, fmt.Sprintf("new%03d", 0)); !ok || got != strings.Repeat("n", 100) {
		t.Fatalf("new000 = %q, %v", got, ok)
	}
	mustVerify(t, db)
}

// TestWritesPruneAbortedChunks: the updates of a key fill its page, and
// the prune that follows (the writer's, which reads the key's version on
// the full page first) frees the chunk of an aborted write there with the
// dead versions; a new version takes its slot.
func TestWritesPruneAbortedChunks(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	const keys = 8
	val := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("v", 400) }
	for k := range keys {
		mustPut(t, db, fmt.Sprintf("k%d", k), val(0))
	}
	xid := abortLargePut(t, db, "big", patterned(3000, 1))
	chunks := chunksOf(t, db, xid)
	if len(chunks) != 1 {
		t.Fatalf("chunks of the aborted write at %v, want one", chunks)
	}
	// Updates of a key on the chunk's page put their versions there
	// until it is full, and then prune it.
	key := ""
	for k := range keys {
		if e := db.idx.get(fmt.Appendf(nil, "k%d", k)); e != nil && e.headTID().Block == chunks[0].Block {
			key = e.key()
		}
	}
	if key == "" {
		t.Fatalf("no key on block %d", chunks[0].Block)
	}
	prunes := func() uint64 { h := db.Stats().Heap; return h.PrunesByUpdate + h.PrunesByRead }
	for i := 1; prunes() == 0; i++ {
		if i == 200 {
			t.Fatal("no prune")
		}
		mustPut(t, db, key, val(i))
	}
	if left := chunksOf(t, db, xid); len(left) != 0 {
		t.Fatalf("the aborted write's chunk is still at %v after pruning by update (stats %+v)", left, db.Stats().Heap)
	}
	if h := db.Stats().Heap; h.ChunksPrunedByUpdate+h.ChunksPrunedByRead != 1 {
		t.Errorf("chunks pruned by updates %d and by reads %d; want the one chunk", h.ChunksPrunedByUpdate, h.ChunksPrunedByRead)
	}
	for i := 0; slotState(t, db, chunks[0]) != heap.LPNormal; i++ {
		if i == 100 {
			t.Fatalf("slot %s not reused", chunks[0])
		}
		mustPut(t, db, key, val(1000+i))
	}
	mustVerify(t, db)
	st := mustVacuum(t, db)
	if st.ChunksRemoved != 0 {
		t.Errorf("vacuum freed %d chunks; pruning had freed the only one", st.ChunksRemoved)
	}
	mustVerify(t, db)
}

// TestPruneStatsCountAbortedChunks: DB.Stats counts the chunks of aborted
// writes that pruning frees by the kind of prune, a writer's or a
// reader's, apart from the versions, and vacuum's run counts the rest in
// VacuumTotals.ChunksRemoved.
func TestPruneStatsCountAbortedChunks(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	mustPut(t, db, "a", "1")
	// Two chunks of 8,128 bytes each fill a page of their own.
	byUpdate := chunksOf(t, db, abortLargePut(t, db, "u", patterned(2*chunkSize, 1)))
	byRead := chunksOf(t, db, abortLargePut(t, db, "r", patterned(2*chunkSize, 2)))
	left := chunksOf(t, db, abortLargePut(t, db, "v", patterned(2*chunkSize, 3)))
	if len(byUpdate) != 2 || len(byRead) != 2 || len(left) != 2 {
		t.Fatalf("chunks %v, %v and %v; want two of each value", byUpdate, byRead, left)
	}
	before := db.Stats()
	for _, c := range byUpdate {
		pruneBlockByForTest(t, db, c.Block, pruneByUpdate)
	}
	pruneBlockByForTest(t, db, byRead[0].Block, pruneByRead)
	h := db.Stats().Sub(before).Heap
	if h.PrunesByUpdate != 2 || h.ChunksPrunedByUpdate != 2 || h.PrunedByUpdate != 0 ||
		h.PrunesByRead != 1 || h.ChunksPrunedByRead != 1 || h.PrunedByRead != 0 {
		t.Errorf("after two prunes by update and one by read: %+v; want 2 pages and 2 chunks, then 1 page and 1 chunk, no versions", h)
	}
	st := mustVacuum(t, db)
	// The chunks left: one of "r" and both of "v".
	if s := db.Stats(); st.ChunksRemoved != 3 || s.Vacuum.ChunksRemoved != 3 || s.Heap.ChunksPrunedByUpdate != 2 || s.Heap.ChunksPrunedByRead != 1 {
		t.Errorf("vacuum freed %d chunks; Stats: vacuum %d, pruning by updates %d and by reads %d; want 3, 3, 2 and 1",
			st.ChunksRemoved, s.Vacuum.ChunksRemoved, s.Heap.ChunksPrunedByUpdate, s.Heap.ChunksPrunedByRead)
	}
}
