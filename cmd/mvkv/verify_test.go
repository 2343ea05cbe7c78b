package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/engine"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/visibility"
)

// TestVerifyWrongVisibilityMapBit: a map bit set on disk for a heap page
// that is not all-visible is cleared by Open's check of the map, which
// mvkv verify notes, naming the heap block; the map it leaves is right.
func TestVerifyWrongVisibilityMapBit(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(context.Background(), func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var out, errb bytes.Buffer
	if code := run([]string{"verify", dir}, &out, &errb); code != 0 {
		t.Fatalf("verify before the damage: exit %d\n%s%s", code, out.String(), errb.String())
	}
	vm, err := visibility.Open(vfs.OS{}, filepath.Join(dir, "vm"), visibility.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Set(0, visibility.AllVisible, 0); err != nil {
		t.Fatal(err)
	}
	if err := vm.Flush(); err != nil {
		t.Fatal(err)
	}
	vm.Close()
	// Open's check of the map against the heap clears the bit, and the
	// check's checkpoint writes the map: a note, not a problem.
	out.Reset()
	if code := run([]string{"verify", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "note: the visibility map had bits set for 1 heap pages") || !strings.Contains(out.String(), "(block 0)") {
		t.Fatalf("verify after setting a wrong bit: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"verify", dir}, &out, &errb); code != 0 || strings.Contains(out.String(), "note:") {
		t.Fatalf("verify once more: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestDirCommandsRefuseNonDataDirs: verify and waldump given a missing path,
// a file, an empty directory or one of other files fail and create
// nothing, instead of opening a new empty database and reporting it ok: a
// path that names no directory, or an empty one, is a usage error (exit
// 2, as a bad flag), a directory of other files a problem found (exit
// 1). Each message says what is missing.
func TestDirCommandsRefuseNonDataDirs(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base, "other")
	if err := os.MkdirAll(filepath.Join(other, "heap"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "missing")
	for _, cmd := range []string{"verify", "waldump"} {
		for _, c := range []struct {
			dir  string
			code int
			want string
		}{
			{missing, 2, missing + " does not exist\n"},
			{file, 2, file + " is not a directory\n"},
			{filepath.Join(file, "sub"), 2, " does not exist\n"},
			{empty, 2, empty + " is empty, not an mvkv data directory: none of a data directory's files are there (control, wal/, heap/, clog/, vm/)\n"},
			{other, 1, other + " is not an mvkv data directory: it holds no control file and no WAL segment in wal/ (missing: control, wal/, clog/, vm/)\n"},
		} {
			var out, errb strings.Builder
			if code := run([]string{cmd, c.dir}, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
				t.Errorf("mvkv %s %s: exit %d, stderr %q; want %d and %q", cmd, c.dir, code, errb.String(), c.code, c.want)
			}
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the missing directory was created: %v", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("the empty directory was written to: %d entries", len(ents))
	}
}

// An engine error is printed after the command's prefix without its own
// ("mvkv verify: mvkv: data directory is in use" before).
func TestVerifyErrorOnePrefix(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"verify", dir}, &out, &errb); code != 1 {
		t.Fatalf("verify of a directory in use: exit %d, want 1", code)
	}
	if s := errb.String(); !strings.HasPrefix(s, "mvkv verify: data directory is in use") {
		t.Errorf("stderr %q, want one prefix", s)
	}
}

// TestVerifyNamesShortHeapSegment: a heap segment cut short with a later
// segment after it fails mvkv verify (at Open), naming the file, its size
// and the size a segment before another must have.
func TestVerifyNamesShortHeapSegment(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		if err := db.Update(context.Background(), func(tx *engine.Txn) error {
			return tx.Put(fmt.Appendf(nil, "key-%05d", i), []byte(strings.Repeat("v", 300)))
		}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	seg0 := filepath.Join(dir, "heap", "00000000")
	if err := os.Truncate(seg0, 8192); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "heap", "00000001"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"verify", dir}, &out, &errb)
	want := "heap segment " + seg0 + " is 8192 bytes but is not the last segment"
	if code != 1 || !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), "a segment before another must be 1073741824 bytes") {
		t.Fatalf("verify: exit %d, stderr %q; want exit 1 naming %q", code, errb.String(), want)
	}
}

// A file put in wal/ under a segment's name past the end of the log is
// removed by the recovery verify runs; verify says so, and the database
// is still ok.
func TestVerifyNotesRemovedWALSegment(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(context.Background(), func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	stray := "0000000009000000"
	if err := os.WriteFile(filepath.Join(dir, "wal", stray), []byte("not this log's"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"verify", dir}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "note: recovery removed WAL segment file(s) "+stray+" past the end of the log") {
		t.Fatalf("verify: exit %d, stdout %q, stderr %q; want exit 0 and a note naming %s", code, out.String(), errb.String(), stray)
	}
}

// TestVerifyOrphanChunksExitZero: chunks no version names (the data chunks
// of a value above 1 MiB whose directory was lost with its page, after the
// key's delete and vacuum) are printed as notes naming their file, block
// and slot, and the exit status stays 0: space leaked, not damage. Without
// the index file, Open rebuilds the index and queues them for vacuum,
// after which verify notes nothing.
func TestVerifyOrphanChunksExitZero(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	off := false
	o := engine.Options{SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20, Autovacuum: &off}
	db, err := engine.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("big"), make([]byte, 2<<20)) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The page of the value's one directory chunk (Chunk and External
	// set), torn.
	heapFile := filepath.Join(dir, "heap", "00000000")
	data, err := os.ReadFile(heapFile)
	if err != nil {
		t.Fatal(err)
	}
	dirBlock := -1
	for b := 0; b < len(data)/heap.PageSize && dirBlock < 0; b++ {
		page := data[b*heap.PageSize : (b+1)*heap.PageSize]
		for s := 0; !heap.IsNew(page) && s < heap.NumSlots(page); s++ {
			if raw, err := heap.Tuple(page, uint16(s)); err == nil && heap.TupleInfomask(raw)&(heap.Chunk|heap.External) == heap.Chunk|heap.External {
				dirBlock = b
			}
		}
	}
	if dirBlock < 0 {
		t.Fatal("no directory chunk in the heap")
	}
	copy(data[dirBlock*heap.PageSize+heap.PageSize/2:(dirBlock+1)*heap.PageSize], bytes.Repeat([]byte("torn!"), heap.PageSize))
	if err := os.WriteFile(heapFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	o.ZeroDamagedPages = true
	if db, err = engine.Open(dir, o); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *engine.Txn) error { return tx.Delete([]byte("big")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	var out, errb bytes.Buffer
	code := run([]string{"verify", dir}, &out, &errb)
	if s := out.String(); code != 0 || !strings.Contains(s, "out-of-line value chunks (") ||
		!strings.Contains(s, "note: orphan data chunk: "+heapFile+" at offset ") || !strings.HasSuffix(s, "ok\n") {
		t.Fatalf("verify with orphan chunks: exit %d\n%s%s", code, s, errb.String())
	}
	if err := os.Remove(filepath.Join(dir, "index")); err != nil {
		t.Fatal(err)
	}
	o.ZeroDamagedPages = false
	if db, err = engine.Open(dir, o); err != nil {
		t.Fatal(err)
	}
	st, err := db.Vacuum(ctx)
	if err != nil || st.ChunksRemoved == 0 {
		t.Fatalf("vacuum after the index rebuild: %+v, %v", st, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"verify", dir}, &out, &errb); code != 0 || strings.Contains(out.String(), "note:") {
		t.Fatalf("verify after the rebuild and vacuum: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
