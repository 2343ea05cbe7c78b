package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// damagedHeapState writes 300 keys over several pages, closes cleanly,
// and damages the page holding key-00150's newest version on disk: torn
// (fails its checksum) or zeroed. It returns the block and the keys whose
// newest version was on it.
func damagedHeapState(t *testing.T, dir string, zeroed bool) (uint32, map[string]bool) {
	t.Helper()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	for i := range 300 {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("a", 200))
	}
	blk := headBlock(t, db, "key-00150")
	lost := map[string]bool{}
	for i := range 300 {
		if k := fmt.Sprintf("key-%05d", i); headBlock(t, db, k) == blk {
			lost[k] = true
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !zeroed {
		tearBlock(t, dir, blk)
		return blk, lost
	}
	f, err := os.OpenFile(filepath.Join(dir, heapDir, "00000000"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, heap.PageSize), int64(blk)*heap.PageSize); err != nil {
		t.Fatal(err)
	}
	return blk, lost
}

// checkLostPage checks a database opened with zero_damaged_pages over
// damagedHeapState: the lost keys read as absent and can be written again,
// the others read as written, Count agrees with Scan, vacuum gets past the
// page, and Damage and the log say what was zeroed.
func checkLostPage(t *testing.T, db *DB, blk uint32, lost map[string]bool, logged *syncBuffer) {
	t.Helper()
	for i := range 300 {
		k := fmt.Sprintf("key-%05d", i)
		v, ok := get(t, db, k)
		if lost[k] == ok || (ok && v != strings.Repeat("a", 200)) {
			t.Fatalf("%s: found %v (%d bytes); its page was lost: %v", k, ok, len(v), lost[k])
		}
	}
	if scan, count := countKeys(t, db); scan != 300-len(lost) || count != scan {
		t.Fatalf("Scan %d, Count %d; want %d", scan, count, 300-len(lost))
	}
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatalf("vacuum: %v", err)
	}
	if d := db.Damage(); d.PagesZeroedOut != 1 || !strings.Contains(d.ZeroedOut, fmt.Sprintf("block %d", blk)) {
		t.Fatalf("Damage: %+v, want block %d zeroed out", d, blk)
	}
	if l := logged.String(); !strings.Contains(l, "zeroing out page") || !strings.Contains(l, "repaired a heap page") {
		t.Fatalf("no warning: %s", l)
	}
	mustPut(t, db, "key-00150", "again")
	mustDelete(t, db, "key-00299")
	if v, ok := get(t, db, "key-00150"); !ok || v != "again" {
		t.Fatalf("key-00150 written again reads %q, %v", v, ok)
	}
	if _, ok := get(t, db, "key-00299"); ok {
		t.Fatal("key-00299 deleted but found")
	}
}

// checkRepaired checkpoints and closes db, opens dir again with
// zero_damaged_pages off, and checks that vacuum's repair lasted: the page
// on disk is valid again, the lost keys read as absent rather than as
// damage, the rest as checkLostPage left them, and Verify finds nothing.
func checkRepaired(t *testing.T, db *DB, dir string, lost map[string]bool) {
	t.Helper()
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	for i := range 300 {
		k := fmt.Sprintf("key-%05d", i)
		_, ok := get(t, db, k)
		if want := !lost[k] && k != "key-00299" || k == "key-00150"; ok != want {
			t.Fatalf("after the repair and a reopen, %s found %v, want %v", k, ok, want)
		}
	}
	db.waitOpenScan()
	if d := db.Damage(); d.DamagedPages != 0 || d.PagesZeroedOut != 0 {
		t.Fatalf("damage after the repair: %+v", d)
	}
	mustVerify(t, db)
}

// TestZeroDamagedPages: a heap page that fails its checks fails every read
// of it, a vacuum and an Open that rebuilds the index; with
// zero_damaged_pages the page is taken as empty, with a warning, and the
// database goes on without its versions, as PostgreSQL's setting does.
// Both ways the index can come: from the index file (the torn page is
// met by reads) and from a heap scan (met by the rebuild).
func TestZeroDamagedPages(t *testing.T) {
	t.Run("index file", func(t *testing.T) {
		dir := t.TempDir()
		blk, lost := damagedHeapState(t, dir, false)
		var logged syncBuffer
		o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, Logger: slog.New(slog.NewTextHandler(&logged, nil))}
		db := openTest(t, dir, o)
		err := db.View(context.Background(), func(tx *Txn) error { _, err := tx.Get([]byte("key-00150")); return err })
		if !errors.Is(err, ErrCorruption) {
			t.Fatalf("read of the torn page without zero_damaged_pages: %v", err)
		}
		if _, err := db.Vacuum(context.Background()); !errors.Is(err, ErrCorruption) {
			t.Fatalf("vacuum without zero_damaged_pages: %v", err)
		}
		// On at run time: the page has been read, so it is not in the
		// pool; the next read zeroes it.
		if strings.Contains(logged.String(), "zeroing out page") {
			t.Fatal("a page was zeroed with zero_damaged_pages off")
		}
		if err := db.SetConfig("zero_damaged_pages", "on"); err != nil {
			t.Fatal(err)
		}
		checkLostPage(t, db, blk, lost, &logged)
		checkRepaired(t, db, dir, lost)
	})
	for _, zeroed := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild, zeroed=%v", zeroed), func(t *testing.T) {
			dir := t.TempDir()
			blk, lost := damagedHeapState(t, dir, zeroed)
			if err := os.Remove(filepath.Join(dir, indexFileName)); err != nil {
				t.Fatal(err)
			}
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20}
			if db, err := Open(dir, o); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "zero_damaged_pages") || !strings.Contains(err.Error(), "Options.ZeroDamagedPages") {
				if err == nil {
					db.Close()
				}
				t.Fatalf("Open rebuilding the index over the damaged page: %v, want ErrCorruption suggesting zero_damaged_pages", err)
			}
			var logged syncBuffer
			o.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			o.ZeroDamagedPages = true
			db := openTest(t, dir, o)
			if db.recovery.IndexFromFile {
				t.Fatal("the index came from a file")
			}
			checkLostPage(t, db, blk, lost, &logged)
			checkRepaired(t, db, dir, lost)
		})
	}
}

