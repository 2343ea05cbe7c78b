package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mvkv/wal"
)

// withPreparedNext fills a database with n keys of 1,900-byte values (a few
// 1 MiB WAL segments) and waits, while it is open, until the writer has
// prepared the segment after the one it writes in. It returns the open
// database, the path of the newest segment holding records and that of the
// prepared one.
func withPreparedNext(t *testing.T, dir string, n int) (db *DB, newest, prepared string) {
	t.Helper()
	db = openTest(t, dir, Options{CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	for i := range n {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 1900))
	}
	size := db.wal.SegmentSize()
	name, _ := wal.SegmentFile(db.wal.InsertLSN(), size)
	next, _ := wal.SegmentFile(db.wal.InsertLSN()+wal.LSN(size), size)
	newest, prepared = filepath.Join(dir, walDir, name), filepath.Join(dir, walDir, next)
	// The preparer runs in the background and renames the whole file
	// into place last: once it is there, it is complete.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if fi, err := os.Stat(prepared); err == nil && fi.Size() == size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the next segment %s was not prepared within a minute", prepared)
		}
	}
	return db, newest, prepared
}

// stoppedWithPreparedNext is withPreparedNext in a new directory, then
// stopped as stop says: "clean shutdown" closes the database; anything
// else ("crash", "crash while preparing") copies its files while it runs,
// as a crash leaves them, and returns the copy. The paths returned are
// the returned directory's.
func stoppedWithPreparedNext(t *testing.T, stop string, n int) (dir, newest, prepared string) {
	t.Helper()
	src := t.TempDir()
	db, newest, prepared := withPreparedNext(t, src, n)
	dir = src
	if stop != "clean shutdown" {
		dir = t.TempDir()
		copyDir(t, src, dir)
	}
	db.Close()
	return dir, filepath.Join(dir, walDir, filepath.Base(newest)), filepath.Join(dir, walDir, filepath.Base(prepared))
}

// holdsRecords reports whether the segment file p has a non-zero byte past
// its 32-byte header (a prepared segment holds only zeros there).
func holdsRecords(t *testing.T, p string) bool {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b[32:] {
		if c != 0 {
			return true
		}
	}
	return false
}

