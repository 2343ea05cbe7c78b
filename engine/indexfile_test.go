package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// indexTestDB opens a database on a fresh MemFS.
func indexTestDB(t *testing.T) (*vfs.MemFS, *DB) {
	t.Helper()
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return m, db
}

// indexHeads returns every key of the index with a version and its head.
func indexHeads(db *DB) map[string]heap.TID {
	out := map[string]heap.TID{}
	db.idx.mu.RLock()
	defer db.idx.mu.RUnlock()
	db.idx.tree.Ascend(func(e *indexEntry) bool {
		if tid := e.headTID(); tid.Valid() {
			out[e.key()] = tid
		}
		return true
	})
	return out
}

// randomWork runs n random transactions over keys: puts (some out of
// line), deletes and rollbacks, with a vacuum now and then.
func randomWork(t *testing.T, db *DB, rng *rand.Rand, n, keys int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 1 + rng.IntN(3) {
			k := []byte(fmt.Sprintf("key-%04d", rng.IntN(keys)))
			switch r := rng.IntN(20); {
			case r == 0:
				err = tx.Put(k, bytes.Repeat([]byte{byte(i)}, 9000))
			case r < 4:
				err = tx.Delete(k)
			default:
				err = tx.Put(k, []byte(fmt.Sprintf("v%d", i)))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(10) == 0 {
			err = tx.Rollback()
		} else {
			err = tx.Commit()
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%97 == 50 {
			if _, err := db.Vacuum(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestIndexFileOpen: after a clean shutdown Open loads the index from the
// index file (no heap scan) and finds every key; with the file missing,
// damaged, from an older checkpoint, of another format version or from
// another database, it rebuilds from the heap, says why, reaches the same
// state, and writes a new file that the next Open uses.
func TestIndexFileOpen(t *testing.T) {
	m, db := indexTestDB(t)
	rng := rand.New(rand.NewPCG(1, 2))
	randomWork(t, db, rng, 300, 200)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	old, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	randomWork(t, db, rng, 300, 200)
	want, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	other, odb := indexTestDB(t)
	randomWork(t, odb, rand.New(rand.NewPCG(3, 4)), 50, 20)
	if err := odb.Close(); err != nil {
		t.Fatal(err)
	}
	foreign, err := readMemFile(other, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	good, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}

	open := func(fs *vfs.MemFS) (*DB, ladderState) {
		t.Helper()
		db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		st, err := scanState(db)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := db.Verify()
		if err != nil || !rep.OK() {
			t.Fatalf("verify: %v %v", err, rep.Problems)
		}
		return db, st
	}
	db, got := open(m.Clone())
	if ri := db.Recovery(); !ri.IndexFromFile || ri.IndexKeys == 0 {
		t.Fatalf("clean reopen: %+v, want the index from the file", ri)
	}
	db.Close()
	if !maps.Equal(got, want) {
		t.Fatalf("clean reopen: %s", diffState(got, want))
	}

	versioned := bytes.Clone(good)
	binary.LittleEndian.PutUint32(versioned[8:], indexFileVersion+1)
	for _, c := range []struct {
		name   string
		file   []byte // nil: removed
		reason string
	}{
		{"missing", nil, "does not exist"},
		// A flipped bit in the body: whatever decoding then meets (a
		// key out of order, a head past the heap), the checksum says
		// the file is damaged, and that is the reason given.
		// A checksum says that some byte is wrong, not which: the file
		// is named from its start, as a damaged control file is, and
		// the stored checksum's own offset is given as such.
		{"damaged", func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 0x40; return b }(), "/db/index offset 0: the file is damaged: checksum over its"},
		{"damaged body", func() []byte { b := bytes.Clone(good); b[indexHeaderSize] ^= 0x40; return b }(), "/db/index offset 0: the file is damaged: checksum over its"},
		// A body that does not decode under a checksum that holds (a
		// writer's bug, not damage): what decoding met is the reason.
		{"bytes after the last entry", func() []byte {
			b := append(bytes.Clone(good[:len(good)-4]), 0, 0, 0)
			sum := crc32.Update(crc32.Checksum(b[indexHeaderSize:], castagnoli), castagnoli, b[:indexHeaderSize])
			return binary.LittleEndian.AppendUint32(b, sum)
		}(), "7 bytes follow the last entry, want 4"},
		{"checksum", func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 0x40; return b }(), fmt.Sprintf("/db/index offset 0: the file is damaged: checksum over its %d bytes: stored", len(good))},
		{"truncated", good[:len(good)-3], "offset"},
		{"older checkpoint", old, "belongs to the checkpoint"},
		{"other version", versioned, "format version"},
		{"other database", foreign, "belongs to the database with system identifier"},
		// Built the same way, the other database's file would name the
		// same checkpoint: only the system identifier tells it apart.
		{"other database, same checkpoint", headerChanged(good, 64, 1), "belongs to the database with system identifier"},
		// A copy of this database written differently reaches a
		// checkpoint at the same LSN: only the identifier differs.
		{"a copy's, same checkpoint", headerChanged(good, 72, 2), "written by a copy of this database"},
		{"empty", []byte{}, "shorter than a header"},
		// A flipped bit in the header, not recomputed into the checksum:
		// the file is damaged, whatever the header then seems to say.
		{"header bit in the redo point", flipped(good, 20), "/db/index offset 0: the file is damaged: checksum over its"},
		{"header bit in the checkpoint", flipped(good, 30), "the file is damaged: checksum"},
		{"header bit in the system identifier", flipped(good, 66), "the file is damaged: checksum"},
		{"header bit in the key count", flipped(good, 38), "the file is damaged: checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := m.Clone()
			if c.file == nil {
				if err := fs.Remove("/db/index"); err != nil {
					t.Fatal(err)
				}
			} else if err := writeMemFile(fs, "/db/index", c.file); err != nil {
				t.Fatal(err)
			}
			db, got := open(fs)
			ri := db.Recovery()
			db.Close()
			if ri.IndexFromFile || !strings.Contains(ri.IndexRebuildReason, c.reason) {
				t.Fatalf("recovery %+v: want a rebuild because %q", ri, c.reason)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("after a rebuild: %s", diffState(got, want))
			}
			db, got = open(fs)
			ri = db.Recovery()
			db.Close()
			if !ri.IndexFromFile || !maps.Equal(got, want) {
				t.Fatalf("the open after a rebuild: %+v, %s", ri, diffState(got, want))
			}
		})
	}
}

// TestIndexFileMatchesRebuild runs random workloads with vacuums and
// checkpoints, crashes at random moments (a crash copy dropping what was
// not synced), and opens each copy twice: with its index file, and with
// the file removed so that the index is rebuilt from the heap. Both must
// give the same keys and values, and the loaded index must verify.
func TestIndexFileMatchesRebuild(t *testing.T) {
	seed := testSeed(t, 0)
	rng := rand.New(rand.NewPCG(seed, 9))
	m, db := indexTestDB(t)
	defer db.Close()
	for round := range 12 {
		randomWork(t, db, rng, 40+rng.IntN(80), 60)
		if rng.IntN(3) == 0 {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		crashed := m.CrashCopy(vfs.DropUnsynced, nil)
		rebuilt := crashed.Clone()
		if err := rebuilt.Remove("/db/index"); err != nil {
			t.Fatalf("seed %d round %d: no index file: %v", seed, round, err)
		}
		var states [2]ladderState
		for i, fs := range []*vfs.MemFS{crashed, rebuilt} {
			cdb, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
			if err != nil {
				t.Fatalf("seed %d round %d: open: %v", seed, round, err)
			}
			if ri := cdb.Recovery(); ri.IndexFromFile != (i == 0) {
				t.Fatalf("seed %d round %d: copy %d: %+v", seed, round, i, ri)
			}
			if states[i], err = scanState(cdb); err != nil {
				t.Fatal(err)
			}
			rep, err := cdb.Verify()
			if err != nil || !rep.OK() {
				t.Fatalf("seed %d round %d: copy %d: verify: %v %v", seed, round, i, err, rep.Problems)
			}
			cdb.Close()
		}
		if !maps.Equal(states[0], states[1]) {
			t.Fatalf("seed %d round %d: loaded index and heap rebuild differ: %s", seed, round, diffState(states[0], states[1]))
		}
	}
}

// TestIndexFileHeadsAfterVacuum: the heads vacuum moves and the keys it
// drops reach the index file's readers through the WAL: a crash right
// after a vacuum that removed deleted keys and aborted heads, with the
// index file of the checkpoint before it, reopens with the same heads as
// the index in memory had.
func TestIndexFileHeadsAfterVacuum(t *testing.T) {
	m, db := indexTestDB(t)
	defer db.Close()
	ctx := context.Background()
	for i := range 50 {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte(fmt.Sprintf("k%02d", i)), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		k := []byte(fmt.Sprintf("k%02d", i))
		switch i % 3 {
		case 0:
			if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete(k) }); err != nil {
				t.Fatal(err)
			}
		case 1:
			tx, err := db.Begin(ctx, TxnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Put(k, []byte("rolled back")); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := db.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.KeysRemoved == 0 {
		t.Fatalf("vacuum removed no key: %+v", st)
	}
	want := indexHeads(db)
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	if !cdb.Recovery().IndexFromFile {
		t.Fatalf("recovery %+v: want the index file", cdb.Recovery())
	}
	if got := indexHeads(cdb); !maps.Equal(got, want) {
		t.Fatalf("heads after recovery %v, in memory before the crash %v", got, want)
	}
}

// FuzzDecodeIndexFile: the decoder never panics, bounds every length by
// the file, and what it accepts has keys in strictly increasing order.
func FuzzDecodeIndexFile(f *testing.F) {
	m, db := indexTestDBForFuzz()
	if db != nil {
		for i := range 20 {
			_ = db.Update(context.Background(), func(tx *Txn) error {
				return tx.Put([]byte(fmt.Sprintf("key-%03d", i*7)), []byte("v"))
			})
		}
		// A file with vacuum's debt (entries that match nothing: Close
		// drops them, so the file is taken at a checkpoint before).
		db.vac.debt.add([]chunkID{{heap.TID{Block: 0, Slot: 3}, 5}, {heap.TID{Block: 0, Slot: 3}, 6}})
		if db.Checkpoint() == nil {
			if b, err := readMemFile(m, "/db/index"); err == nil {
				f.Add(b)
			}
		}
		_ = db.Close()
		if b, err := readMemFile(m, "/db/index"); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add(make([]byte, indexHeaderSize+4))
	f.Fuzz(func(t *testing.T, b []byte) {
		ix := newIndex()
		d, err := decodeIndexFile(bytes.NewReader(b), int64(len(b)), "index", ix, 1<<20, 0, nil, nil)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
			return
		}
		if len(d.debt) != int(d.hdr.debtChunks) {
			t.Fatalf("%d chunks of vacuum's debt decoded, the header says %d", len(d.debt), d.hdr.debtChunks)
		}
		for _, c := range d.debt {
			if c.tid.Block == noBlock || int(c.tid.Slot) >= maxSlotsPerPage {
				t.Fatalf("debt chunk %s is not a heap slot", c.tid)
			}
		}
		prev := ""
		i := 0
		ix.tree.Ascend(func(e *indexEntry) bool {
			if i > 0 && e.key() <= prev {
				t.Fatalf("keys out of order: %q after %q", e.key(), prev)
			}
			prev, i = e.key(), i+1
			return true
		})
	})
}

func indexTestDBForFuzz() (*vfs.MemFS, *DB) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		return nil, nil
	}
	db, err := Open("/db", Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 1 << 20})
	if err != nil {
		return nil, nil
	}
	return m, db
}

// TestIndexFileNamesOnlyDurableVersions: writers with asynchronous commits
// run while checkpoints write the index file; a crash copy taken right
// after each checkpoint (what was not synced dropped) must open and read
// every key. An index file made durable before the WAL records of the
// heads it names would name versions no page holds after the crash.
func TestIndexFileNamesOnlyDurableVersions(t *testing.T) {
	m, db := indexTestDB(t)
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	off := SyncCommitOff
	done := make(chan struct{})
	for w := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; ctx.Err() == nil; i++ {
				tx, err := db.Begin(ctx, TxnOptions{SynchronousCommit: &off})
				if err != nil {
					return
				}
				_ = tx.Put([]byte(fmt.Sprintf("w%d-%03d", w, i%300)), []byte(fmt.Sprintf("v%d", i)))
				if tx.Commit() != nil {
					return
				}
			}
		}()
	}
	for round := range 15 {
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		c := m.CrashCopy(vfs.DropUnsynced, nil)
		cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		if _, err := scanState(cdb); err != nil {
			t.Fatalf("round %d: scan after the crash (index from file %v): %v", round, cdb.Recovery().IndexFromFile, err)
		}
		cdb.Close()
	}
	cancel()
	<-done
	<-done
}

