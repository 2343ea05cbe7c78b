package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// tearBlock overwrites the second half of a heap block with garbage, as a
// power loss in the middle of an 8 KiB write can leave it.
func tearBlock(t *testing.T, dir string, blk uint32) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, heapDir, "00000000"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := []byte(strings.Repeat("torn!", heap.PageSize/10))[:heap.PageSize/2]
	if _, err := f.WriteAt(junk, int64(blk)*heap.PageSize+heap.PageSize/2); err != nil {
		t.Fatal(err)
	}
}

// A page torn after the first change following a checkpoint is rebuilt
// from its full-page image; a torn page that redo does not touch is
// reported, naming the file and block, when it is read.
func TestFullPageImageRepairsTornPage(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{CheckpointTimeout: -1})
	for i := 0; i < 400; i++ {
		mustPut(t, db, fmt.Sprintf("k%04d", i), strings.Repeat("v", 60))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	before := db.Stats().Checkpoint.FullPageImages
	mustPut(t, db, "k0000", "changed after the checkpoint")
	if db.Stats().Checkpoint.FullPageImages == before {
		t.Fatal("first change after a checkpoint logged no full-page image")
	}
	changed := db.idx.get([]byte("k0000")).headTID().Block
	untouched := db.idx.get([]byte("k0399")).headTID().Block
	if changed == untouched {
		t.Fatalf("test needs two different blocks, both are %d", changed)
	}
	// Write every page out (as evictions would), so the copy has them.
	if err := db.pool.FlushAll(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	db.Close()

	tearBlock(t, crash, changed)
	db2 := openTest(t, crash, Options{})
	if v, ok := get(t, db2, "k0000"); !ok || v != "changed after the checkpoint" {
		t.Fatalf("k0000 after repair = %q %v", v, ok)
	}
	// Open's background scan reads the torn copy on disk, but the page
	// redo rebuilt is the one in the buffer pool: no damage.
	db2.waitOpenScan()
	if d := db2.Damage(); d.DamagedPages != 0 || d.CorruptPages != 0 {
		t.Fatalf("a torn page redo rebuilt is reported as damage: %+v", d)
	}
	db2.Close()

	crash2 := t.TempDir()
	copyDir(t, dir, crash2)
	tearBlock(t, crash2, untouched)
	db3, err := Open(crash2, Options{SharedBuffers: 4 << 20})
	if err == nil {
		_, err = func() ([]byte, error) {
			defer db3.Close()
			tx, _ := db3.Begin(context.Background(), TxnOptions{})
			defer tx.Rollback()
			return tx.Get([]byte("k0399"))
		}()
	}
	if !errors.Is(err, ErrCorruption) && !errors.Is(err, heap.ErrCorrupt) {
		t.Fatalf("reading a torn page: %v, want a corruption error", err)
	}
	if !strings.Contains(err.Error(), "00000000") || !strings.Contains(err.Error(), fmt.Sprint(untouched)) {
		t.Fatalf("corruption error does not name the file and block: %v", err)
	}
}
