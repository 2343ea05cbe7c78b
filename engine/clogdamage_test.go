package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mvkv/clog"
	"mvkv/vfs"
	"mvkv/wal"
)

// flipCLOGBit flips the lowest bit of the byte at off of CLOG segment 0.
func flipCLOGBit(t *testing.T, fsys vfs.FS, dir string, off int64) {
	t.Helper()
	flipFileBitsIn(t, fsys, filepath.Join(dir, clogDir, "000000000000"), off, 0x01)
}

// A bit flipped in a CLOG page after a clean shutdown is not a torn write:
// nothing was being written. Open reads every page from the truncation
// point to the checkpoint's next xid, refuses with ErrCorruption naming the
// file, offset and page and the xids whose statuses cannot be trusted, and
// changes nothing on disk.
func TestCLOGBitFlipAfterCleanCloseIsCorruption(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	mustPut(t, db, "a", "1")
	mustPut(t, db, "b", "2")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	flipCLOGBit(t, vfs.OS{}, dir, 100)
	before := dirDigest(t, dir)
	_, err := Open(dir, Options{Autovacuum: noAutovacuum})
	file := filepath.Join(dir, clogDir, "000000000000")
	want := file + " at offset 0 (page 0): checksum mismatch"
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cannot be trusted") {
		t.Fatalf("Open after a CLOG bit flip: %v; want ErrCorruption naming %q", err, want)
	}
	t.Log(err)
	if after := dirDigest(t, dir); !maps.Equal(before, after) {
		t.Fatalf("Open changed the directory:\nbefore %v\nafter  %v", before, after)
	}
}