// TestControlFileVersion1: a directory whose control file predates the
// system identifier opens, rebuilds its index once (its index file cannot
// prove it is of this database), and from the next checkpoint on has an
// identifier that its index file carries.
func TestControlFileVersion1(t *testing.T) {
	m, db := indexTestDB(t)
	randomWork(t, db, rand.New(rand.NewPCG(5, 6)), 100, 50)
	want, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ctrl, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	v1 := ctrl.encode()[:controlSizeV1-4]
	binary.LittleEndian.PutUint32(v1[8:], 1)
	v1 = binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, castagnoli))
	if err := writeMemFile(m, "/db/control", v1); err != nil {
		t.Fatal(err)
	}
	opts := Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	for i, fromFile := range []bool{false, true} {
		db, err := Open("/db", opts)
		if err != nil {
			t.Fatal(err)
		}
		ri := db.Recovery()
		got, err := scanState(db)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if ri.IndexFromFile != fromFile {
			t.Fatalf("open %d: index from file %v (%s), want %v", i, ri.IndexFromFile, ri.IndexRebuildReason, fromFile)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("open %d: %s", i, diffState(got, want))
		}
		c, _, err := readControl(m, "/db")
		if err != nil || c.SystemID == 0 {
			t.Fatalf("open %d: control %+v, %v: want a system identifier", i, c, err)
		}
	}
}

