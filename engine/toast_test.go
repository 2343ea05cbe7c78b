package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mvkv/internal/heap"
)

// removeIndexFile removes a closed database's index file, so that the next
// Open rebuilds the index from the heap.
func removeIndexFile(dir string) error {
	return os.Remove(filepath.Join(dir, indexFileName))
}

// hugeValue runs TestHugeValue, which stores and reads back one value of
// 512 MiB (Redis's proto-max-bulk-len): about 1.5 GiB of memory and disk
// and a minute or more, so not in the default run:
//
//	go test ./engine -run TestHugeValue -toast.huge
var hugeValue = flag.Bool("toast.huge", false, "run TestHugeValue: one 512 MiB value (needs ~1.5 GiB of memory and disk)")

// toastSample is TestCrashLadderLargeValues's own sampling of crash
// points. Each of its crash copies holds megabytes that are opened three
// times and read whole, so -crash.sample=1 (every point, as the full
// ladder runs the others) would take far too long; this flag asks for a
// denser sample of this ladder alone.
var toastSample = flag.Int("toast.sample", 0, "check every Nth crash point of TestCrashLadderLargeValues (0: 300, and only without -race and -short)")

// patterned returns n bytes that differ with their position and with seed,
// so that a chunk put back in the wrong place or from the wrong value shows.
func patterned(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed*2654435761 + 1
	for i := 0; i+4 <= n; i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		binary.LittleEndian.PutUint32(b[i:], x)
	}
	for i := n &^ 3; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

// rawPointer returns the stored tuple of key's newest version: its infomask
// and its value (the pointer, for an external value).
func rawPointer(t testing.TB, db *DB, key string) (uint16, []byte) {
	t.Helper()
	e := db.idx.get([]byte(key))
	if e == nil {
		t.Fatalf("no index entry for %q", key)
	}
	v, err := db.readVersion(e.headTID(), key, true)
	if err != nil {
		t.Fatal(err)
	}
	return v.hdr.Infomask, v.val
}

// Values at every boundary of the out-of-line formats read back byte for
// byte, after a crash (WAL replay) and after a clean restart, and are
// stored in the format their size calls for.
func TestLargeValueBoundaries(t *testing.T) {
	sizes := []int{
		toastThreshold, // inline or not depending on the key
		chunkSize - 1, chunkSize, chunkSize + 1,
		2*chunkSize - 1, 2 * chunkSize, 2*chunkSize + 1,
		maxDirectChunks*chunkSize - 1, maxDirectChunks * chunkSize, // the last direct pointers
		maxDirectChunks*chunkSize + 1, // the first indirect one
		1 << 20, 1<<20 + 1,
		200*largeChunkSize - 1, 200 * largeChunkSize, 200*largeChunkSize + 1,
		tidsPerDirectory*largeChunkSize - 1, tidsPerDirectory * largeChunkSize, tidsPerDirectory*largeChunkSize + 1, // one directory full, then two
		24 << 20, // tens of MB: 18 directories
	}
	if testing.Short() || raceEnabled {
		sizes = sizes[:len(sizes)-1]
	}
	dir := t.TempDir()
	db := openTest(t, dir, Options{CheckpointTimeout: -1, Autovacuum: noAutovacuum})
	for i, n := range sizes {
		mustPut(t, db, fmt.Sprint("v", i), string(patterned(n, uint32(i))))
	}
	check := func(db *DB) {
		t.Helper()
		for i, n := range sizes {
			k := fmt.Sprint("v", i)
			got, ok := get(t, db, k)
			if !ok || got != string(patterned(n, uint32(i))) {
				t.Fatalf("value of %d bytes: found=%v, %d bytes back, equal=%v", n, ok, len(got), got == string(patterned(n, uint32(i))))
			}
			mask, ptr := rawPointer(t, db, k)
			inline := heap.TupleHeaderSize+len(k)+n <= toastThreshold
			if (mask&heap.External == 0) != inline {
				t.Fatalf("value of %d bytes: external=%v", n, !inline)
			}
			if inline {
				continue
			}
			p, err := parseToastPointer(ptr)
			if err != nil {
				t.Fatal(err)
			}
			if want := (n + p.chunkBytes() - 1) / p.chunkBytes(); p.chunks != want || p.total != n {
				t.Fatalf("value of %d bytes: pointer says %d bytes in %d chunks, want %d", n, p.total, p.chunks, want)
			}
			if p.indirect != ((n+chunkSize-1)/chunkSize > maxDirectChunks) {
				t.Fatalf("value of %d bytes (%d chunks): indirect=%v", n, p.chunks, p.indirect)
			}
		}
	}
	check(db)
	// A copy taken now is a crash: its Open replays every chunk insert.
	if err := db.wal.FlushAll(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{crash, dir} {
		db := openTest(t, d, Options{CheckpointTimeout: -1, Autovacuum: noAutovacuum})
		if d == crash && db.Recovery().Records == 0 {
			t.Error("the crash copy replayed nothing")
		}
		check(db)
		mustVerify(t, db)
		db.Close()
	}
}

// A value of 1 MiB keeps the pointer format it had before two-level
// pointers: 130 chunk TIDs in the version's tuple, so that data directories
// written before open unchanged and read the same.
func TestDirectPointerFormatUnchanged(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{})
	defer db.Close()
	val := patterned(1<<20, 7)
	mustPut(t, db, "k", string(val))
	_, ptr := rawPointer(t, db, "k")
	if len(ptr) != 8+6*130 || binary.LittleEndian.Uint32(ptr) != 1<<20 || binary.LittleEndian.Uint32(ptr[4:]) != 130 {
		t.Fatalf("pointer of %d bytes, header % x", len(ptr), ptr[:8])
	}
}