// TestZeroedPageNotReusedBeforeRepair: a page zero_damaged_pages emptied
// becomes a valid page only once vacuum has dropped every index entry
// leading into it. Neither a writer the free space map sends there nor a
// vacuum that finds one of those keys' row lock taken may initialize it
// first: checkpointed and reopened, the entries left would lead to an
// initialized page and the lost keys would read as corruption, for good,
// instead of absent.
func TestZeroedPageNotReusedBeforeRepair(t *testing.T) {
	for _, how := range []string{"writer", "busy key"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			blk, lost := damagedHeapState(t, dir, false)
			var lostKey string
			for k := range lost {
				lostKey = k
				break
			}
			o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1, ZeroDamagedPages: true}
			db := openTest(t, dir, o)
			ctx := context.Background()
			if _, ok := get(t, db, lostKey); ok {
				t.Fatalf("%s, on the damaged page, found", lostKey)
			}
			if !db.zeroedOutPage(blk) {
				t.Fatalf("block %d not zeroed out", blk)
			}
			switch how {
			case "writer":
				// The free space map offers the page, as it may have
				// before the damage.
				db.fsm.record(blk, heap.PageSize)
				for i := range 5 {
					mustPut(t, db, fmt.Sprint("new", i), strings.Repeat("n", 300))
					if b := headBlock(t, db, fmt.Sprint("new", i)); b == blk {
						t.Fatalf("a new version was placed on block %d, zeroed out and not repaired", blk)
					}
				}
			case "busy key":
				tx, err := db.Begin(ctx, TxnOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Lock([]byte(lostKey)); err != nil {
					t.Fatal(err)
				}
				st, err := db.Vacuum(ctx)
				tx.Rollback()
				if err != nil || st.HeadsBusy == 0 {
					t.Fatalf("vacuum with %s's row lock taken: %+v, %v", lostKey, st, err)
				}
			}
			mustPut(t, db, "z", "z")
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, dir, o)
			defer db.Close()
			for k := range lost {
				err := db.View(ctx, func(tx *Txn) error { _, err := tx.Get([]byte(k)); return err })
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("after a restart, %s (its page zeroed out): %v, want ErrNotFound", k, err)
				}
			}
			if _, err := db.Vacuum(ctx); err != nil {
				t.Fatal(err)
			}
			want := 300 - len(lost) + 1 // "z"
			if how == "writer" {
				want += 5
			}
			if scan, count := countKeys(t, db); scan != want || count != scan {
				t.Fatalf("Scan %d, Count %d; want %d", scan, count, want)
			}
		})
	}
}

// TestZeroedChunkPageReused: a chunk page zero_damaged_pages emptied and
// vacuum initialized takes another value's chunk in the slot the lost one
// had; the first value, whose pointer still names the slot, must fail to
// read rather than return the other's bytes, and vacuum freeing the first
// value must leave the other's chunk alone.
func TestZeroedChunkPageReused(t *testing.T) {
	dir := t.TempDir()
	o := Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1}
	db := openTest(t, dir, o)
	mustPut(t, db, "small", "s")
	v1 := patterned(3*chunkSize, 1)
	mustPut(t, db, "big1", string(v1))
	_, ptr := rawPointer(t, db, "big1")
	tids1, err := chunkTIDs(ptr)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tearBlock(t, dir, tids1[0].Block)
	o.ZeroDamagedPages = true
	db = openTest(t, dir, o)
	defer db.Close()
	if _, err := db.Vacuum(context.Background()); err != nil { // initializes the page
		t.Fatal(err)
	}
	v2 := patterned(3*chunkSize, 2)
	mustPut(t, db, "big2", string(v2))
	_, ptr = rawPointer(t, db, "big2")
	tids2, err := chunkTIDs(ptr)
	if err != nil {
		t.Fatal(err)
	}
	if tids2[0] != tids1[0] {
		t.Fatalf("big2's first chunk is at %s, not at big1's lost one's %s: the test no longer reuses the slot", tids2[0], tids1[0])
	}
	read := func(k string) ([]byte, error) {
		var got []byte
		err := db.View(context.Background(), func(tx *Txn) error {
			var err error
			got, err = tx.Get([]byte(k))
			return err
		})
		return got, err
	}
	if _, err := read("big1"); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "belongs to another value") {
		t.Fatalf("big1, whose first chunk was lost: %v", err)
	}
	// Verify says so too, and counts big1 lost.
	rep, err := db.Verify()
	if err != nil || rep.OK() || !strings.Contains(rep.String(), "a chunk of another value") || !slices.Contains(rep.LostKeys, "big1") {
		t.Fatalf("verify with big1's chunk slot reused: %v\n%s\nlost keys %q", err, rep, rep.LostKeys)
	}
	mustDelete(t, db, "big1")
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, err := read("big2"); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("big2 after vacuum freed big1: %d bytes, %v", len(got), err)
	}
}