// headerChanged returns a copy of the index file b with the header's
// 8-byte field at off increased by d and the checksum made right again.
// flipped returns a copy of b with a bit of byte off flipped.
func flipped(b []byte, off int) []byte {
	b = bytes.Clone(b)
	b[off] ^= 0x01
	return b
}

func headerChanged(b []byte, off int, d uint64) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint64(b[off:], binary.LittleEndian.Uint64(b[off:])+d)
	body := b[indexHeaderSize : len(b)-4]
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Update(crc32.Checksum(body, castagnoli), castagnoli, b[:indexHeaderSize]))
	return b
}

// TestIndexFileOfACopy: two copies of one directory, written differently
// but with records of the same sizes, reach a checkpoint at the same LSN
// with the same redo point, so that their control files are byte for byte
// the same. One copy must still refuse the other's index file (whose
// heads point at slots holding other versions here) and rebuild.
func TestIndexFileOfACopy(t *testing.T) {
	m, db := indexTestDB(t)
	mustPut(t, db, "k1", "v0")
	mustPut(t, db, "k2", "v0")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	opts := Options{CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	write := func(fs *vfs.MemFS, key string) {
		t.Helper()
		o := opts
		o.FS = fs
		db, err := Open("/db", o)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, db, key, "v1")
		mustPut(t, db, key, "v2")
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	e1, e2 := m.Clone(), m.Clone()
	write(e1, "k1")
	write(e2, "k2")
	c1, err := readMemFile(e1, "/db/control")
	if err != nil {
		t.Fatal(err)
	}
	c2, err := readMemFile(e2, "/db/control")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1, c2) {
		t.Fatalf("the copies' control files differ, so the test does not test the case:\n%x\n%x", c1, c2)
	}
	other, err := readMemFile(e2, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMemFile(e1, "/db/index", other); err != nil {
		t.Fatal(err)
	}
	o := opts
	o.FS = e1
	db, err = Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ri := db.Recovery()
	if ri.IndexFromFile || !strings.Contains(ri.IndexRebuildReason, "written by a copy of this database") {
		t.Fatalf("recovery %+v: want a rebuild because the file is a copy's", ri)
	}
	got, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ladderState{"k1": "v2", "k2": "v0"}); !maps.Equal(got, want) {
		t.Fatalf("after the rebuild: %s", diffState(got, want))
	}
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
}