// Vacuum frees every chunk of a replaced or deleted large value, the
// directories and the data chunks they list, and the heap is back to the
// tuples that remain; a restart that rebuilds the index finds nothing left
// to free, and the freed space is reused by the next large value.
func TestVacuumFreesLargeValueChunks(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
	const n = 3 << 20
	chunks := (n + largeChunkSize - 1) / largeChunkSize
	dirs := (chunks + tidsPerDirectory - 1) / tidsPerDirectory
	mustPut(t, db, "big", string(patterned(n, 1)))
	mustPut(t, db, "gone", string(patterned(n, 2)))
	mustPut(t, db, "small", "x")
	mustPut(t, db, "big", string(patterned(n, 3))) // the first value is dead now
	mustDelete(t, db, "gone")
	// An aborted large value leaves chunks and directories no committed
	// version names.
	tx, _ := db.Begin(context.Background(), TxnOptions{})
	if err := tx.Put([]byte("aborted"), patterned(n, 4)); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	before := heapTuples(t, db)
	st := mustVacuum(t, db)
	// Three values' chunks and directories go (first big, gone, aborted).
	if want := uint64(3 * (chunks + dirs)); st.ChunksRemoved != want {
		t.Errorf("ChunksRemoved = %d, want %d (stats %+v)", st.ChunksRemoved, want, st)
	}
	if got, want := heapTuples(t, db), 2+chunks+dirs; got != want {
		t.Errorf("%d tuples left of %d, want %d", got, before, want)
	}
	if got, ok := get(t, db, "big"); !ok || got != string(patterned(n, 3)) {
		t.Fatalf("big after vacuum: found=%v len=%d", ok, len(got))
	}
	mustVerify(t, db)
	blocks := db.pool.NBlocks()
	// The space freed takes the next large value: the heap grows by less
	// than the value's pages.
	mustPut(t, db, "again", string(patterned(n, 5)))
	if grown := db.pool.NBlocks() - blocks; grown > uint32(chunks/4) {
		t.Errorf("heap grew by %d blocks for a value of %d chunks after vacuum freed three", grown, chunks)
	}
	mustDelete(t, db, "again")
	db.Close()
	// Without the index file the restart rebuilds the index from the heap
	// and lists the chunks no version names: the deleted value's are
	// still named by its dead version, so nothing is an orphan.
	if err := removeIndexFile(dir); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum})
	defer db.Close()
	orphans := db.vac.debt.len()
	if orphans != 0 {
		t.Errorf("%d orphan chunks after a clean restart", orphans)
	}
	st = mustVacuum(t, db)
	if want := uint64(chunks + dirs); st.ChunksRemoved != want {
		t.Errorf("second vacuum: ChunksRemoved = %d, want %d", st.ChunksRemoved, want)
	}
	if got, want := heapTuples(t, db), 2+chunks+dirs; got != want {
		t.Errorf("after the second vacuum %d tuples, want %d", got, want)
	}
	mustVerify(t, db)
}