// After a crash, a CLOG page that fails its checksum is rebuilt from the
// WAL when every xid on it was handed out after the checkpoint's redo
// point (at or above its next xid), so that redo sets every status it
// holds: it then holds exactly the statuses the WAL decided, a flipped bit
// included. A page holding older xids is refused when no transaction ended
// after the redo point (nothing can have torn it), and accepted as torn
// otherwise, its bits kept.
func TestCLOGDamageAfterCrash(t *testing.T) {
	m := vfs.NewMemFS()
	if err := m.MkdirAll("/db"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum})
	for i := range 5 {
		mustPut(t, db, fmt.Sprintf("old%d", i), "v")
	}
	// The first xid committed before the checkpoint.
	oldXid := uint64(0)
	for x := uint64(1); x < db.procs.next(); x++ {
		if st, err := db.clog.Status(x); err == nil && st == clog.StatusCommitted {
			oldXid = x
			break
		}
	}
	if oldXid == 0 {
		t.Fatal("no committed xid")
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	quiet := m.CrashCopy(vfs.DropUnsynced, nil)
	// Commits on page 0 after the checkpoint: page 0 may be written again,
	// and torn.
	for i := range 3 {
		mustPut(t, db, fmt.Sprintf("mid%d", i), "m")
	}
	if err := db.clog.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	torn := m.CrashCopy(vfs.DropUnsynced, nil)
	contradicted := m.CrashCopy(vfs.DropUnsynced, nil)
	short := m.CrashCopy(vfs.DropUnsynced, nil)
	// A second checkpoint, then skip to page 1: every xid on it is handed
	// out after the redo point, and nothing on page 0 ends after it.
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	db.procs.setNext(clog.XidsPerPage)
	for i := range 10 {
		mustPut(t, db, fmt.Sprintf("new%d", i), "w")
	}
	tx, err := db.Begin(context.Background(), TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put([]byte("rolled-back"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	next := db.procs.next()
	want := map[uint64]clog.Status{}
	for x := uint64(clog.XidsPerPage); x < next; x++ {
		if want[x], err = db.clog.Status(x); err != nil {
			t.Fatal(err)
		}
	}
	// Page 1 reaches its file, but no checkpoint completes after it.
	if err := db.clog.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	rebuilt := m.CrashCopy(vfs.DropUnsynced, nil)
	untouched := m.CrashCopy(vfs.DropUnsynced, nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	t.Run("page below the next xid, nothing ended since the checkpoint", func(t *testing.T) {
		flipCLOGBit(t, quiet, "/db", 100)
		_, err := Open("/db", Options{FS: quiet, Autovacuum: noAutovacuum})
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "/db/clog/000000000000 at offset 0 (page 0)") {
			t.Fatalf("Open: %v; want ErrCorruption naming page 0", err)
		}
		t.Log(err)
	})
	t.Run("page below the next xid, commits on it since the checkpoint", func(t *testing.T) {
		// Byte 100 holds the statuses of xids 336 to 339, never handed
		// out; its checksum fails as a torn page's would.
		flipCLOGBit(t, torn, "/db", 100)
		db := openTest(t, "/db", Options{FS: torn, Autovacuum: noAutovacuum})
		defer db.Close()
		if got := db.Recovery().CLOGTornPages; len(got) != 1 || got[0] != "/db/clog/000000000000 at offset 0" {
			t.Errorf("Recovery().CLOGTornPages = %q; want the page at offset 0 of 000000000000", got)
		}
		for i := range 5 {
			if v, ok := get(t, db, fmt.Sprintf("old%d", i)); !ok || v != "v" {
				t.Errorf("old%d = %q, %v", i, v, ok)
			}
		}
		for i := range 3 {
			if v, ok := get(t, db, fmt.Sprintf("mid%d", i)); !ok || v != "m" {
				t.Errorf("mid%d = %q, %v", i, v, ok)
			}
		}
	})
	t.Run("page below the next xid, commits since the checkpoint on another page only", func(t *testing.T) {
		// Nothing on page 0 ended after the last checkpoint, so page 0
		// was not written since and cannot be torn.
		flipCLOGBit(t, untouched, "/db", 100)
		_, err := Open("/db", Options{FS: untouched, Autovacuum: noAutovacuum})
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "/db/clog/000000000000 at offset 0 (page 0)") || !strings.Contains(err.Error(), "not written since") {
			t.Fatalf("Open: %v; want ErrCorruption naming page 0", err)
		}
		t.Log(err)
	})
	t.Run("page below the next xid, a status the WAL holds changed", func(t *testing.T) {
		// committed (01) to in progress (00): the key would vanish.
		f, err := contradicted.Open("/db/clog/000000000000")
		if err != nil {
			t.Fatal(err)
		}
		off := int64(16 + oldXid/4)
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 1 << (2 * (oldXid % 4))
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		f.Close()
		const clogFile = "/db/clog/000000000000"
		damaged, err := readMemFile(contradicted, clogFile)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("xid %d reads in progress, its commit record says committed", oldXid)
		// Twice: the refused Open leaves the page as it found it, so
		// that a second try (by hand, or a service manager's restart)
		// is refused too. It used to write the page back, with a valid
		// checksum over the wrong status, on its way out, and the
		// second Open lost the key without a word.
		for try := 1; try <= 2; try++ {
			_, err = Open("/db", Options{FS: contradicted, Autovacuum: noAutovacuum})
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "disagrees with the WAL") || !strings.Contains(err.Error(), want) {
				t.Fatalf("Open, try %d: %v; want ErrCorruption saying %q", try, err, want)
			}
			if got, err := readMemFile(contradicted, clogFile); err != nil || !bytes.Equal(got, damaged) {
				t.Fatalf("Open, try %d: the refused Open wrote to the CLOG (%d bytes, were %d; %v)", try, len(got), len(damaged), err)
			}
		}
		t.Log(err)
	})
	t.Run("page below the next xid, file cut short", func(t *testing.T) {
		// A write in place can tear a page, not shorten its file.
		f, err := short.Open("/db/clog/000000000000")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(16); err != nil {
			t.Fatal(err)
		}
		f.Close()
		_, err = Open("/db", Options{FS: short, Autovacuum: noAutovacuum})
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "ends at byte 16, inside the page at offset 0") {
			t.Fatalf("Open: %v; want ErrCorruption naming the cut", err)
		}
		t.Log(err)
	})
	t.Run("page above the next xid", func(t *testing.T) {
		// The byte holding the status of the first xid on page 1 (a
		// commit) and that of an xid never handed out, the lowest of
		// its byte: flipping the byte's lowest bit makes it read as
		// committed.
		unused := (next + 100) &^ 3
		flipCLOGBit(t, rebuilt, "/db", clog.PageSize+16)
		flipCLOGBit(t, rebuilt, "/db", clog.PageSize+16+int64(unused-clog.XidsPerPage)/4)
		db := openTest(t, "/db", Options{FS: rebuilt, Autovacuum: noAutovacuum})
		defer db.Close()
		for x := uint64(clog.XidsPerPage); x < next; x++ {
			if got, err := db.clog.Status(x); err != nil || got != want[x] {
				t.Errorf("xid %d: %v, %v; want %v", x, got, err, want[x])
			}
		}
		if got, err := db.clog.Status(unused); err != nil || got != clog.StatusInProgress {
			t.Errorf("xid %d, never handed out: %v, %v; want in progress", unused, got, err)
		}
		for i := range 10 {
			if v, ok := get(t, db, fmt.Sprintf("new%d", i)); !ok || v != "w" {
				t.Errorf("new%d = %q, %v", i, v, ok)
			}
		}
		if _, ok := get(t, db, "rolled-back"); ok {
			t.Error("the rolled-back write is visible")
		}
		rep, err := db.Verify()
		if err != nil || !rep.OK() {
			t.Fatalf("verify: %v\n%s", err, rep)
		}
	})
}