// TestOpenRemovesLeftoverTempFiles: a crash while the control file or the
// index file was being replaced leaves its temporary file; Open removes
// both, and the database opens with what the real files say.
func TestOpenRemovesLeftoverTempFiles(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{})
	mustPut(t, db, "k", "v")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{controlTmpName, indexFileTmpName} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("half written"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db = openTest(t, dir, Options{})
	defer db.Close()
	for _, n := range []string{controlTmpName, indexFileTmpName} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Open: %v; want it removed", n, err)
		}
	}
	if v, ok := get(t, db, "k"); !ok || v != "v" {
		t.Fatalf("k = %q, %v after Open; want v", v, ok)
	}
}

// TestIndexFileOlderFormatOrDamagedVersion: a file of an older format
// version (its shorter header, its checksum) is refused as that; the
// current file with one bit of its version field flipped (3 reads as 2 or
// 1) is refused as damaged, as a flipped bit anywhere else in the header
// is. Both are rebuilt from the heap.
func TestIndexFileOlderFormatOrDamagedVersion(t *testing.T) {
	m, db := indexTestDB(t)
	mustPut(t, db, "k1", "v1")
	mustPut(t, db, "k2", "v2")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	// The same keys in version 2's layout: a 72-byte header.
	v2head := bytes.Clone(good[:72])
	binary.LittleEndian.PutUint32(v2head[8:], 2)
	body := good[indexHeaderSize : len(good)-4]
	v2 := append(append(v2head, body...), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(v2[len(v2)-4:], crc32.Update(crc32.Checksum(body, castagnoli), castagnoli, v2head))

	for _, c := range []struct {
		name    string
		file    []byte
		damaged bool
	}{
		{"version 2", v2, false},
		{"version field 3 flipped to 2", func() []byte { b := bytes.Clone(good); b[8] ^= 0x01; return b }(), true},
		{"version field 3 flipped to 1", func() []byte { b := bytes.Clone(good); b[8] ^= 0x02; return b }(), true},
	} {
		fs := m.Clone()
		if err := writeMemFile(fs, "/db/index", c.file); err != nil {
			t.Fatal(err)
		}
		db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		ri := db.Recovery()
		got, _ := get(t, db, "k2")
		db.Close()
		if ri.IndexFromFile || got != "v2" {
			t.Errorf("%s: index from the file %v, k2 = %q; want a rebuild and v2", c.name, ri.IndexFromFile, got)
		}
		damaged := strings.Contains(ri.IndexRebuildReason, "the file is damaged")
		if damaged != c.damaged || !strings.Contains(ri.IndexRebuildReason, "format version") {
			t.Errorf("%s: rebuild reason %q; want the file reported as damaged: %v", c.name, ri.IndexRebuildReason, c.damaged)
		}
	}
}

// TestIndexFileDamagedAfterBulkLoad: a crash between the bulk load's
// checkpoint writing the index file and writing the control file leaves
// that checkpoint's file beside the previous control file, and it is used.
// A flipped bit in its redo point that makes the load seem to come after
// it is damage, reported with the file's name and offset, not blamed on
// the bulk load.
func TestIndexFileDamagedAfterBulkLoad(t *testing.T) {
	m, db := indexTestDB(t)
	ctrl0, err := readMemFile(m, "/db/control")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.BulkLoad(context.Background(), bulkRows(500, 100)); err != nil {
		t.Fatal(err)
	}
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()
	if err := writeMemFile(c, "/db/control", ctrl0); err != nil {
		t.Fatal(err)
	}
	good, err := readMemFile(c, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	open := func(file []byte) (RecoveryInfo, int) {
		t.Helper()
		fs := c.Clone()
		if err := writeMemFile(fs, "/db/index", file); err != nil {
			t.Fatal(err)
		}
		db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		st, err := scanState(db)
		if err != nil {
			t.Fatal(err)
		}
		return db.Recovery(), len(st)
	}
	if ri, n := open(good); !ri.IndexFromFile || n != 500 {
		t.Fatalf("undamaged: from the file %v (%q), %d keys; want the file used and 500 keys", ri.IndexFromFile, ri.IndexRebuildReason, n)
	}
	// Clear the redo point's highest set bit: it reads lower, before the
	// load's commit.
	b := bytes.Clone(good)
	redo := binary.LittleEndian.Uint64(b[16:])
	binary.LittleEndian.PutUint64(b[16:], redo&^(1<<(63-bits.LeadingZeros64(redo))))
	ri, n := open(b)
	if ri.IndexFromFile || n != 500 {
		t.Fatalf("damaged redo point: from the file %v, %d keys; want a rebuild and 500 keys", ri.IndexFromFile, n)
	}
	if !strings.Contains(ri.IndexRebuildReason, "the file is damaged") || !strings.Contains(ri.IndexRebuildReason, "/db/index offset") {
		t.Errorf("damaged redo point: rebuild reason %q; want the file reported as damaged, with its name and offset", ri.IndexRebuildReason)
	}
}

// TestIndexFileReplaysIndexHeadRecords: vacuum's head changes reach the
// index Open loads from the index file and the WAL after it, whether one
// INDEX_HEADS record carries a page's changes or, in a WAL written before
// that record existed, an INDEX_HEAD record each, which Open still
// applies. The records are written as vacuum writes them, before the
// page's pruning record, and the crash comes before that record: one key's
// head moves off its rolled-back version to the committed one below, and
// another key, deleted, leaves the index.
func TestIndexFileReplaysIndexHeadRecords(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "INDEX_HEADS"
		if old {
			name = "INDEX_HEAD"
		}
		t.Run(name, func(t *testing.T) { replayIndexHeadRecords(t, old) })
	}
}

func replayIndexHeadRecords(t *testing.T, old bool) {
	m, db := indexTestDB(t)
	defer db.Close()
	ctx := context.Background()
	for _, k := range []string{"kept", "moved", "dropped"} {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte(k), []byte("v "+k)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	below := db.idx.get([]byte("moved")).headTID()
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("moved"), []byte("rolled back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Delete([]byte("dropped")) }); err != nil {
		t.Fatal(err)
	}
	if got := db.idx.get([]byte("moved")).headTID(); got == below {
		t.Fatalf("the rolled-back put left the head at %v; the test needs it moved", got)
	}
	changes := []headChange{{[]byte("moved"), below}, {[]byte("dropped"), heap.InvalidTID}}
	if old {
		for _, c := range changes {
			if _, _, err := db.wal.Insert(recIndexHead, 0, encodeIndexHead(c.key, c.head)); err != nil {
				t.Fatal(err)
			}
		}
	} else if _, _, err := db.wal.Insert(recIndexHeads, 0, encodeIndexHeads(changes)); err != nil {
		t.Fatal(err)
	}
	// A synchronous commit after them makes them durable.
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("after"), []byte("v after")) }); err != nil {
		t.Fatal(err)
	}
	want := indexHeads(db)
	want["moved"] = below
	delete(want, "dropped")
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	if !cdb.Recovery().IndexFromFile {
		t.Fatalf("recovery %+v: want the index file", cdb.Recovery())
	}
	if got := indexHeads(cdb); !maps.Equal(got, want) {
		t.Fatalf("heads after recovery %v, want %v", got, want)
	}
	if e := cdb.idx.get([]byte("dropped")); e != nil {
		t.Fatalf("the dropped key is still in the index, head %v", e.headTID())
	}
	if rep, err := cdb.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	st, err := scanState(cdb)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ladderState{"kept": "v kept", "moved": "v moved", "after": "v after"}); !maps.Equal(st, want) {
		t.Fatalf("after recovery the keys are %v, want %v", st, want)
	}
}