// The newest WAL segment removed from a stopped data directory while the
// segment after it, prepared ahead and never written, is present: the
// writer asks for that one only once it has moved into the newest, so the
// newest was lost, and with it the commits it held. Open fails with
// ErrCorruption naming the missing file, and changes nothing on disk. Both
// after a crash (redo starts in an earlier segment and reads up to the
// gap) and after a clean shutdown (the redo point lies in the lost
// segment); and after a crash during the preparation, which leaves the
// later file under its temporary name.
func TestNewestWALSegmentLostBeforePreparedOne(t *testing.T) {
	for _, stop := range []string{"crash", "clean shutdown", "crash while preparing"} {
		t.Run(stop, func(t *testing.T) {
			dir, newest, prepared := stoppedWithPreparedNext(t, stop, 1200)
			if !holdsRecords(t, newest) || holdsRecords(t, prepared) {
				t.Fatalf("want %s holding records and %s prepared and empty", newest, prepared)
			}
			if stop == "crash while preparing" {
				if err := os.Rename(prepared, prepared+".tmp"); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(newest); err != nil {
				t.Fatal(err)
			}
			before := dirDigest(t, dir)
			_, err := Open(dir, Options{})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), newest) {
				t.Fatalf("Open: %v; want ErrCorruption naming %s", err, newest)
			}
			t.Logf("%s: %v", stop, err)
			if after := dirDigest(t, dir); !maps.Equal(before, after) {
				t.Fatalf("a failed Open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// The states the writer leaves around a prepared segment open cleanly and
// lose nothing: the next segment prepared and never written, after a crash
// and after a clean shutdown (which then rewrites no file), and a crash
// during its preparation (the file under its temporary name, renamed into
// place last).
func TestPreparedWALSegmentStatesOpen(t *testing.T) {
	for _, state := range []string{"crash", "clean shutdown", "crash while preparing"} {
		t.Run(state, func(t *testing.T) {
			const n = 1200
			dir, _, prepared := stoppedWithPreparedNext(t, state, n)
			if holdsRecords(t, prepared) {
				t.Fatalf("%s holds records", prepared)
			}
			if state == "crash while preparing" {
				if err := os.Rename(prepared, prepared+".tmp"); err != nil {
					t.Fatal(err)
				}
			}
			before := dirDigest(t, dir)
			db, err := Open(dir, Options{Autovacuum: noAutovacuum})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if state == "clean shutdown" {
				if after := dirDigest(t, dir); !maps.Equal(before, after) {
					t.Fatalf("opening a cleanly shut down directory changed it:\nbefore %v\nafter  %v", before, after)
				}
			}
			st, err := scanState(db)
			db.Close()
			if err != nil || len(st) != n {
				t.Fatalf("after Open: %d keys, err %v; want %d", len(st), err, n)
			}
		})
	}
}

// Pages of zeros laid over the WAL in the middle of its last flush round,
// with valid records after them (a crash's torn write whose later sectors
// reached the disk looks the same, so Open cuts the log there): the
// warning and RecoveryInfo say how many valid records, and how many
// commits, were cut off after the damage and from where, instead of only
// a byte count.
func TestTornTailWarningCountsRecordsAfterTheDamage(t *testing.T) {
	src := t.TempDir()
	db := openTest(t, src, Options{CheckpointTimeout: -1, Autovacuum: noAutovacuum, WALWriterDelay: 10 * time.Second})
	size := db.wal.SegmentSize()
	inSegment := func(lsn wal.LSN) int64 { return int64(lsn) % size }
	i := 0
	put := func() {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), strings.Repeat("v", 900))
		i++
	}
	// Synchronous commits until the log is early in a segment, so that
	// the round below fits in it.
	for i < 10 || inSegment(db.wal.InsertLSN()) >= size/4 {
		put()
	}
	if err := db.SetSynchronousCommit(SyncCommitOff); err != nil {
		t.Fatal(err)
	}
	// Asynchronous commits until at least 64 KiB lie past what is
	// flushed. Every record inserted carries the flushed LSN at its
	// insertion as its durable-LSN mark, so none carries one past the
	// flushed LSN read after the last of them: damage from there on is
	// indistinguishable from a torn write.
	var flushed wal.LSN
	for {
		put()
		flushed = db.wal.FlushedLSN()
		if db.wal.InsertLSN()-flushed >= 64<<10 {
			break
		}
	}
	insertEnd := db.wal.InsertLSN()
	if flushed/wal.LSN(size) != (insertEnd-1)/wal.LSN(size) {
		t.Fatalf("the unflushed records %s to %s span segments", flushed, insertEnd)
	}
	if err := db.wal.FlushAll(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyDir(t, src, dir)
	db.Close()

	const zeroed = 8 << 10
	editWAL(t, dir, flushed, size, func(b []byte) { clear(b[:zeroed]) })
	ri, logged := recoverLogged(t, dir)
	if ri.EndLSN != uint64(flushed) {
		t.Fatalf("EndLSN %s, want %s, where the zeros begin", wal.LSN(ri.EndLSN), flushed)
	}
	if ri.DroppedRecords == 0 || ri.DroppedCommits == 0 || ri.DroppedCommits > ri.DroppedRecords ||
		ri.DroppedRecordsFrom < uint64(flushed)+zeroed || ri.DroppedRecordsFrom > uint64(flushed)+zeroed+4<<10 {
		t.Fatalf("RecoveryInfo %+v: want records and commits counted after the zeros, from just past %s", ri, flushed+zeroed)
	}
	want := fmt.Sprintf("validRecordsAfter=%d commitsAfter=%d validFrom=%s", ri.DroppedRecords, ri.DroppedCommits, wal.LSN(ri.DroppedRecordsFrom))
	if !strings.Contains(logged.String(), "cut off torn WAL tail") || !strings.Contains(logged.String(), want) {
		t.Fatalf("log does not say %q:\n%s", want, logged.String())
	}
	t.Logf("%s", logged.String())
}

// The newest WAL segment zeroed whole in a data directory copied from a
// crashed database, with no later file of the log left: a segment file of
// the segment size under its final name always has a valid header after
// a crash (it is renamed into place after it was written and synced), so
// Open fails with ErrCorruption naming the file and offset 0 and changes
// nothing, instead of ending the log before the commits the segment held.
// The way on the error gives, removing the file, opens the database
// without them.
func TestNewestWALSegmentZeroedWhole(t *testing.T) {
	const n = 1200
	dir, newest, prepared := stoppedWithPreparedNext(t, "crash", n)
	if err := os.Remove(prepared); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, make([]byte, fi.Size()), 0o644); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, dir)
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), newest+" at offset 0: the segment header is all zeros") {
		t.Fatalf("Open: %v; want ErrCorruption naming %s at offset 0", err, newest)
	}
	t.Logf("%v", err)
	if after := dirDigest(t, dir); !maps.Equal(before, after) {
		t.Fatalf("a failed Open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
	if err := os.Remove(newest); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, Options{Autovacuum: noAutovacuum})
	if err != nil {
		t.Fatalf("Open after removing %s: %v", newest, err)
	}
	st, err := scanState(db)
	db.Close()
	if err != nil || len(st) == 0 || len(st) >= n {
		t.Fatalf("after removing %s: %d keys, err %v; want some of the %d, not all", newest, len(st), err, n)
	}
}

// The newest WAL segment removed with no later file of the log left (the
// prepared next one removed too). After a clean shutdown the last
// checkpoint record lay in it, so Open fails with ErrCorruption naming the
// file, the WAL ending before the checkpoint the control file names. After
// a crash nothing tells the removal from the state a crash leaves right
// after a segment switch whose next segment was created late (the wal
// package doc tables these states): Open ends the log at the previous
// segment's end and opens without the commits the segment held.
func TestNewestWALSegmentRemovedWithNoLaterFile(t *testing.T) {
	const n = 1200
	for _, stop := range []string{"clean shutdown", "crash"} {
		t.Run(stop, func(t *testing.T) {
			dir, newest, prepared := stoppedWithPreparedNext(t, stop, n)
			for _, p := range []string{prepared, newest} {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			// The segment size it was made with: with no segment left,
			// the configured one names the missing file.
			db, err := Open(dir, Options{Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20})
			if stop == "clean shutdown" {
				if err == nil {
					db.Close()
				}
				if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), newest) {
					t.Fatalf("Open: %v; want ErrCorruption naming %s", err, newest)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			st, err := scanState(db)
			db.Close()
			if err != nil || len(st) == 0 || len(st) >= n {
				t.Fatalf("after Open: %d keys, err %v; want some of the %d, not all", len(st), err, n)
			}
		})
	}
}

// TestTornTailWarningNamesFileAndOffset: a byte flipped in the last
// record of a copy taken as a kill -9 leaves it reads as a torn tail (the
// two look the same to a checksum), and the warning that says so names
// the segment file and the offset in it where the cut begins, so that the
// bytes can be looked at.
func TestTornTailWarningNamesFileAndOffset(t *testing.T) {
	src := t.TempDir()
	db := openTest(t, src, Options{CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	for i := range 20 {
		mustPut(t, db, fmt.Sprintf("key-%02d", i), "v")
	}
	before := db.wal.InsertLSN()
	mustPut(t, db, "last", "v")
	end := db.wal.InsertLSN()
	size := db.wal.SegmentSize()
	dir := t.TempDir()
	copyDir(t, src, dir)
	db.Close()

	editWAL(t, dir, end-4, size, func(b []byte) { b[0] ^= 0xFF })
	ri, logged := recoverLogged(t, dir)
	if ri.EndLSN < uint64(before) || ri.EndLSN >= uint64(end) || ri.DroppedBytes == 0 {
		t.Fatalf("RecoveryInfo %+v: want the log cut inside the last transaction's records, %s to %s", ri, before, end)
	}
	atName, atOff := wal.SegmentFile(wal.LSN(ri.EndLSN), size)
	want := fmt.Sprintf("file=%s offset=%d", filepath.Join(dir, walDir, atName), atOff)
	if !strings.Contains(logged.String(), "cut off torn WAL tail") || !strings.Contains(logged.String(), want) {
		t.Fatalf("log does not say %q:\n%s", want, logged.String())
	}
}

// editWAL changes, with edit, the bytes of the stopped database dir's WAL
// from lsn to the end of its segment (segments of size bytes).
func editWAL(t *testing.T, dir string, lsn wal.LSN, size int64, edit func(b []byte)) {
	t.Helper()
	name, off := wal.SegmentFile(lsn, size)
	seg := filepath.Join(dir, walDir, name)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	edit(b[off:])
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recoverLogged opens and closes dir, and returns what recovery reported
// and what it logged.
func recoverLogged(t *testing.T, dir string) (RecoveryInfo, *strings.Builder) {
	t.Helper()
	var logged strings.Builder
	db, err := Open(dir, Options{Autovacuum: noAutovacuum, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ri := db.Recovery()
	db.Close()
	return ri, &logged
}
