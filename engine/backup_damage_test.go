package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
)

// TestBackupMeetsDamagedPage damages, on disk, a heap page no buffer
// holds: Backup fails with ErrCorruption naming the file, instead of
// copying the damage on, and leaves no copy.
func TestBackupMeetsDamagedPage(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	ctx := context.Background()
	for i := range 400 {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(fmt.Appendf(nil, "k%04d", i), make([]byte, 300)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	const blk = 12
	f, err := m.Open("/db/heap/00000000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("garbage!"), blk*heap.PageSize+3000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db = openMem(t, m, Options{SharedBuffers: 128 << 10})
	defer db.Close()
	_, err = db.Backup(ctx, "/bk")
	t.Logf("Backup: %v", err)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "/db/heap/00000000") {
		t.Fatalf("Backup over a damaged page: %v, want ErrCorruption naming the file", err)
	}
	checkNoBackupLeft(t, m, "/bk")
}

// TestBackupSourceReadFails fails the reads of the source's heap file
// while Backup copies it: Backup fails naming the file, leaves no copy,
// and the source, whose writes never failed, keeps taking them.
func TestBackupSourceReadFails(t *testing.T) {
	m := vfs.NewMemFS()
	ffs := vfs.NewFaultFS(m)
	db, err := Open("/db", Options{FS: ffs, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 400 {
		mustPut(t, db, fmt.Sprintf("k%04d", i), strings.Repeat("v", 300))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("/db", Options{FS: ffs, SharedBuffers: 128 << 10, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f := ffs.Inject(vfs.Rule{Kinds: vfs.Ops(vfs.OpRead), Contains: "/db/heap/"})
	_, err = db.Backup(ctx, "/bk")
	ffs.Clear()
	if f.Fired() == 0 {
		t.Fatal("no heap read failed")
	}
	if err == nil || !strings.Contains(err.Error(), "/db/heap/00000000") {
		t.Fatalf("Backup with failing heap reads: %v, want an error naming the file", err)
	}
	checkNoBackupLeft(t, m, "/bk")
	if f := db.Failure(); f != nil {
		t.Fatalf("the source stopped taking writes: %v", f)
	}
	mustPut(t, db, "after", "x")
}