// TestIndexFileNeedsWALPastCheckpoint: the index file is read after its
// checkpoint's record, so it can name versions of records after it (here
// written by hand, as a checkpoint whose writers went on while it read the
// index would). With the WAL from the first such record on lost (cut to
// zeros, as a WAL that ended there), the file's heads name versions no page
// holds and no record replays: Open must not use the file, rebuild from the
// heap, and read the keys as the log left them.
func TestIndexFileNeedsWALPastCheckpoint(t *testing.T) {
	m, db := indexTestDB(t)
	for i := range 20 {
		mustPut(t, db, fmt.Sprintf("k%02d", i), "v0")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	ctrl, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	cut := db.wal.InsertLSN()
	mustPut(t, db, "late", "v1")
	mustPut(t, db, "k03", "v1")
	if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Delete([]byte("k04")) }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.writeIndexFile(ctrl.RedoLSN, ctrl.CheckpointLSN, db.ckptID.Load()); err != nil {
		t.Fatal(err)
	}
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()
	name, off := wal.SegmentFile(cut, db.opts.WALSegmentSize)
	seg := filepath.Join("/db", walDir, name)
	b, err := readMemFile(c, seg)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[off:])
	if err := writeMemFile(c, seg, b); err != nil {
		t.Fatal(err)
	}
	c2 := c.Clone()
	for i, fromFile := range []bool{false, true} {
		cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		ri := cdb.Recovery()
		st, err := scanState(cdb)
		if err != nil {
			cdb.Close()
			t.Fatalf("open %d (index from the file %v): %v", i, ri.IndexFromFile, err)
		}
		rep, verr := cdb.Verify()
		cdb.Close()
		if ri.IndexFromFile != fromFile || (!fromFile && !strings.Contains(ri.IndexRebuildReason, "the log ends at")) {
			t.Fatalf("open %d: index from the file %v (%q), want %v", i, ri.IndexFromFile, ri.IndexRebuildReason, fromFile)
		}
		if len(st) != 20 || st["k03"] != "v0" || st["k04"] != "v0" || st["late"] != "" {
			t.Fatalf("open %d: %d keys, k03 %q, k04 %q, late %q: want the 20 keys as the checkpoint left them", i, len(st), st["k03"], st["k04"], st["late"])
		}
		if verr != nil || !rep.OK() {
			t.Fatalf("open %d: verify: %v %v", i, verr, rep.Problems)
		}
	}
	// The log written after such an Open takes the LSNs of the lost
	// records, and soon reaches as far as the file said its heads need:
	// a crash then must not find the file usable again. (Open's rebuild
	// ends with a checkpoint, before any write, that replaces the file.)
	cdb, err := Open("/db", Options{FS: c2, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		mustPut(t, cdb, fmt.Sprintf("after%d", i), "v2")
	}
	crashed := c2.CrashCopy(vfs.DropUnsynced, nil)
	cdb.Close()
	cdb, err = Open("/db", Options{FS: crashed, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	st, err := scanState(cdb)
	if err != nil {
		t.Fatalf("after a crash with the log past the file's need (index from the file %v): %v", cdb.Recovery().IndexFromFile, err)
	}
	if len(st) != 30 || st["k03"] != "v0" || st["after9"] != "v2" {
		t.Fatalf("after a crash with the log past the file's need: %d keys, k03 %q, after9 %q; want 30", len(st), st["k03"], st["after9"])
	}
}

// TestIndexFileEveryByteDamaged: the index file with a byte changed at
// each offset (three patterns: the low bit, the high bit, every bit), cut
// short at each length, and with 1 to 100 bytes of garbage after it. Each
// Open must refuse the file, naming it, rebuild from the heap, and read
// every key with its value, with index-only Count agreeing; a sample of
// them also verifies. By default the header's every byte and one offset
// in 16 of the rest are tried (one in 4 and one in 64 under -race);
// -crash.sample=N tries one in N of both, every offset and length with 1.
func TestIndexFileEveryByteDamaged(t *testing.T) {
	stride, headStride := 16, 1
	if raceEnabled {
		stride, headStride = 64, 4
	}
	if *ladderSample > 0 {
		stride, headStride = *ladderSample, *ladderSample
	}
	m, db := indexTestDB(t)
	randomWork(t, db, rand.New(rand.NewPCG(11, 12)), 150, 80)
	want, err := scanState(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeIndexFile(bytes.NewReader(good), int64(len(good)), "index", newIndex(), 1<<20, 0, nil, nil)
	if err != nil || d.hdr.keys == 0 || d.hdr.fsmBlocks == 0 {
		t.Fatalf("the file does not hold keys and free space entries to damage: %+v, %v", d.hdr, err)
	}
	opens := 0
	try := func(what string, b []byte) {
		t.Helper()
		fs := m.Clone()
		if err := writeMemFile(fs, "/db/index", b); err != nil {
			t.Fatal(err)
		}
		db, err := Open("/db", Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20})
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		defer db.Close()
		opens++
		if ri := db.Recovery(); ri.IndexFromFile || !strings.Contains(ri.IndexRebuildReason, "/db/index") {
			t.Fatalf("%s: index from the file %v (%q); want a rebuild that names the file", what, ri.IndexFromFile, ri.IndexRebuildReason)
		}
		got, err := scanState(db)
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("%s: %v %s", what, err, diffState(got, want))
		}
		if _, n := countKeys(nil, db); n != len(want) {
			t.Fatalf("%s: index-only Count says %d keys, want %d", what, n, len(want))
		}
		if opens%50 == 1 {
			if rep, err := db.Verify(); err != nil || !rep.OK() {
				t.Fatalf("%s: verify: %v %v", what, err, rep.Problems)
			}
		}
	}
	for off := range good {
		if off < indexHeaderSize && off%headStride != 0 || off >= indexHeaderSize && off%stride != 0 && off != len(good)-1 {
			continue
		}
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(good)
			b[off] ^= x
			try(fmt.Sprintf("byte %d of %d xor %#x", off, len(good), x), b)
		}
	}
	for n := 0; n < len(good); n++ {
		if n%stride == 0 || n == len(good)-1 {
			try(fmt.Sprintf("cut to %d of %d bytes", n, len(good)), good[:n])
		}
	}
	for n := 1; n <= 100; n++ {
		if n%stride == 0 || n <= 4 {
			g := make([]byte, n)
			for i := range g {
				g[i] = byte(n + i*37)
			}
			try(fmt.Sprintf("%d bytes appended", n), append(bytes.Clone(good), g...))
		}
	}
	t.Logf("file of %d bytes (%d keys, %d free space entries): %d damaged copies opened", len(good), d.hdr.keys, d.hdr.fsmBlocks, opens)
}

