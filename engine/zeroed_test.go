package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// A heap page zeroed below the heap length the last checkpoint recorded
// would read as a new, empty page and its versions would silently vanish.
// Open names the file, offset and block, counts the keys it can prove lost,
// and changes nothing on disk.
func TestZeroedHeapPageIsCorruption(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	const n = 600
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	for i := range n {
		mustPut(t, db, key(i), strings.Repeat("a", 200))
	}
	for i := range n {
		mustPut(t, db, key(i), strings.Repeat("b", 200))
	}
	// The block holding the second, committed version of a key in the
	// middle: its keys' first versions are replaced by an update whose
	// version is on it, and the aborted third versions link into it.
	victim := heap.UnpackTID(db.idx.get([]byte(key(n / 2))).head.Load()).Block
	for i := range n {
		tx, err := db.Begin(context.Background(), TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Put([]byte(key(i)), []byte(strings.Repeat("c", 200))); err != nil {
			t.Fatal(err)
		}
		tx.Rollback()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, heapDir, "00000000")
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(victim) * heap.PageSize
	if _, err := f.WriteAt(make([]byte, heap.PageSize), off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	before := dirDigest(t, dir)
	_, err = Open(dir, Options{Autovacuum: noAutovacuum})
	want := fmt.Sprintf("%s at offset %d (block %d)", file, off, victim)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open with block %d zeroed: %v; want ErrCorruption naming %q", victim, err, want)
	}
	t.Log(err)
	m := regexp.MustCompile(`keys lost: (\d+) provably`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("no count of lost keys in %v", err)
	}
	if lost, _ := strconv.Atoi(m[1]); lost == 0 {
		t.Fatalf("no key counted as provably lost: %v", err)
	}
	if after := dirDigest(t, dir); !maps.Equal(before, after) {
		t.Fatalf("Open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}