// A crash while a large value is being written (its chunks and directories
// placed, its version not yet) leaves chunks no version names: the restart
// lists them, directories and the data chunks a directory lists among
// them, and vacuum frees each once.
func TestOrphanDirectoriesFreedOnce(t *testing.T) {
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	const n = 2 << 20
	chunks := (n + largeChunkSize - 1) / largeChunkSize
	dirs := (chunks + tidsPerDirectory - 1) / tidsPerDirectory
	mustPut(t, db, "keep", string(patterned(n, 1)))
	// Chunks of a transaction that never places its version, as a crash
	// in the middle of Put leaves them: the copy of the directory taken
	// then is opened as after a crash, without its index file so that
	// the index is rebuilt from the heap.
	tx, _ := db.Begin(context.Background(), TxnOptions{})
	if err := tx.Put([]byte("s"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.toastValue(tx.st.xid.Load(), patterned(n, 2)); err != nil {
		t.Fatal(err)
	}
	if err := db.wal.FlushAll(); err != nil {
		t.Fatal(err)
	}
	crash := t.TempDir()
	copyDir(t, dir, crash)
	tx.Rollback()
	db.Close()
	if err := removeIndexFile(crash); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, crash, Options{Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	orphans := db.vac.debt.len()
	// The directories, and the data chunks of the last, partial
	// directory (none here: every data chunk is listed by a directory).
	if orphans != dirs {
		t.Errorf("%d orphans after the crash, want the %d directories", orphans, dirs)
	}
	st := mustVacuum(t, db)
	if want := uint64(chunks + dirs); st.ChunksRemoved != want {
		t.Errorf("ChunksRemoved = %d, want %d", st.ChunksRemoved, want)
	}
	if got, want := heapTuples(t, db), 1+chunks+dirs; got != want {
		t.Errorf("%d tuples left, want %d", got, want)
	}
	if got, ok := get(t, db, "keep"); !ok || got != string(patterned(n, 1)) {
		t.Fatal("the committed value changed")
	}
	mustVerify(t, db)
}

// TestCrashLadderLargeValues runs the crash ladder over a workload whose
// values go out of line through directories: sync and async commits of
// values of 1 to 3 MB, a rolled-back one, overwrites and deletes, with
// vacuum and a checkpoint in between. At every crash point checked, each
// acknowledged value is back whole and no unacknowledged one is visible,
// whole or in part.
func TestCrashLadderLargeValues(t *testing.T) {
	big := func(i, n int) []byte { return patterned(n, uint32(i)) }
	work := []ladderTxn{
		{writes: map[string][]byte{"a": []byte("1")}, sync: true},
		{writes: map[string][]byte{"big": big(1, 1<<20+1)}, sync: true},
		{writes: map[string][]byte{"b": big(2, 3<<20)}, sync: false},
		{writes: map[string][]byte{"big": big(3, 2<<20), "a": []byte("2")}, sync: true},
		{writes: map[string][]byte{"c": big(4, 2<<20)}, sync: true, rollback: true},
		{writes: map[string][]byte{"b": nil}, sync: true},
		{writes: map[string][]byte{"big": big(5, 1<<20+chunkSize)}, sync: false},
		{writes: map[string][]byte{"d": big(6, 1500000)}, sync: true},
	}
	for len(work) < 16 { // past the ladder's checkpoint and vacuum points
		i := len(work)
		work = append(work, ladderTxn{writes: map[string][]byte{"a": []byte(fmt.Sprint(i))}, sync: i%2 == 0})
	}
	work = append(work, ladderTxn{writes: map[string][]byte{"big": nil, "d": big(7, 2<<20)}, sync: true})
	// Each crash copy is opened three times and read whole: a sample of
	// the points keeps the run to seconds (-toast.sample=N overrides).
	// Under -race the workload alone, megabytes through the in-memory
	// file system, takes minutes: it runs there only when asked for.
	sample := 300
	if *toastSample > 0 {
		sample = *toastSample
	} else if raceEnabled || testing.Short() {
		t.Skip("slow under -race and -short; -toast.sample=N runs it")
	}
	points, checked, err := crashLadder(42, work, sample, 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d file-system operations, %d crash copies checked", points, checked)
}

// TestHugeValue stores one value of 512 MiB, reads it back, restarts,
// reads it again, replaces it and vacuums; behind -toast.huge.
func TestHugeValue(t *testing.T) {
	if !*hugeValue {
		t.Skip("-toast.huge not set")
	}
	const n = 512 << 20
	dir := t.TempDir()
	db := openTest(t, dir, Options{Autovacuum: noAutovacuum, SharedBuffers: 64 << 20, WALSegmentSize: 64 << 20})
	val := patterned(n, 9)
	start := time.Now()
	if err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte("huge"), val) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("put %d bytes in %v", n, time.Since(start))
	read := func(db *DB) {
		t.Helper()
		start := time.Now()
		var got []byte
		err := db.View(context.Background(), func(tx *Txn) error {
			var err error
			got, err = tx.Get([]byte("huge"))
			return err
		})
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get: %v, %d bytes, equal=%v", err, len(got), bytes.Equal(got, val))
		}
		t.Logf("get in %v", time.Since(start))
	}
	read(db)
	db.Close()
	db = openTest(t, dir, Options{Autovacuum: noAutovacuum, SharedBuffers: 64 << 20, WALSegmentSize: 64 << 20})
	defer db.Close()
	read(db)
	mustPut(t, db, "huge", "small")
	st := mustVacuum(t, db)
	chunks := (n + largeChunkSize - 1) / largeChunkSize
	if want := uint64(chunks + (chunks+tidsPerDirectory-1)/tidsPerDirectory); st.ChunksRemoved != want {
		t.Errorf("ChunksRemoved = %d, want %d", st.ChunksRemoved, want)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("heap in use at the end %d MiB, total allocated %d MiB", ms.HeapInuse>>20, ms.TotalAlloc>>20)
}

// FuzzToastPointer feeds arbitrary bytes to the pointer and directory
// decoders: they must never panic, and whatever they accept must be
// consistent (counts derived from the length, the encoding reproduced
// byte for byte).
func FuzzToastPointer(f *testing.F) {
	direct := binary.LittleEndian.AppendUint32(nil, 3*chunkSize)
	direct = binary.LittleEndian.AppendUint32(direct, 3)
	for i := 0; i < 3; i++ {
		direct = appendTID(direct, heap.TID{Block: uint32(i), Slot: 1})
	}
	f.Add(direct, false)
	ind := binary.LittleEndian.AppendUint32(nil, 1<<29)
	nd := ((1<<29+largeChunkSize-1)/largeChunkSize + tidsPerDirectory - 1) / tidsPerDirectory
	ind = binary.LittleEndian.AppendUint32(ind, indirectFlag|uint32(nd))
	for i := 0; i < nd; i++ {
		ind = appendTID(ind, heap.TID{Block: uint32(i), Slot: 0})
	}
	f.Add(ind, false)
	f.Add(appendTID(appendTID(nil, heap.TID{Block: 1}), heap.TID{Block: 2, Slot: 3}), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, b []byte, directory bool) {
		if directory {
			tids, err := parseDirectory(b, -1)
			if err != nil {
				if !errors.Is(err, errPointer) {
					t.Fatalf("error %v does not wrap errPointer", err)
				}
				return
			}
			if len(tids) == 0 || len(tids) > tidsPerDirectory || len(tids)*tidSize != len(b) {
				t.Fatalf("accepted a directory of %d bytes as %d TIDs", len(b), len(tids))
			}
			return
		}
		p, err := parseToastPointer(b)
		if err != nil {
			if !errors.Is(err, errPointer) {
				t.Fatalf("error %v does not wrap errPointer", err)
			}
			return
		}
		if p.total > MaxValueSize || p.chunks != (p.total+p.chunkBytes()-1)/p.chunkBytes() {
			t.Fatalf("accepted %d bytes in %d chunks", p.total, p.chunks)
		}
		if !p.indirect && p.chunks > maxDirectChunks {
			t.Fatalf("accepted a direct pointer of %d chunks", p.chunks)
		}
		if p.indirect {
			sum := 0
			for i := range p.tids {
				if l := p.directoryLen(i); l <= 0 || l > tidsPerDirectory {
					t.Fatalf("directory %d of %d would list %d chunks", i, len(p.tids), l)
				} else {
					sum += l
				}
			}
			if sum != p.chunks {
				t.Fatalf("directories list %d chunks, the value has %d", sum, p.chunks)
			}
		}
		enc := binary.LittleEndian.AppendUint32(nil, uint32(p.total))
		field := uint32(len(p.tids))
		if p.indirect {
			field |= indirectFlag
		}
		enc = binary.LittleEndian.AppendUint32(enc, field)
		for _, tid := range p.tids {
			enc = appendTID(enc, tid)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", enc, b)
		}
	})
}

// A directory damaged to name a slot that holds no data chunk: a read of
// the value fails with ErrCorruption naming the directory's place instead
// of returning wrong bytes, and Verify reports it.
func TestDamagedDirectory(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	mustPut(t, db, "k", string(patterned(2<<20, 1)))
	_, ptr := rawPointer(t, db, "k")
	p, err := parseToastPointer(ptr)
	if err != nil || !p.indirect {
		t.Fatalf("pointer: %+v %v", p, err)
	}
	main := db.idx.get([]byte("k")).headTID()
	d := p.tids[0]
	buf, err := db.pool.Get(d.Block)
	if err != nil {
		t.Fatal(err)
	}
	buf.Lock()
	raw, err := heap.Tuple(buf.Page(), d.Slot)
	if err != nil {
		t.Fatal(err)
	}
	// The directory's value starts after the header (no key): its first
	// TID now names the version's own tuple.
	copy(raw[heap.TupleHeaderSize:], appendTID(nil, main))
	buf.MarkDirty()
	buf.Unlock()
	buf.Release()
	err = db.View(context.Background(), func(tx *Txn) error { _, err := tx.Get([]byte("k")); return err })
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), fmt.Sprintf("%s, slot %d,", db.heapBlockName(main.Block), main.Slot)) {
		t.Fatalf("Get of a value whose directory is damaged: %v", err)
	}
	rep, err := db.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), "which is not a data chunk") {
		t.Fatalf("Verify: %v", rep.Problems)
	}
}