// TestIndexFileOfABackup: a backup's index file and its source's, each
// put in the other's place after both went on writing (and checkpointing)
// on their own. The copy shares the source's system identifier and its
// past, so only the checkpoint each file names tells them apart: every
// swap must rebuild from the heap and read each key as that directory
// wrote it, as must the source with the file it had when the backup was
// taken.
func TestIndexFileOfABackup(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	opts := Options{FS: m, CheckpointTimeout: -1, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20}
	db, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 22))
	randomWork(t, db, rng, 150, 60)
	if _, err := db.Backup(context.Background(), "/backup"); err != nil {
		t.Fatal(err)
	}
	atBackup, err := readMemFile(m, "/db/index")
	if err != nil {
		t.Fatal(err)
	}
	// Each goes on: the same keys written differently, a checkpoint
	// each, and more writes after it (replayed over the file).
	dirs := []string{"/db", "/backup"}
	want := map[string]ladderState{}
	files := map[string][]byte{}
	for i, dir := range dirs {
		o := opts
		if i > 0 {
			if db, err = Open(dir, o); err != nil {
				t.Fatal(err)
			}
		}
		randomWork(t, db, rand.New(rand.NewPCG(uint64(i), 23)), 60, 60)
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		randomWork(t, db, rand.New(rand.NewPCG(uint64(i), 24)), 30, 60)
		if want[dir], err = scanState(db); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if files[dir], err = readMemFile(m, dir+"/index"); err != nil {
			t.Fatal(err)
		}
	}
	if maps.Equal(want["/db"], want["/backup"]) {
		t.Fatal("the source and its copy hold the same keys, so the test does not test the case")
	}
	for _, c := range []struct {
		dir  string
		file []byte
		what string
	}{
		{"/db", files["/backup"], "the copy's file"},
		{"/backup", files["/db"], "the source's file"},
		{"/backup", atBackup, "the file the source had when the copy was taken"},
		{"/db", atBackup, "the file it had when the copy was taken"},
	} {
		fs := m.Clone()
		if err := writeMemFile(fs, c.dir+"/index", c.file); err != nil {
			t.Fatal(err)
		}
		o := opts
		o.FS = fs
		db, err := Open(c.dir, o)
		if err != nil {
			t.Fatalf("%s with %s: %v", c.dir, c.what, err)
		}
		ri := db.Recovery()
		got, err := scanState(db)
		if err != nil {
			db.Close()
			t.Fatalf("%s with %s (index from the file %v): %v", c.dir, c.what, ri.IndexFromFile, err)
		}
		rep, verr := db.Verify()
		_, count := countKeys(nil, db)
		db.Close()
		if ri.IndexFromFile || !strings.Contains(ri.IndexRebuildReason, "belongs to the checkpoint") {
			t.Fatalf("%s with %s: index from the file %v (%q), want a rebuild", c.dir, c.what, ri.IndexFromFile, ri.IndexRebuildReason)
		}
		if !maps.Equal(got, want[c.dir]) || count != len(got) {
			t.Fatalf("%s with %s: Count %d, %s", c.dir, c.what, count, diffState(got, want[c.dir]))
		}
		if verr != nil || !rep.OK() {
			t.Fatalf("%s with %s: verify: %v %v", c.dir, c.what, verr, rep.Problems)
		}
	}
}

