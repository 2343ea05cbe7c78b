package engine

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mvkv/wal"
)

var killPoints = flag.Int("crash.kills", 20, "SIGKILL crash points in TestKillDuringWorkload")

const (
	crashAccounts = 1000
	crashTellers  = 10
	crashBranches = 2
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("MVKV_CRASH_CHILD"); dir != "" {
		os.Exit(crashChild(dir))
	}
	if dir := os.Getenv("MVKV_LARGE_CHILD"); dir != "" {
		os.Exit(largeChild(dir))
	}
	os.Exit(m.Run())
}

func i64(v []byte) int64 {
	if len(v) < 8 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(v))
}

func enc64(n int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }

func addDelta(delta int64) func([]byte, bool) ([]byte, error) {
	return func(old []byte, found bool) ([]byte, error) {
		if !found {
			return nil, errors.New("row missing")
		}
		return enc64(i64(old) + delta), nil
	}
}

// tpcbTxn runs one TPC-B-like transaction (account, teller, branch updates
// and a history row) and returns the history key.
func tpcbTxn(ctx context.Context, db *DB, r *rand.Rand, client, seq int, run int64) (string, int64, error) {
	aid, tid, bid := r.IntN(crashAccounts), r.IntN(crashTellers), r.IntN(crashBranches)
	delta := int64(r.IntN(10001) - 5000)
	hk := fmt.Sprintf("h:%d:%d:%d", run, client, seq)
	tx, err := db.Begin(ctx, TxnOptions{})
	if err != nil {
		return "", 0, err
	}
	for _, k := range []string{fmt.Sprintf("a:%04d", aid), fmt.Sprintf("t:%02d", tid), fmt.Sprintf("b:%d", bid)} {
		if err := tx.Update([]byte(k), addDelta(delta)); err != nil {
			tx.Rollback()
			return "", 0, err
		}
	}
	if err := tx.Put([]byte(hk), enc64(delta)); err != nil {
		tx.Rollback()
		return "", 0, err
	}
	return hk, delta, tx.Commit()
}

