package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"mvkv/internal/heap"
)

// A heap page zeroed below the heap length the last checkpoint recorded
// would read as a new, empty page and its versions would silently vanish.
// Without an index file, Open (which then reads every page anyway) names
// the file, offset and block, counts the keys it can prove lost, and
// changes nothing on disk. With one, Open does not read the heap: the page
// is reported, with the same name, when it is first read, and Verify
// counts the keys the index places on it; neither writes anything.
func TestZeroedHeapPageIsCorruption(t *testing.T) {
	t.Run("index file", func(t *testing.T) { testZeroedHeapPage(t, true) })
	t.Run("heap scan", func(t *testing.T) { testZeroedHeapPage(t, false) })
}

func testZeroedHeapPage(t *testing.T, indexFile bool) {
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

	want := fmt.Sprintf("%s at offset %d (block %d)", file, off, victim)
	if indexFile {
		before := dirDigest(t, dir)
		var logged syncBuffer
		db, err := Open(dir, Options{Autovacuum: noAutovacuum, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatalf("Open with an index file: %v", err)
		}
		// Open does not wait for the heap to be read; its background
		// scan logs the page and the keys lost.
		db.waitOpenScan()
		if l := logged.String(); !strings.Contains(l, want) || !strings.Contains(l, "keysLost=") || strings.Contains(l, "keysLost=0 ") {
			t.Fatalf("log after Open: %s", l)
		}
		rep, err := db.Verify()
		if err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(rep.Problems, "\n")
		if !strings.Contains(joined, want) || !strings.Contains(joined, "keys lost: ") {
			t.Fatalf("verify: %v", rep.Problems)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if after := dirDigest(t, dir); !maps.Equal(before, after) {
			t.Fatalf("Open, Verify and Close changed the directory:\nbefore %v\nafter  %v", before, after)
		}
		db, err = Open(dir, Options{Autovacuum: noAutovacuum})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		_, _, err = get2(db, key(n/2))
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
			t.Fatalf("reading a key on block %d: %v; want ErrCorruption naming %q", victim, err, want)
		}
		return
	}
	if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, dir)
	_, err = Open(dir, Options{Autovacuum: noAutovacuum})
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

// get2 reads key in its own transaction.
func get2(db *DB, key string) (val []byte, ok bool, err error) {
	err = db.View(context.Background(), func(tx *Txn) error {
		val, err = tx.Get([]byte(key))
		return err
	})
	return val, val != nil, err
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A heap page that fails its checksum below the heap length the last
// checkpoint recorded is reported by Open's background scan as a zeroed
// page is (the index file spared Open the heap check): a log line naming
// the file, offset and block and counting the keys the index places on
// it, and the Damage counts, before any client reads it. Nothing is
// written.
func TestDamagedHeapPageFoundByScan(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	const n = 600
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	for i := range n {
		mustPut(t, db, key(i), strings.Repeat("a", 200))
	}
	victim := heap.UnpackTID(db.idx.get([]byte(key(n / 2))).head.Load()).Block
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, heapDir, "00000000")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(victim) * heap.PageSize
	b[off+4000] ^= 0x01
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s at offset %d (block %d)", file, off, victim)
	before := dirDigest(t, dir)
	var logged syncBuffer
	db, err = Open(dir, Options{Autovacuum: noAutovacuum, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open with an index file: %v", err)
	}
	if ri := db.Recovery(); !ri.IndexFromFile {
		t.Fatalf("recovery %+v: want the index from the file", ri)
	}
	db.waitOpenScan()
	l := logged.String()
	if !strings.Contains(l, want) || !strings.Contains(l, "checksum") || !strings.Contains(l, "keysLost=") || strings.Contains(l, "keysLost=0 ") {
		t.Fatalf("log after Open: %s", l)
	}
	d := db.Damage()
	if d.CorruptPages != 1 || d.DamagedPages != 1 || d.KeysLost == 0 || d.ZeroedPages != 0 || d.FailedReads != 0 || !strings.Contains(d.Corrupt, want) {
		t.Fatalf("Damage after the scan: %+v", d)
	}
	_, _, err = get2(db, key(n/2))
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) {
		t.Fatalf("reading a key on block %d: %v; want ErrCorruption naming %q", victim, err, want)
	}
	if d := db.Damage(); d.FailedReads != 1 || d.DamagedPages != 1 {
		t.Fatalf("Damage after a read of the page: %+v", d)
	}
	if lines := strings.Count(logged.String(), "level=ERROR"); lines != 1 {
		t.Fatalf("%d error lines in the log, want one (the scan's):\n%s", lines, logged.String())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if after := dirDigest(t, dir); !maps.Equal(before, after) {
		t.Fatalf("Open and Close changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}

// The scan reads the files, and a page on disk can fail its checksum while
// the buffer pool holds it whole (redo rebuilt a torn page from its
// full-page image; a write of it was under way as the scan read): the
// pool's copy is the page, and the scan reports no damage.
func TestDamageScanTrustsThePoolsCopy(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	for i := range 300 {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("a", 200))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, db, "key-00150"); !ok {
		t.Fatal("key-00150 missing")
	}
	blk := db.idx.get([]byte("key-00150")).headTID().Block
	tearBlock(t, dir, blk)
	if err := db.storage.ReadBlock(blk, make([]byte, heap.PageSize)); !errors.Is(err, heap.ErrCorrupt) {
		t.Fatalf("the torn copy on disk reads %v, want a corrupt page", err)
	}
	db.bgWG.Add(1)
	db.scanForDamagedPages(db.storage.NBlocks(), db.storage.NBlocks())
	if d := db.Damage(); d.DamagedPages != 0 || d.CorruptPages != 0 || d.FailedReads != 0 {
		t.Fatalf("a page the pool holds whole is reported as damage: %+v", d)
	}
}