// TestIndexFileCrashDuringRecovery: a crash copy with redo to do over its
// index file (a checkpoint between two runs of random work) is opened and
// closed, and a power loss is simulated after every file operation of that
// recovery, its end-of-recovery checkpoint (which writes the next index
// file) and its Close, in the three crash modes. Each copy must open with
// every key as before the first crash, verify, and after a clean Close
// open again from its index file. One workload, and one operation in 3
// (8 under -race), by default; -crash.sample=N tries one in N, over
// -crash.seeds workloads.
func TestIndexFileCrashDuringRecovery(t *testing.T) {
	sample := 3
	if raceEnabled {
		sample = 8
	}
	seeds := 1
	if *ladderSample > 0 {
		sample, seeds = *ladderSample, *ladderSeeds
	}
	base := testSeed(t, *ladderSeed)
	opts := func(fs *vfs.MemFS) Options {
		return Options{FS: fs, CheckpointTimeout: -1, SharedBuffers: 2 << 20}
	}
	for s := range seeds {
		seed := base + uint64(s)
		m, db := indexTestDB(t)
		rng := rand.New(rand.NewPCG(seed, 1))
		randomWork(t, db, rng, 100, 60)
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		randomWork(t, db, rng, 100, 60)
		want, err := scanState(db)
		if err != nil {
			t.Fatal(err)
		}
		c := m.CrashCopy(vfs.DropUnsynced, nil)
		db.Close()
		// The operations of one recovery, end-of-recovery checkpoint and
		// Close, counted on a copy.
		probe := c.Clone()
		pdb, err := Open("/db", opts(probe))
		if err != nil {
			t.Fatal(err)
		}
		if pdb.Recovery().Records < 100 || !pdb.Recovery().IndexFromFile {
			t.Fatalf("seed %d: recovery %+v: want redo over the index file", seed, pdb.Recovery())
		}
		pdb.Close()
		n := probe.OpCount() - c.OpCount()
		checked := 0
		for k := int64(1); k <= n; k++ {
			if k%int64(sample) != 0 && k != n {
				continue
			}
			d := c.Clone()
			d.SetCrashAfter(d.OpCount() + k)
			if ddb, err := Open("/db", opts(d)); err == nil {
				ddb.Close()
			}
			cs := d.CrashState()
			if cs == nil {
				// Not every run makes as many operations (the WAL
				// writer and the checkpointer run on their own).
				continue
			}
			for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast, vfs.KeepRandom} {
				cc := cs.CrashCopy(mode, rand.New(rand.NewPCG(seed, uint64(k))))
				for round := range 2 {
					rdb, err := Open("/db", opts(cc))
					if err != nil {
						t.Fatalf("seed %d, crash after operation %d of %d (%v), open %d: %v", seed, k, n, mode, round, err)
					}
					ri := rdb.Recovery()
					got, err := scanState(rdb)
					var rep VerifyReport
					var verr error
					if round == 0 {
						rep, verr = rdb.Verify()
					}
					rdb.Close()
					if err != nil || !maps.Equal(got, want) {
						t.Fatalf("seed %d, crash after operation %d of %d (%v), open %d: %v %s", seed, k, n, mode, round, err, diffState(got, want))
					}
					if verr != nil || !rep.OK() {
						t.Fatalf("seed %d, crash after operation %d of %d (%v): verify: %v %v", seed, k, n, mode, verr, rep.Problems)
					}
					if round == 1 && !ri.IndexFromFile {
						t.Fatalf("seed %d, crash after operation %d of %d (%v): the open after a clean Close rebuilt the index: %s", seed, k, n, mode, ri.IndexRebuildReason)
					}
					checked++
				}
			}
		}
		if checked == 0 {
			t.Fatalf("seed %d: no crash copy checked", seed)
		}
		t.Logf("seed %d: %d operations of recovery and Close, %d opens checked", seed, n, checked)
	}
}

