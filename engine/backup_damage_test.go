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