// loadTPCB creates a data directory in dir holding the TPC-B tables. Its
// WAL segments are the smallest allowed (1 MiB), which the directory keeps
// whatever later Opens ask: the tests that copy it, once per crash they
// simulate, then copy and preallocate a sixteenth of the default's bytes,
// and cross segment boundaries more often.
func loadTPCB(t *testing.T, dir string) {
	db := openTest(t, dir, Options{WALSegmentSize: 1 << 20})
	err := db.Update(context.Background(), func(tx *Txn) error {
		for i := 0; i < crashAccounts; i++ {
			if err := tx.Put([]byte(fmt.Sprintf("a:%04d", i)), enc64(0)); err != nil {
				return err
			}
		}
		for i := 0; i < crashTellers; i++ {
			tx.Put([]byte(fmt.Sprintf("t:%02d", i)), enc64(0))
		}
		for i := 0; i < crashBranches; i++ {
			tx.Put([]byte(fmt.Sprintf("b:%d", i)), enc64(0))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkTPCB verifies the TPC-B invariant and that every acknowledged
// history row is present.
func checkTPCB(t *testing.T, db *DB, acked map[string]int64) int {
	t.Helper()
	var sums [4]int64
	hist := map[string]int64{}
	err := db.View(context.Background(), func(tx *Txn) error {
		return tx.Scan(nil, nil, func(k, v []byte) bool {
			switch k[0] {
			case 'a':
				sums[0] += i64(v)
			case 't':
				sums[1] += i64(v)
			case 'b':
				sums[2] += i64(v)
			case 'h':
				sums[3] += i64(v)
				hist[string(k)] = i64(v)
			}
			return true
		})
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if sums[0] != sums[1] || sums[1] != sums[2] || sums[2] != sums[3] {
		t.Fatalf("TPC-B invariant violated: accounts=%d tellers=%d branches=%d history=%d", sums[0], sums[1], sums[2], sums[3])
	}
	for k, d := range acked {
		if got, ok := hist[k]; !ok || got != d {
			t.Fatalf("acknowledged commit %s (delta %d) lost after crash (found=%v)", k, d, ok)
		}
	}
	return len(hist)
}

func crashChild(dir string) int {
	db, err := Open(dir, Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20, MaxWALSize: 4 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	var mu sync.Mutex
	out := os.Stdout
	fmt.Fprintln(out, "ready")
	run := time.Now().UnixNano()
	var wg sync.WaitGroup
	// Frequent checkpoints, so that kills land during them too: writing
	// pages, the CLOG and the control file while commits go on.
	go func() {
		for {
			time.Sleep(15 * time.Millisecond)
			if err := db.Checkpoint(); err != nil {
				fmt.Fprintln(os.Stderr, "checkpoint:", err)
				os.Exit(4)
			}
		}
	}()
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(run), uint64(c)))
			for seq := 0; ; seq++ {
				hk, d, err := tpcbTxn(context.Background(), db, r, c, seq, run)
				if err != nil {
					if errors.Is(err, ErrDeadlock) || errors.Is(err, ErrSerializationFailure) {
						continue
					}
					fmt.Fprintln(os.Stderr, "txn:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d\n", hk, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 0
}

// TestKillDuringWorkload runs a TPC-B-like workload in a child process,
// kills it with SIGKILL at a random moment, reopens, and checks that every
// acknowledged commit is present and no transaction is partly visible.
func TestKillDuringWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := testSeed(t, 0)
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	loadTPCB(t, dir)
	acked := map[string]int64{}
	for i := 0; i < *killPoints; i++ {
		cmd, l, lines, stderr := startChild(t, "MVKV_CRASH_CHILD="+dir)
		if l != "ready" {
			t.Fatalf("child said %q; stderr: %s", l, stderr.String())
		}
		time.Sleep(time.Duration(10+r.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		n := 0
		for l := range lines {
			var hk string
			var d int64
			if _, err := fmt.Sscanf(l, "ack %s %d", &hk, &d); err == nil {
				acked[hk] = d
				n++
			}
		}
		cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Fatalf("child stderr: %s", s)
		}
		db := openTest(t, dir, Options{})
		rows := checkTPCB(t, db, acked)
		if rep, err := db.Verify(); err != nil || !rep.OK() {
			t.Fatalf("verify after kill %d: %v\n%s", i, err, rep)
		}
		t.Logf("kill %d: %d acknowledged in this run, %d history rows, recovery replayed %d records", i, n, rows, db.Recovery().Records)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// copyDir copies a data directory, open or not. A file that vanishes
// during the walk (the WAL's next segment, prepared under a temporary name
// and renamed) is left out, as a crash at that moment could leave it out.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if info.Name() == lockName {
			return nil
		}
		in, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryWithoutCheckpoint copies a live data directory (what a crash
// leaves behind when the operating system survives) and opens the copy.
func TestRecoveryWithoutCheckpoint(t *testing.T) {
	dir := t.TempDir()
	loadTPCB(t, dir)
	db := openTest(t, dir, Options{})
	r := rand.New(rand.NewPCG(1, 2))
	acked := map[string]int64{}
	for i := 0; i < 300; i++ {
		hk, d, err := tpcbTxn(context.Background(), db, r, 0, i, 1)
		if err != nil {
			t.Fatal(err)
		}
		acked[hk] = d
	}
	// An open transaction with writes must vanish.
	open, _ := db.Begin(context.Background(), TxnOptions{})
	open.Update([]byte("a:0001"), addDelta(777))
	db.wal.FlushAll()
	crash := t.TempDir()
	copyDir(t, dir, crash)
	open.Rollback()
	db.Close()

	db2 := openTest(t, crash, Options{})
	defer db2.Close()
	if db2.Recovery().Records == 0 {
		t.Fatal("nothing replayed")
	}
	if n := checkTPCB(t, db2, acked); n != 300 {
		t.Fatalf("%d history rows, want 300", n)
	}
}

// TestTornWALTail damages the end of the WAL at many offsets inside the last
// transaction's records: recovery must cut the tail there and keep every
// earlier transaction whole.
func TestTornWALTail(t *testing.T) {
	dir := t.TempDir()
	loadTPCB(t, dir)
	db := openTest(t, dir, Options{CheckpointTimeout: -1})
	r := rand.New(rand.NewPCG(3, 4))
	acked := map[string]int64{}
	var last string
	for i := 0; i < 50; i++ {
		hk, d, err := tpcbTxn(context.Background(), db, r, 0, i, 1)
		if err != nil {
			t.Fatal(err)
		}
		acked[hk] = d
		last = hk
	}
	base := t.TempDir()
	copyDir(t, dir, base)
	db.Close()
	delete(acked, last) // the damaged transaction may or may not survive

	// Find the last transaction's records in the copy.
	rd, err := wal.NewReader(vfsOS, filepath.Join(base, walDir), 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []wal.Record
	for {
		rec, err := rd.Next()
		if err != nil {
			break
		}
		recs = append(recs, rec)
	}
	rd.Close()
	lastXid := recs[len(recs)-1].XID
	first := len(recs) - 1
	for first > 0 && recs[first-1].XID == lastXid {
		first--
	}
	from, to := uint64(recs[first].LSN), uint64(recs[len(recs)-1].End)
	segs, _ := os.ReadDir(filepath.Join(base, walDir))
	var seg string
	var segStart uint64
	for _, s := range segs {
		var start uint64
		if _, err := fmt.Sscanf(s.Name(), "%016X", &start); err == nil && start <= from {
			seg, segStart = s.Name(), start
		}
	}
	for cut := from; cut < to; cut += max(1, (to-from)/23) {
		for _, mode := range []string{"truncate", "zero", "garbage"} {
			crash := t.TempDir()
			copyDir(t, base, crash)
			p := filepath.Join(crash, walDir, seg)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			off := int64(cut - segStart)
			switch mode {
			case "truncate":
				f.Truncate(off)
			case "zero":
				f.WriteAt(make([]byte, 512), off)
			case "garbage":
				g := make([]byte, 64)
				for i := range g {
					g[i] = byte(r.Uint32())
				}
				f.WriteAt(g, off)
			}
			f.Close()
			if mode == "truncate" {
				// A segment shorter than the segment size is damage no
				// crash makes, and the log ends at the cut: the records
				// past it are lost, so Open names the file and changes
				// nothing.
				before := dirDigest(t, crash)
				_, err := Open(crash, Options{})
				if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "cut short") {
					t.Fatalf("WAL cut at %d: Open: %v; want ErrCorruption naming %s as cut short", cut, err, p)
				}
				if after := dirDigest(t, crash); !maps.Equal(before, after) {
					t.Fatalf("Open changed the directory:\nbefore %v\nafter  %v", before, after)
				}
				continue
			}
			db := openTest(t, crash, Options{})
			checkTPCB(t, db, acked)
			// The database keeps working after the cut.
			if _, _, err := tpcbTxn(context.Background(), db, r, 1, 0, 2); err != nil {
				t.Fatalf("write after recovery (cut %d, %s): %v", cut, mode, err)
			}
			db.Close()
			db = openTest(t, crash, Options{})
			checkTPCB(t, db, acked)
			db.Close()
		}
	}
}

// startChild starts this test binary as a child process with env added,
// and returns it with its stdout lines and its stderr so far, after the
// child's first line (returned as ready), which must come within a minute.
func startChild(t *testing.T, env string) (cmd *exec.Cmd, ready string, lines <-chan string, stderr *strings.Builder) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	stdout, _ := cmd.StdoutPipe()
	stderr = &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("child exited before its first line; stderr: %s", stderr.String())
		}
		return cmd, l, ch, stderr
	case <-time.After(60 * time.Second):
		t.Fatalf("child never became ready; stderr: %s", stderr.String())
	}
	return nil, "", nil, nil
}