// TestIndexFileRefusedForWALReachStaysRefused: an index file refused
// because the WAL ends before what its heads need stays refused although
// the log grows past that point again. Here each Open's rebuild ends with
// a checkpoint whose record is logged where the lost records were, and
// whose index file cannot be written (ENOSPC on its create), so that Open
// fails and leaves the old file; after enough such Opens the log reaches
// the file's need with other records, and the next Open must still
// rebuild and read the keys as the log left them.
func TestIndexFileRefusedForWALReachStaysRefused(t *testing.T) {
	m, db := indexTestDB(t)
	for i := range 20 {
		mustPut(t, db, fmt.Sprintf("k%02d", i), "v0")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	ctrl, _, err := readControl(m, "/db")
	if err != nil {
		t.Fatal(err)
	}
	cut := db.wal.InsertLSN()
	mustPut(t, db, "late", "v1")
	mustPut(t, db, "k03", "v1")
	if _, _, err := db.writeIndexFile(ctrl.RedoLSN, ctrl.CheckpointLSN, db.ckptID.Load()); err != nil {
		t.Fatal(err)
	}
	need := db.wal.InsertLSN()
	c := m.CrashCopy(vfs.DropUnsynced, nil)
	db.Close()
	name, off := wal.SegmentFile(cut, db.opts.WALSegmentSize)
	seg := filepath.Join("/db", walDir, name)
	b, err := readMemFile(c, seg)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[off:])
	if err := writeMemFile(c, seg, b); err != nil {
		t.Fatal(err)
	}
	ffs := vfs.NewFaultFS(c)
	fault := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpCreate), Base: indexFileTmpName, Err: syscall.ENOSPC})
	// A checkpoint record is 64 bytes: enough failed Opens to carry the
	// log past the file's need.
	for i := range int(need-cut)/64 + 2 {
		if fdb, err := Open("/db", Options{FS: ffs, CheckpointTimeout: -1}); err == nil {
			// Only an Open that used the old file succeeds: the
			// checks below fail it.
			t.Logf("open %d succeeded, from the index file %v", i, fdb.Recovery().IndexFromFile)
			fdb.Close()
			break
		}
	}
	if fault.Fired() == 0 {
		t.Fatal("no index file create failed: the test does not test the case")
	}
	cdb, err := Open("/db", Options{FS: c, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	ri := cdb.Recovery()
	if ri.EndLSN < uint64(need) {
		t.Fatalf("the log ends at %d, before the file's need %d: the test does not test the case", ri.EndLSN, need)
	}
	st, err := scanState(cdb)
	if err != nil {
		t.Fatalf("index from the file %v: %v", ri.IndexFromFile, err)
	}
	if ri.IndexFromFile || len(st) != 20 || st["k03"] != "v0" || st["late"] != "" {
		t.Fatalf("index from the file %v (%q): %d keys, k03 %q, late %q: want a rebuild and the 20 keys as the checkpoint left them",
			ri.IndexFromFile, ri.IndexRebuildReason, len(st), st["k03"], st["late"])
	}
}