// Verify on a CLOG page that cannot be read reports it once, with the
// number of tuple xids it affects, and makes no claim that depends on the
// statuses it could not read (a visibility map bit over tuples whose xmin
// "did not commit").
func TestVerifyUnreadableCLOGPage(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	for i := range 200 {
		mustPut(t, db, fmt.Sprintf("key-%05d", i), "v")
	}
	// The next xid on the next page: Open reads the next xid's page into
	// the buffers (to clear what lies past it), and Verify would find
	// that page there, not read it.
	db.procs.setNext(clog.XidsPerPage)
	mustPut(t, db, "on-the-next-page", "v")
	if _, err := db.Vacuum(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	// Damaged after Open checked it, before anything read it.
	flipCLOGBit(t, vfs.OS{}, dir, 100)
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep.Problems)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "CLOG page") || !strings.Contains(rep.Problems[0], "checksum mismatch") {
		t.Fatalf("verify: want one problem about the CLOG page, got %d:\n%s", len(rep.Problems), strings.Join(rep.Problems, "\n"))
	}
}

// A CLOG segment restored from an older copy (a backup, or a write of it
// that was lost) is intact and passes every check at Open, but says "in
// progress" for transactions that committed since: their keys read as
// never written. Verify finds it from the commit records still in the
// WAL, one line for the page, naming its file.
func TestVerifyStaleCLOGSegment(t *testing.T) {
	dir := t.TempDir()
	// No hint bits on the new keys (nothing reads them), so only the WAL
	// can tell.
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	for i := range 200 {
		mustPut(t, db, fmt.Sprintf("old-%05d", i), "v")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, clogDir, "000000000000")
	old, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	for i := range 200 {
		mustPut(t, db, fmt.Sprintf("new-%05d", i), "v")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, old, 0o600); err != nil {
		t.Fatal(err)
	}
	rep := reopenVerify(t, dir)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "200 findings") || !strings.Contains(rep.Problems[0], seg) ||
		!strings.Contains(rep.Problems[0], "older than the WAL") {
		t.Fatalf("verify of a stale CLOG segment: want one problem naming %s and its 200 commits, got %d:\n%s", seg, len(rep.Problems), strings.Join(rep.Problems, "\n"))
	}
}