var largeKills = flag.Int("crash.largekills", 5, "SIGKILL crash points in TestKillDuringLargeWrites")

// largeSeqSize is the size of the seq-th value a large-value child writes:
// 1 to 3 MiB, every one through directories.
func largeSeqSize(seq int) int { return 1<<20 + 1 + seq*7919%(2<<20) }

// largeSeqSeed identifies the value of client c's seq-th write in run.
func largeSeqSeed(run int64, c, seq int) uint32 {
	return uint32(run) ^ uint32(c)<<24 ^ uint32(seq)*2654435761
}

// largeChild is the child process of TestKillDuringLargeWrites: two
// clients each overwrite their key with values of 1 to 3 MiB, committing
// synchronously and printing each acknowledgement, while vacuum and
// checkpoints run beside them.
func largeChild(dir string) int {
	db, err := Open(dir, Options{SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20, MaxWALSize: 16 << 20, Autovacuum: noAutovacuum})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	run := time.Now().UnixNano()
	var mu sync.Mutex
	fmt.Printf("ready %d\n", run)
	go func() {
		for i := 0; ; i++ {
			time.Sleep(20 * time.Millisecond)
			var err error
			if i%3 == 0 {
				err = db.Checkpoint()
			} else {
				_, err = db.Vacuum(context.Background())
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "maintenance:", err)
				os.Exit(4)
			}
		}
	}()
	var wg sync.WaitGroup
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				val := patterned(largeSeqSize(seq), largeSeqSeed(run, c, seq))
				err := db.Update(context.Background(), func(tx *Txn) error { return tx.Put([]byte(fmt.Sprint("L", c)), val) })
				if err != nil {
					fmt.Fprintln(os.Stderr, "put:", err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Printf("ack %d %d\n", c, seq)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 0
}

// TestKillDuringLargeWrites kills a process in the middle of writing large
// values (SIGKILL, at random moments, while vacuum frees the values
// replaced) and checks after each restart that every key holds whole
// either its last acknowledged value or the one written after it, and
// that Verify finds nothing wrong.
func TestKillDuringLargeWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	seed := testSeed(t, 0)
	r := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	type ack struct {
		run int64
		seq int
	}
	last := map[int]ack{}   // per client, the last acknowledged write
	var runs []int64        // every child's run, oldest first
	var acked []thisRunAcks // for each run, per client, one more than its last acknowledged seq
	for i := 0; i < *largeKills; i++ {
		cmd, l, lines, stderr := startChild(t, "MVKV_LARGE_CHILD="+dir)
		var run int64
		if _, err := fmt.Sscanf(l, "ready %d", &run); err != nil {
			t.Fatalf("child said %q; stderr: %s", l, stderr.String())
		}
		runs = append(runs, run)
		acked = append(acked, thisRunAcks{})
		wait := time.Duration(50+r.IntN(700)) * time.Millisecond
		if raceEnabled {
			wait *= 6 // the child commits its first values only after a second or more
		}
		time.Sleep(wait)
		cmd.Process.Signal(syscall.SIGKILL)
		thisRun := map[int]int{}
		for l := range lines {
			var c, seq int
			if _, err := fmt.Sscanf(l, "ack %d %d", &c, &seq); err == nil {
				last[c] = ack{run, seq}
				thisRun[c] = seq + 1
				acked[len(acked)-1][c] = seq + 1
			}
		}
		cmd.Wait()
		if s := stderr.String(); s != "" {
			t.Fatalf("child stderr: %s", s)
		}
		db := openTest(t, dir, Options{Autovacuum: noAutovacuum})
		for c := 0; c < 2; c++ {
			got, found := get(t, db, fmt.Sprint("L", c))
			// The write after the last acknowledged one may have
			// committed unseen; nothing else is allowed. If it did,
			// it is the value the next run must find if that run
			// acknowledges nothing.
			next := thisRun[c]
			isNext := got == string(patterned(largeSeqSize(next), largeSeqSeed(run, c, next)))
			ok := isNext
			if a, acked := last[c]; acked {
				ok = ok || got == string(patterned(largeSeqSize(a.seq), largeSeqSeed(a.run, c, a.seq)))
			} else {
				ok = ok || !found
			}
			if !ok {
				t.Fatalf("kill %d: client %d: key holds %d bytes (found=%v), neither its last acknowledged value %+v nor the next (%d in this run): %s",
					i, c, len(got), found, last[c], next, whichLargeValue([]byte(got), runs, acked, c, run, next))
			}
			if isNext {
				last[c] = ack{run, next}
			}
		}
		if rep, err := db.Verify(); err != nil || !rep.OK() {
			t.Fatalf("verify after kill %d: %v\n%s", i, err, rep)
		}
		t.Logf("kill %d: %d+%d acknowledged in this run, recovery replayed %d records", i, thisRun[0], thisRun[1], db.Recovery().Records)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGetPrefix: GetPrefix and ScanPrefix return a value's first bytes and
// its length, inline or out of line, and of an out-of-line value read only
// the chunks holding those bytes.
func TestGetPrefix(t *testing.T) {
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum})
	defer db.Close()
	big := make([]byte, 3<<19) // 1.5 MiB: a pointer to directories of chunks
	for i := range big {
		big[i] = byte(i * 7)
	}
	mustPut(t, db, "big", string(big))
	mustPut(t, db, "small", "abcdef")
	lookups := func() uint64 { b := db.Stats().Buffers; return b.Hits + b.Misses }
	err := db.View(context.Background(), func(tx *Txn) error {
		before := lookups()
		if _, err := tx.Get([]byte("big")); err != nil {
			return err
		}
		whole := lookups() - before
		before = lookups()
		p, n, err := tx.GetPrefix([]byte("big"), 10)
		if err != nil {
			return err
		}
		part := lookups() - before
		if n != len(big) || !bytes.Equal(p, big[:10]) {
			t.Errorf("GetPrefix(big, 10) = %x, %d", p, n)
		}
		if part*4 > whole {
			t.Errorf("GetPrefix read %d pages, Get %d", part, whole)
		}
		for _, c := range []struct {
			key  string
			n    int
			want []byte
		}{{"small", 3, []byte("abc")}, {"small", 100, []byte("abcdef")}, {"small", 0, []byte{}}, {"big", 0, []byte{}}, {"big", len(big) + 5, big}, {"big", 9000, big[:9000]}} {
			p, n, err := tx.GetPrefix([]byte(c.key), c.n)
			if err != nil || !bytes.Equal(p, c.want) || n != map[string]int{"small": 6, "big": len(big)}[c.key] {
				t.Errorf("GetPrefix(%s, %d) = %d bytes, length %d, %v", c.key, c.n, len(p), n, err)
			}
		}
		if _, _, err := tx.GetPrefix([]byte("none"), 4); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetPrefix of a missing key: %v", err)
		}
		got := map[string]int{}
		err = tx.ScanPrefix(nil, nil, 4, func(k, p []byte, n int) bool {
			if len(p) > 4 {
				t.Errorf("ScanPrefix gave %s %d bytes", k, len(p))
			}
			got[string(k)] = n
			return true
		})
		if got["big"] != len(big) || got["small"] != 6 || len(got) != 2 {
			t.Errorf("ScanPrefix lengths %v", got)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOverwrittenLargeValuesReuseSpace overwrites out-of-line values of
// 20 KB, 200 KB and 1 MiB round after round, with a vacuum after each: the
// pages vacuum empties of the old chunks must take the new ones. A chunk
// of a value up to 1 MiB fills an empty page, more than the free space
// map's top step promised, so no freed page was ever reused and the heap
// grew by every value written (10 rounds of 10 x 1 MiB: 105.8 MB for 10.5
// MB live).
func TestOverwrittenLargeValuesReuseSpace(t *testing.T) {
	for _, size := range []int{20 << 10, 200 << 10, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 64 << 20})
			defer db.Close()
			ctx := context.Background()
			const keys, rounds = 8, 8
			val := make([]byte, size)
			var afterFirst uint32
			for r := 0; r < rounds; r++ {
				for k := 0; k < keys; k++ {
					val[0], val[1] = byte(r), byte(k)
					if err := db.Update(ctx, func(tx *Txn) error { return tx.Put(fmt.Appendf(nil, "k%d", k), val) }); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := db.Vacuum(ctx); err != nil {
					t.Fatal(err)
				}
				if r == 0 {
					afterFirst = db.pool.NBlocks()
				}
			}
			// One round's worth of new chunks is written before the
			// previous round's are freed: two rounds' pages, and room
			// for the free space map's order of hand-out.
			if n := db.pool.NBlocks(); n > 3*afterFirst {
				t.Errorf("heap of %d blocks after %d rounds of overwrites, %d after the first: freed pages not reused", n, rounds, afterFirst)
			}
			for k := 0; k < keys; k++ {
				v, ok := get(t, db, fmt.Sprintf("k%d", k))
				if !ok || len(v) != size || v[0] != byte(rounds-1) || v[1] != byte(k) {
					t.Fatalf("k%d: %d bytes, found %v", k, len(v), ok)
				}
			}
			mustVerify(t, db)
		})
	}
}

