package engine

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	loadTPCB(t, dir)
	db := openTest(t, dir, Options{})
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 100; i++ {
		if _, _, err := tpcbTxn(context.Background(), db, r, 0, i, 1); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, db, "big", strings.Repeat("x", 100000))
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Tuples == 0 {
		t.Fatalf("verify of a healthy database:\n%s", rep)
	}
	// A wrong index entry is found.
	e := db.idx.get([]byte("a:0001"))
	good := e.head.Load()
	e.head.Store(heap.TID{Block: 0, Slot: 0}.Pack())
	rep, _ = db.Verify()
	if rep.OK() || !strings.Contains(rep.String(), "a:0001") {
		t.Fatalf("verify missed a wrong index entry:\n%s", rep)
	}
	e.head.Store(good)
	db.Close()
}

// walDescriptions describes every record of the WAL of data directory dir,
// one per line, as waldump prints them.
func walDescriptions(t *testing.T, fsys vfs.FS, dir string) string {
	t.Helper()
	r, err := wal.NewReader(fsys, filepath.Join(dir, walDir), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b strings.Builder
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(describeRecord(rec) + "\n")
	}
}