// Files the engine does not own are reported by Verify: a stranger in the
// data directory or in any of its subdirectories, and a CLOG segment past
// the one holding the next xid (a copy put there).
func TestVerifyStrayFiles(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	mustPut(t, db, "a", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	seg0, err := os.ReadFile(filepath.Join(dir, clogDir, "000000000000"))
	if err != nil {
		t.Fatal(err)
	}
	stray := []string{filepath.Join(dir, walDir, "garbage"), filepath.Join(dir, clogDir, "notes.txt"), filepath.Join(dir, clogDir, "000000000007"),
		filepath.Join(dir, heapDir, "junk"), filepath.Join(dir, vmDir, "00000000.bak"), filepath.Join(dir, "control.bak")}
	for _, p := range stray {
		if err := os.WriteFile(p, seg0, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep := reopenVerify(t, dir)
	if len(rep.Problems) != len(stray) {
		t.Fatalf("verify with %d stray files: %d problems:\n%s", len(stray), len(rep.Problems), strings.Join(rep.Problems, "\n"))
	}
	all := strings.Join(rep.Problems, "\n")
	for _, p := range stray {
		if strings.Count(all, p) != 1 {
			t.Errorf("the problems do not name %s once:\n%s", p, all)
		}
	}
}

// reopenVerify opens dir (closed at the test's end) and returns what
// Verify finds.
func reopenVerify(t *testing.T, dir string) VerifyReport {
	t.Helper()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	t.Cleanup(func() { db.Close() })
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Bytes in the CLOG where no xid has been assigned yet (here a page of
// garbage appended to the segment, right after the page holding the next
// xid) are never read: the first xid of that page starts it as zeros, as
// PostgreSQL's ExtendCLOG, and commits go on across the boundary; the
// page's next write replaces the garbage, so a restart and Verify find
// nothing wrong. Before, the first commit on that page failed with
// ErrCorruption and the database stopped taking writes.
func TestCLOGGarbagePastNextXid(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	mustPut(t, db, "a", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeGarbageCLOGPage(vfs.OS{}, dir, 1); err != nil {
		t.Fatal(err)
	}

	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	db.procs.setNext(clog.XidsPerPage - 3)
	for i := range 10 {
		mustPut(t, db, fmt.Sprintf("k%d", i), "v")
	}
	if next := db.procs.next(); next < clog.XidsPerPage+5 {
		t.Fatalf("next xid %d: the puts did not cross onto page 1", next)
	}
	if err := db.Failure(); err != nil {
		t.Fatalf("database failed: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rep := reopenVerify(t, dir)
	if len(rep.Problems) != 0 {
		t.Errorf("verify after the garbage page was reached:\n%s", strings.Join(rep.Problems, "\n"))
	}
}

// The same after a crash: the page was started as zeros in memory only,
// never written, and the garbage is still in the file when recovery reads
// it. Every xid on it lies past the redo point, so recovery rebuilds it
// from the WAL; every commit is there.
func TestCLOGGarbagePastNextXidCrash(t *testing.T) {
	m := memDB(t)
	db := openTest(t, "/db", Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	mustPut(t, db, "a", "1")
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := writeGarbageCLOGPage(m, "/db", 1); err != nil {
		t.Fatal(err)
	}
	db.procs.setNext(clog.XidsPerPage - 3)
	for i := range 10 {
		mustPut(t, db, fmt.Sprintf("k%d", i), "v")
	}
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, "/db", Options{FS: crashed, Autovacuum: noAutovacuum})
	defer db.Close()
	for i := range 10 {
		if v, ok := get(t, db, fmt.Sprintf("k%d", i)); !ok || v != "v" {
			t.Errorf("k%d after the crash: %q, %v", i, v, ok)
		}
	}
	mustPut(t, db, "after", "x")
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		t.Errorf("verify:\n%s", strings.Join(rep.Problems, "\n"))
	}
}

// writeGarbageCLOGPage writes a page of bytes that are no CLOG page where
// CLOG page pageno of the data directory dir goes, and syncs it.
func writeGarbageCLOGPage(fsys vfs.FS, dir string, pageno uint64) error {
	name, off := clog.XidFile(pageno * clog.XidsPerPage)
	f, err := fsys.Open(filepath.Join(dir, clogDir, name))
	if err != nil {
		return err
	}
	_, err = f.WriteAt(bytes.Repeat([]byte{0xa5}, clog.PageSize), off-off%clog.PageSize)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// A directory in wal/ that is not the engine's (an archive directory a
// user made there, say) is a stranger like a stray file: Open goes on, and
// Verify names it. Before, recovery's fsync of the WAL files opened every
// name in wal/ for writing, and Open failed with a bare "is a directory".
func TestStrangerDirectoryInWAL(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	mustPut(t, db, "a", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, walDir, "archive")
	if err := os.Mkdir(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	rep := reopenVerify(t, dir)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], stray) {
		t.Fatalf("verify with the directory %s in the WAL directory: %d problems:\n%s", stray, len(rep.Problems), strings.Join(rep.Problems, "\n"))
	}
}

// A directory named as a WAL segment (one past the end of the log, or one
// being prepared) is no stranger: recovery would read it as a segment and
// the writer would create one there. Open fails with ErrCorruption naming
// it and saying to move it away, rather than with a bare "is a directory";
// once it is gone, the database opens with its data.
func TestSegmentNamedDirectoryInWAL(t *testing.T) {
	for _, name := range []string{"0000000009000000", "0000000009000000.tmp"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
			mustPut(t, db, "a", "1")
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			bad := filepath.Join(dir, walDir, name)
			if err := os.Mkdir(bad, 0o755); err != nil {
				t.Fatal(err)
			}
			db, err := Open(dir, Options{Autovacuum: noAutovacuum, WALSegmentSize: 1 << 20})
			if err == nil {
				db.Close()
				t.Fatalf("Open with the directory %s in the WAL directory succeeded", bad)
			}
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), bad+" is a directory where the WAL segment file") || !strings.Contains(err.Error(), "move it away") {
				t.Fatalf("Open with the directory %s in the WAL directory: %v; want ErrCorruption naming it and saying to move it away", bad, err)
			}
			if err := os.Remove(bad); err != nil {
				t.Fatal(err)
			}
			db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
			defer db.Close()
			if v, ok := get(t, db, "a"); !ok || v != "1" {
				t.Fatalf("a = %q, %v after the directory was moved away", v, ok)
			}
		})
	}
}

// After a crash, a CLOG page taken for torn is checked against the commit
// and abort records the WAL still holds; a status whose record went with
// a removed segment cannot be checked that way. A flip that makes such a
// status sub-committed, which no write stores, is damage all the same:
// Open refuses the page, naming it and the xid, and leaves it as it found
// it. Before, the page was accepted as torn and the key of that xid read
// as never written.
func TestCLOGTornPageSubCommittedWithoutRecord(t *testing.T) {
	m := memDB(t)
	opts := Options{FS: m, Autovacuum: noAutovacuum, CheckpointTimeout: -1, WALSegmentSize: 1 << 20}
	db := openTest(t, "/db", opts)
	mustPut(t, db, "old", "v")
	oldXid := db.procs.next() - 1
	if st, err := db.clog.Status(oldXid); err != nil || st != clog.StatusCommitted {
		t.Fatalf("xid %d of the put: %v, %v", oldXid, st, err)
	}
	// Past two segments, so that the checkpoint removes the one holding
	// the put's commit record.
	big := strings.Repeat("x", 1000)
	for i := range 2500 {
		mustPut(t, db, fmt.Sprintf("fill%04d", i), big)
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Commits on page 0 after the checkpoint: page 0 may be written
	// again, and torn.
	for i := range 3 {
		mustPut(t, db, fmt.Sprintf("mid%d", i), "m")
	}
	if err := db.clog.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	crashed := m.CrashCopy(vfs.DropUnsynced, nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := wal.NewReader(crashed, "/db/"+walDir, 0)
	if err != nil {
		t.Fatalf("reading the crash copy's WAL, to check that xid %d's record is gone: %v", oldXid, err)
	}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.XID == oldXid {
			t.Fatalf("the WAL still holds a record of xid %d: the test needs it gone", oldXid)
		}
	}
	r.Close()
	// Committed (01) to sub-committed (11).
	const clogFile = "/db/clog/000000000000"
	flipFileBitsIn(t, crashed, clogFile, int64(16+oldXid/4), 2<<(2*(oldXid%4)))
	damaged, err := readMemFile(crashed, clogFile)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("xid %d reads sub-committed", oldXid)
	_, err = Open("/db", Options{FS: crashed, Autovacuum: noAutovacuum})
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), clogFile+" at offset 0") || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open: %v; want ErrCorruption naming %s and saying %q", err, clogFile, want)
	}
	t.Log(err)
	if got, err := readMemFile(crashed, clogFile); err != nil || !bytes.Equal(got, damaged) {
		t.Fatalf("the refused Open wrote to the CLOG (%d bytes, were %d; %v)", len(got), len(damaged), err)
	}
}