// thisRunAcks is, per client, one more than the last seq it acknowledged
// in one run of TestKillDuringLargeWrites.
type thisRunAcks [2]int

// whichLargeValue says, for a failure message, which value of
// TestKillDuringLargeWrites got is: a whole value some child wrote or may
// have written, or else where it first differs from run's seq-th value of
// client c, and whose value each differing 4 KiB piece holds.
func whichLargeValue(got []byte, runs []int64, acked []thisRunAcks, c int, run int64, seq int) string {
	type cand struct {
		k, c, s int
		seed    uint32
	}
	var cands []cand
	for k, r := range runs {
		for cc := range 2 {
			for s := range acked[k][cc] + 2 {
				cands = append(cands, cand{k, cc, s, largeSeqSeed(r, cc, s)})
			}
		}
	}
	for _, x := range cands {
		if largeSeqSize(x.s) == len(got) && bytes.Equal(got, patterned(len(got), x.seed)) {
			return fmt.Sprintf("it is child %d's client %d's value %d, whole", x.k, x.c, x.s)
		}
	}
	want := patterned(largeSeqSize(seq), largeSeqSeed(run, c, seq))
	var b strings.Builder
	fmt.Fprintf(&b, "no whole value written; against value %d of this run (%d bytes):", seq, len(want))
	const piece = 4096
	shown := 0
	for off := 0; off+piece <= len(got) && shown < 6; off += piece {
		end := off + piece
		if end <= len(want) && bytes.Equal(got[off:end], want[off:end]) {
			continue
		}
		shown++
		who := "nobody's"
		for _, x := range cands {
			if largeSeqSize(x.s) >= end && bytes.Equal(got[off:end], patterned(end, x.seed)[off:end]) {
				who = fmt.Sprintf("child %d client %d value %d's", x.k, x.c, x.s)
				break
			}
		}
		fmt.Fprintf(&b, " bytes %d..%d are %s;", off, end, who)
	}
	return b.String()
}
