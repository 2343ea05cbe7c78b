package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// backupWorkload runs transfers between accounts (the sum of balances
// never changes), each also counting itself in its writer's ledger key,
// plus out-of-line values written and deleted, until stop is closed. It
// returns, per writer, the ledger count acknowledged so far.
type backupWorkload struct {
	db       *DB
	accounts int
	acked    []atomic.Int64 // per writer: ledger count whose commit returned
	wg       sync.WaitGroup
	stop     chan struct{}
	failed   atomic.Pointer[error]
}

const backupBalance = 1000

func accountKey(i int) []byte { return fmt.Appendf(nil, "acct%05d", i) }
func ledgerKey(w int) []byte  { return fmt.Appendf(nil, "ledger%d", w) }

// balanceValue pads a balance so that a page holds few accounts and the
// heap spans many pages.
func balanceValue(n int) []byte {
	return fmt.Appendf(nil, "%d|%s", n, bytes.Repeat([]byte{'x'}, 150))
}

func parseBalance(v []byte) (int, error) {
	s, _, _ := bytes.Cut(v, []byte{'|'})
	return strconv.Atoi(string(s))
}

func startBackupWorkload(t *testing.T, db *DB, accounts, writers int) *backupWorkload {
	t.Helper()
	ctx := context.Background()
	if err := db.Update(ctx, func(tx *Txn) error {
		for i := range accounts {
			if err := tx.Put(accountKey(i), balanceValue(backupBalance)); err != nil {
				return err
			}
		}
		for w := range writers {
			if err := tx.Put(ledgerKey(w), []byte("0")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Vacuum sets map bits, so that the map has pages to copy.
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	wl := &backupWorkload{db: db, accounts: accounts, acked: make([]atomic.Int64, writers), stop: make(chan struct{})}
	fail := func(err error) {
		if !errors.Is(err, ErrClosed) {
			wl.failed.CompareAndSwap(nil, &err)
		}
	}
	for w := range writers {
		wl.wg.Add(1)
		go func() {
			defer wl.wg.Done()
			rng := rand.New(rand.NewSource(int64(w) + 1))
			for n := int64(1); ; n++ {
				select {
				case <-wl.stop:
					return
				default:
				}
				// Two accounts, never one twice: every transaction
				// writes the ledger.
				a, b := rng.Intn(accounts), rng.Intn(accounts-1)
				if b >= a {
					b++
				}
				amt := rng.Intn(50)
				if a > b {
					// Rows locked in key order: two transfers between
					// the same accounts in opposite directions would
					// otherwise deadlock now and then, failing the test.
					a, b, amt = b, a, -amt
				}
				err := db.Update(ctx, func(tx *Txn) error {
					for _, k := range []struct {
						i, d int
					}{{a, -amt}, {b, amt}} {
						if err := tx.Update(accountKey(k.i), func(old []byte, found bool) ([]byte, error) {
							v, err := parseBalance(old)
							if err != nil || !found {
								return nil, fmt.Errorf("account %d: %q %v", k.i, old, err)
							}
							return balanceValue(v + k.d), nil
						}); err != nil {
							return err
						}
					}
					if w == 0 && n%7 == 0 {
						// An out-of-line value, written or deleted.
						key := fmt.Appendf(nil, "big%d", n%5)
						if n%2 == 0 {
							return tx.Delete(key)
						}
						return tx.Put(key, bytes.Repeat([]byte{byte(n)}, 20000))
					}
					return tx.Put(ledgerKey(w), strconv.AppendInt(nil, n, 10))
				})
				if err != nil {
					fail(err)
					return
				}
				if w == 0 && n%7 == 0 {
					// The ledger was not written: do it alone.
					if err := db.Update(ctx, func(tx *Txn) error {
						return tx.Put(ledgerKey(w), strconv.AppendInt(nil, n, 10))
					}); err != nil {
						fail(err)
						return
					}
				}
				wl.acked[w].Store(n)
			}
		}()
	}
	return wl
}

// waitAcked returns once writer 1 has n ledger counts acknowledged, or
// the workload failed or stopped.
func (wl *backupWorkload) waitAcked(n int64) {
	for wl.ackedNow()[1] < n && wl.failed.Load() == nil {
		select {
		case <-wl.stop:
			return
		default:
			runtime.Gosched()
		}
	}
}

// ackedNow returns each writer's acknowledged ledger count.
func (wl *backupWorkload) ackedNow() []int64 {
	out := make([]int64, len(wl.acked))
	for i := range wl.acked {
		out[i] = wl.acked[i].Load()
	}
	return out
}

func (wl *backupWorkload) finish(t *testing.T) {
	t.Helper()
	close(wl.stop)
	wl.wg.Wait()
	if p := wl.failed.Load(); p != nil {
		t.Fatalf("workload: %v", *p)
	}
}

// checkBackupCopy opens the copy at dir on fsys and checks it: Verify
// finds nothing, the balances sum as loaded, and each writer's ledger
// lies between what was acknowledged before the backup began (lo) and one
// past what was acknowledged when it returned (hi+1, a commit in flight).
func checkBackupCopy(t *testing.T, fsys vfs.FS, dir string, accounts int, lo, hi []int64) {
	t.Helper()
	db := openVerifiedCopy(t, fsys, dir, 1<<20)
	// The copy's index file is of its checkpoint, and its WAL reaches as
	// far as the file's heads need: Open uses it.
	if ri := db.Recovery(); !ri.IndexFromFile {
		t.Fatalf("the copy rebuilt its index from the heap: %s", ri.IndexRebuildReason)
	}
	sum := 0
	if err := db.View(context.Background(), func(tx *Txn) error {
		sum = 0
		for i := range accounts {
			v, err := tx.Get(accountKey(i))
			if err != nil {
				return fmt.Errorf("account %d: %w", i, err)
			}
			n, err := parseBalance(v)
			if err != nil {
				return err
			}
			sum += n
		}
		for w := range lo {
			v, err := tx.Get(ledgerKey(w))
			if err != nil {
				return err
			}
			n, _ := strconv.ParseInt(string(v), 10, 64)
			if n < lo[w] || n > hi[w]+1 {
				return fmt.Errorf("writer %d's ledger reads %d in the copy: acknowledged %d before the backup began, %d when it returned", w, n, lo[w], hi[w])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sum != accounts*backupBalance {
		t.Fatalf("balances in the copy sum to %d, want %d", sum, accounts*backupBalance)
	}
}

// openVerifiedCopy opens the backup at dir on fsys with a WAL segment
// size of segSize, fails t unless Verify finds nothing in it, and closes
// it when the test ends.
func openVerifiedCopy(t *testing.T, fsys vfs.FS, dir string, segSize int64) *DB {
	t.Helper()
	c, err := Open(dir, Options{FS: fsys, SharedBuffers: 2 << 20, WALSegmentSize: segSize, CheckpointTimeout: -1})
	if err != nil {
		t.Fatalf("open the copy %s: %v", dir, err)
	}
	t.Cleanup(func() { c.Close() })
	if rep, err := c.Verify(); err != nil || !rep.OK() {
		t.Fatalf("verify the copy %s: %v %v", dir, err, rep.Problems)
	}
	return c
}

// TestBackupWhileWriting takes a backup while writers move balances and
// out-of-line values change, through a buffer pool much smaller than the
// heap (so pages are evicted and written while they are copied), across
// several WAL segments: the copy opens, verifies, keeps the sum of
// balances, holds every commit acknowledged before Backup began and none
// begun after it returned. A power loss right after Backup returns loses
// none of it; one while it runs leaves no target directory, only the
// ".partial" one, and the source recovers.
func TestBackupWhileWriting(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{SharedBuffers: 160 << 10})
	defer db.Close()
	const accounts, writers = 1500, 3
	wl := startBackupWorkload(t, db, accounts, writers)
	wl.waitAcked(50)

	// Crash copies of the file system at some operations during the
	// backup.
	var during atomic.Bool
	var ops atomic.Int64
	var mu sync.Mutex
	var midway []*vfs.MemFS
	m.SetOpHook(func(p vfs.CrashPoint) {
		if !during.Load() {
			return
		}
		if n := ops.Add(1); n%97 == 0 && len(midway) < 4 {
			mu.Lock()
			midway = append(midway, p.CrashCopy(vfs.DropUnsynced, nil))
			mu.Unlock()
		}
	})
	lo := wl.ackedNow()
	during.Store(true)
	info, err := db.Backup(context.Background(), "/backup")
	during.Store(false)
	hi := wl.ackedNow()
	m.SetOpHook(nil)
	if err != nil {
		t.Fatal(err)
	}
	afterPowerLoss := m.CrashCopy(vfs.DropUnsynced, nil)
	wl.waitAcked(hi[1] + 20)
	wl.finish(t)
	t.Logf("backup: %+v; ledgers %v before it, %v after", info, lo, hi)
	if info.HeapPages < 40 || info.MapPages < 1 || info.EndLSN <= info.StartLSN || info.WALSegments < 1 {
		t.Fatalf("backup copied too little to test anything: %+v", info)
	}

	checkBackupCopy(t, m, "/backup", accounts, lo, hi)
	checkBackupCopy(t, afterPowerLoss, "/backup", accounts, lo, hi)
	if len(midway) == 0 {
		t.Fatal("no crash copy taken during the backup")
	}
	for i, c := range midway {
		if _, err := c.Stat("/backup"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("crash copy %d taken during the backup holds /backup (%v)", i, err)
		}
		src, err := Open("/db", Options{FS: c, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
		if err != nil {
			t.Fatalf("crash copy %d: open the source: %v", i, err)
		}
		src.Close()
	}

	// A second backup into the same place is refused, as is one where a
	// cut-short one left its ".partial" directory.
	if _, err := db.Backup(context.Background(), "/backup"); !errors.Is(err, ErrBackupTargetExists) {
		t.Fatalf("backup over an existing copy: %v, want ErrBackupTargetExists", err)
	}
	for _, inside := range []string{"/db", "/db/copy", "/db/heap/x"} {
		if _, err := db.Backup(context.Background(), inside); err == nil || !strings.Contains(err.Error(), "inside the data directory") {
			t.Fatalf("backup into %s: %v, want a refusal", inside, err)
		}
	}
	if err := m.MkdirAll("/b2.partial"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Backup(context.Background(), "/b2"); !errors.Is(err, ErrBackupTargetExists) {
		t.Fatalf("backup beside a .partial directory: %v, want ErrBackupTargetExists", err)
	}
}

// TestBackupOfIdleDatabase backs up a database nothing writes to, twice
// (the second checkpoint is skipped as idle), and after Close.
func TestBackupOfIdleDatabase(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	ctx := context.Background()
	if err := db.Update(ctx, func(tx *Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/b1", "/b2"} {
		if _, err := db.Backup(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if _, err := db.Backup(ctx, "/b3"); !errors.Is(err, ErrClosed) {
		t.Fatalf("backup after Close: %v, want ErrClosed", err)
	}
	for _, dir := range []string{"/b1", "/b2"} {
		c, err := Open(dir, Options{FS: m, WALSegmentSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := get(t, c, "k"); !ok || v != "v" {
			t.Fatalf("%s: k = %q, found %v", dir, v, ok)
		}
		c.Close()
	}
}

// TestBackupRefusesDataDirectoryThroughLinks: a target inside the data
// directory is refused however it is named, through a symbolic link to
// the data directory or to a directory in it, or from a database opened
// through a link; a target reached through a link to somewhere else is
// taken. The check used to compare the paths as written only, and a
// BACKUP into LINK/heap/x wrote the copy into the heap directory, where
// mvkv verify then reported it as a stray file.
func TestBackupRefusesDataDirectoryThroughLinks(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	for _, l := range [][2]string{{"data", "link"}, {"data/heap", "heaplink"}, {"elsewhere", "out"}} {
		if err := os.MkdirAll(filepath.Join(root, l[0]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, l[0]), filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, opened := range []string{data, filepath.Join(root, "link")} {
		db := openTest(t, opened, Options{})
		mustPut(t, db, "k", "v")
		for _, inside := range []string{"link/copy", "link/heap/x", "heaplink/x", "data/copy", "link/nothere/copy"} {
			_, err := db.Backup(ctx, filepath.Join(root, inside))
			if err == nil || !strings.Contains(err.Error(), "inside the data directory") {
				t.Fatalf("opened as %s: backup into %s: %v, want a refusal", opened, inside, err)
			}
		}
		target := filepath.Join(root, "out", filepath.Base(opened))
		if _, err := db.Backup(ctx, target); err != nil {
			t.Fatalf("opened as %s: backup through a link to another directory: %v", opened, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	names, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		switch e.Name() {
		case "control", "LOCK", "wal", "heap", "vm", "clog", "index":
		default:
			t.Errorf("data directory holds %s", e.Name())
		}
	}
	if names, err := os.ReadDir(filepath.Join(data, "heap")); err != nil || len(names) != 1 {
		t.Errorf("heap directory holds %v (%v), want its one segment", names, err)
	}
}

// TestBackupRefusesDataDirectoryThroughBindMount: a target reached through
// a bind mount of the data directory, or of a directory above it, is
// refused; the check resolved symbolic links only, and such a target got
// the copy written into the heap directory. Needs the right to mount
// (root); skipped without it.
func TestBackupRefusesDataDirectoryThroughBindMount(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bind mounts are Linux's")
	}
	root := t.TempDir()
	data := filepath.Join(root, "above", "data")
	for _, d := range []string{data, filepath.Join(root, "m1"), filepath.Join(root, "m2")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount := func(src, dst string) {
		if out, err := exec.Command("mount", "--bind", src, dst).CombinedOutput(); err != nil {
			t.Skipf("cannot bind-mount here: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", dst).Run() })
	}
	mount(data, filepath.Join(root, "m1"))
	mount(filepath.Join(root, "above"), filepath.Join(root, "m2"))
	db := openTest(t, data, Options{})
	defer db.Close()
	mustPut(t, db, "k", "v")
	for _, inside := range []string{"m1/copy", "m1/heap/x", "m2/data/copy", "m2/data/nothere/copy"} {
		_, err := db.Backup(context.Background(), filepath.Join(root, inside))
		if err == nil || !strings.Contains(err.Error(), "inside the data directory") {
			t.Errorf("backup into %s: %v, want a refusal", inside, err)
		}
	}
	if _, err := db.Backup(context.Background(), filepath.Join(root, "m2", "beside")); err != nil {
		t.Errorf("backup beside the data directory through the mount: %v", err)
	}
}

// TestBackupRefusesDirectoryInsideDataDirectoryThroughBindMount: a target
// reached through a bind mount of a directory inside the data directory
// (its heap or WAL directory) is refused too; only the data directory and
// the directories above it were compared, and the copy was written into
// the WAL directory, where verify then reported it as a stray file.
// Needs the right to mount (root); skipped without it.
func TestBackupRefusesDirectoryInsideDataDirectoryThroughBindMount(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bind mounts are Linux's")
	}
	root := t.TempDir()
	data := filepath.Join(root, "data")
	db := openTest(t, data, Options{})
	defer db.Close()
	mustPut(t, db, "k", "v")
	for _, sub := range []string{"wal", "heap"} {
		m := filepath.Join(root, "m-"+sub)
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "--bind", filepath.Join(data, sub), m).CombinedOutput(); err != nil {
			t.Skipf("cannot bind-mount here: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", m).Run() })
		for _, target := range []string{filepath.Join(m, "copy"), filepath.Join(m, "a", "b", "copy")} {
			_, err := db.Backup(context.Background(), target)
			if err == nil || !strings.Contains(err.Error(), "inside the data directory") {
				t.Errorf("backup into %s: %v, want a refusal", target, err)
			}
		}
		if names, err := os.ReadDir(filepath.Join(data, sub)); err != nil {
			t.Fatal(err)
		} else {
			for _, n := range names {
				if n.IsDir() {
					t.Errorf("%s holds the directory %s after the refused backups", sub, n.Name())
				}
			}
		}
	}
}

// TestBackupRefusesTargetWhoseCopyDirectoryIsTheDataDirectory: with the
// data directory named X.partial, a backup into X is refused as such; it
// was refused as a target whose ".partial" a backup cut short had left,
// "which can then be removed", naming the data directory.
func TestBackupRefusesTargetWhoseCopyDirectoryIsTheDataDirectory(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "live.partial")
	db := openTest(t, data, Options{})
	defer db.Close()
	mustPut(t, db, "k", "v")
	if err := os.Symlink(root, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{filepath.Join(root, "live"), filepath.Join(root, "link", "live")} {
		_, err := db.Backup(context.Background(), target)
		if err == nil || !strings.Contains(err.Error(), "is the data directory") || strings.Contains(err.Error(), "removed") {
			t.Errorf("backup into %s: %v, want a refusal naming the data directory", target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "control")); err != nil {
		t.Errorf("the data directory: %v", err)
	}
}

// TestBackupRefusesDanglingLink: a target that is a symbolic link to
// nothing is refused before anything is copied. The existence check
// followed the link and found nothing, and the backup copied the whole
// database before its rename failed with "not a directory".
func TestBackupRefusesDanglingLink(t *testing.T) {
	root := t.TempDir()
	db := openTest(t, filepath.Join(root, "data"), Options{})
	defer db.Close()
	mustPut(t, db, "k", "v")
	for _, name := range []string{"copy", "copy.partial"} {
		link := filepath.Join(root, name)
		if err := os.Symlink(filepath.Join(root, "nowhere"), link); err != nil {
			t.Fatal(err)
		}
		before := db.Stats().Checkpoint.Count
		_, err := db.Backup(context.Background(), filepath.Join(root, "copy"))
		if !errors.Is(err, ErrBackupTargetExists) || !strings.Contains(err.Error(), "symbolic link") {
			t.Fatalf("backup with %s a dangling link: %v, want ErrBackupTargetExists naming the link", name, err)
		}
		if after := db.Stats().Checkpoint.Count; after != before {
			t.Errorf("backup with %s a dangling link ran a checkpoint (%d, then %d) before refusing", name, before, after)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s after the refusal: %v, %v; want the link left", name, fi, err)
		}
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
	}
	// A dangling link where a parent of the target goes is named as
	// such (MkdirAll's error was a bare "file exists").
	if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "parent")); err != nil {
		t.Fatal(err)
	}
	_, err := db.Backup(context.Background(), filepath.Join(root, "parent", "copy"))
	if err == nil || !strings.Contains(err.Error(), "parent is a symbolic link to nothing") {
		t.Fatalf("backup under a dangling link: %v, want an error naming the link", err)
	}
}

// TestBackupIntoNewParentsSurvivesPowerLoss: a backup into a directory
// whose parents it had to create (README's /srv/backups/... on a host
// with no /srv/backups yet) is there after a power loss right after it
// returned. Only the directory holding the target used to be synced, and
// the new parents' entries, with the copy under them, were lost.
func TestBackupIntoNewParentsSurvivesPowerLoss(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	defer db.Close()
	mustPut(t, db, "k", "v")
	ctx := context.Background()
	if _, err := db.Backup(ctx, "/srv/backups/b1"); err != nil {
		t.Fatal(err)
	}
	lost := m.CrashCopy(vfs.DropUnsynced, nil)
	if _, err := lost.Stat("/srv/backups/b1/control"); err != nil {
		t.Fatalf("after a power loss: %v", err)
	}
	c, err := Open("/srv/backups/b1", Options{FS: lost, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatalf("open the copy after a power loss: %v", err)
	}
	defer c.Close()
	if v, ok := get(t, c, "k"); !ok || v != "v" {
		t.Fatalf("k = %q, found %v", v, ok)
	}
}

// TestBackupCopiesMapBits backs up a database created in the same run,
// whose visibility map file vacuum created after Open: the copy's map
// holds the bits (a map copied empty would open and verify, only slower).
func TestBackupCopiesMapBits(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{})
	defer db.Close()
	ctx := context.Background()
	for i := range 200 {
		if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(fmt.Appendf(nil, "k%d", i), make([]byte, 300)) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := db.Backup(ctx, "/bk")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open("/bk", Options{FS: m, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for blk := range uint32(info.HeapPages) {
		want, err := db.vm.Test(blk)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.vm.TestStored(blk)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("heap block %d: map bits %v in the copy, %v in the source", blk, got, want)
		}
	}
}
