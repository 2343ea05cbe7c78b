package engine

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/vfs"
)

var (
	ladderSample = flag.Int("crash.sample", 0, "crash ladder: check one crash point in N (1: every point; 0: each test's default, sparser under -race)")
	ladderSeeds  = flag.Int("crash.seeds", 2, "crash ladder: number of random workloads")
	ladderSeed   = flag.Uint64("crash.seed", 0, "crash ladder: run only this workload seed")
	ladderTxns   = flag.Int("crash.txns", 120, "crash ladder: transactions per workload")
)

// ladderTxn is one transaction of the scripted workload: writes (a nil
// value deletes), whether it commits synchronously, whether it rolls back.
type ladderTxn struct {
	writes   map[string][]byte
	sync     bool
	rollback bool
}

func (l ladderTxn) String() string {
	keys := make([]string, 0, len(l.writes))
	for k, v := range l.writes {
		if v == nil {
			keys = append(keys, "-"+k)
		} else {
			keys = append(keys, fmt.Sprintf("%s(%dB)", k, len(v)))
		}
	}
	sort.Strings(keys)
	return fmt.Sprintf("sync=%v rollback=%v %s", l.sync, l.rollback, strings.Join(keys, " "))
}

// ladderWorkload makes a reproducible workload of n transactions over a
// small key space: updates, deletes, sync and async commits, rollbacks, and
// now and then a value large enough to go out of line and fill WAL segments.
func ladderWorkload(seed uint64, n int) []ladderTxn {
	r := rand.New(rand.NewPCG(seed, 99))
	out := make([]ladderTxn, n)
	for i := range out {
		t := ladderTxn{writes: map[string][]byte{}, sync: r.IntN(4) != 0, rollback: r.IntN(10) == 0}
		for w := 0; w < 1+r.IntN(4); w++ {
			k := fmt.Sprintf("k%02d", r.IntN(30))
			switch {
			case r.IntN(8) == 0:
				t.writes[k] = nil
			case r.IntN(25) == 0:
				t.writes[k] = []byte(strings.Repeat(fmt.Sprintf("%d:%s.", i, k), 40000/8))
			default:
				t.writes[k] = []byte(fmt.Sprintf("%d:%s", i, k))
			}
		}
		out[i] = t
	}
	return out
}

// ladderState is the committed state after a prefix of the workload.
type ladderState map[string]string

func scanState(db *DB) (ladderState, error) {
	st := ladderState{}
	err := db.View(context.Background(), func(tx *Txn) error {
		return tx.Scan(nil, nil, func(k, v []byte) bool { st[string(k)] = string(v); return true })
	})
	return st, err
}

// TestCrashLadder runs a scripted workload on the in-memory file system and
// simulates a power loss after file-system operations (every one with
// -crash.all, a sample otherwise), in the drop-unsynced and torn-write
// modes. Each crash copy must recover to the state after some prefix of the
// commit sequence that includes every synchronous commit acknowledged
// before the crash (visibility map bits are set now and then, as vacuum
// would, and checked by Verify and index-only Count at every point): so no
// acknowledged commit is lost, no transaction is
// partly visible, and asynchronous commits survive all-or-nothing and in
// commit order. Verify must pass, a second open must give the same state,
// and so must a crash in the middle of recovery itself.
func TestCrashLadder(t *testing.T) {
	seeds := make([]uint64, *ladderSeeds)
	base := testSeed(t, *ladderSeed)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	if *ladderSeed != 0 {
		seeds = []uint64{base}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			work := ladderWorkload(seed, *ladderTxns)
			sample := *ladderSample
			if sample <= 0 {
				sample = 3
				if raceEnabled {
					// .ci/run checks every point without the race
					// detector, which slows crash copies tenfold.
					sample = 24
				}
			}
			points, checked, err := crashLadder(seed, work, sample, 16, 0)
			if err == nil {
				t.Logf("seed %d: %d transactions, %d file-system operations, %d crash copies checked; %d pages pruned by updates and reads, %d by vacuum, in all workloads so far",
					seed, len(work), points, checked, ladderPrunes.Load(), ladderVacuumPages.Load())
				return
			}
			t.Errorf("seed %d: %v", seed, err)
			small := shrinkLadder(seed, work)
			var b strings.Builder
			for i, w := range small {
				fmt.Fprintf(&b, "\n  txn %d: %s", i, w)
			}
			_, _, err = crashLadder(seed, small, 1, 16, 0)
			t.Fatalf("shrunk to %d transactions (-crash.seed=%d reproduces the full case):%s\nfailure: %v", len(small), seed, b.String(), err)
		})
	}
}

// shrinkLadder removes transactions from a failing workload while it still
// fails (every crash point checked), halving the chunk size as it goes, as
// delta debugging does.
func shrinkLadder(seed uint64, work []ladderTxn) []ladderTxn {
	for chunk := len(work) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(work); {
			try := append(append([]ladderTxn(nil), work[:i]...), work[i+chunk:]...)
			if _, _, err := crashLadder(seed, try, 1, 16, 0); err != nil {
				work = try
			} else {
				i += chunk
			}
		}
	}
	return work
}

// crashLadder runs work and checks a crash copy at one file-system
// operation in every sample, vacuuming once every vacuumEvery transactions.
// It returns the operations seen, the copies checked and the first failure.
func crashLadder(seed uint64, work []ladderTxn, sample, vacuumEvery int, startXid uint64) (points, checked int, failure error) {
	return crashLadderWith(seed, work, sample, vacuumEvery, startXid, ladderConfig{})
}

// ladderConfig changes a crash ladder's run: tweak the options it opens
// the database with, between runs after each transaction.
type ladderConfig struct {
	tweak   func(o *Options)
	between func(ctx context.Context, db *DB, i int) error
}

// crashLadderWith is crashLadder with cfg's changes.
func crashLadderWith(seed uint64, work []ladderTxn, sample, vacuumEvery int, startXid uint64, cfg ladderConfig) (points, checked int, failure error) {
	nTxn := len(work)
	states, commitOf := ladderStates(ladderState{}, work)

	m := vfs.NewMemFS()
	m.MkdirAll("/db")
	m.SyncDir("/")
	opts := Options{FS: m, CheckpointTimeout: -1, WALWriterDelay: 5 * time.Millisecond}
	opts.SharedBuffers, opts.WALSegmentSize = 2<<20, 1<<20
	if cfg.tweak != nil {
		cfg.tweak(&opts)
	}
	db, err := Open("/db", opts)
	if err != nil {
		return 0, 0, err
	}

	// The index file of the first checkpoint: the crash copies are also
	// opened with it in place of their own, as a stale file.
	if ladderStaleIndex, err = readMemFile(m, "/db/index"); err != nil {
		return 0, 0, err
	}
	if startXid != 0 {
		// Xids start at startXid, and the CLOG page after its own holds
		// garbage, durably: the workload's xids cross onto that page,
		// which must start as zeros however the crash falls.
		if err := writeGarbageCLOGPage(m, "/db", startXid/clog.XidsPerPage+1); err != nil {
			return 0, 0, err
		}
		db.procs.setNext(startXid)
	}
	var prog ladderProgress
	m.SetOpHook(ladderCrashHook(seed, sample, states, rand.New(rand.NewPCG(seed, 7)), &prog, &points, &checked, &failure))

	ctx := context.Background()
	for i, w := range work {
		if i == nTxn/2 {
			if err := db.Checkpoint(); err != nil {
				failure = err
				break
			}
		}
		// Every few transactions, set visibility map bits where vacuum
		// could, so that crashes meet bits being set and cleared.
		if i%8 == 4 {
			if _, err := markAllVisible(db); err != nil {
				failure = fmt.Errorf("before txn %d: marking pages all-visible: %v", i, err)
				break
			}
		}
		// And vacuum now and then, so that crashes meet both its passes
		// (dropping deleted keys' entries, freeing chunks) besides the
		// pruning that updates and reads of full pages do all along.
		if i%vacuumEvery == vacuumEvery*3/4 {
			if _, err := db.Vacuum(ctx); err != nil {
				failure = fmt.Errorf("before txn %d: vacuum: %v", i, err)
				break
			}
		}
		committed, err := runLadderTxn(ctx, db, i, w, func() { prog.begun(commitOf[i]) })
		if err != nil {
			failure = err
			break
		}
		if !committed {
			continue
		}
		if w.sync {
			prog.acked(commitOf[i])
		}
		if failure != nil {
			break
		}
		if cfg.between != nil {
			if err := cfg.between(ctx, db, i); err != nil {
				failure = fmt.Errorf("after txn %d: %v", i, err)
				break
			}
		}
	}
	if startXid != 0 && failure == nil && db.procs.next() <= (startXid/clog.XidsPerPage+1)*clog.XidsPerPage {
		failure = fmt.Errorf("the workload's xids, from %d to %d, did not cross onto the next CLOG page", startXid, db.procs.next())
	}
	st := db.Stats()
	ladderPrunes.Add(st.Heap.PrunesByUpdate + st.Heap.PrunesByRead)
	ladderVacuumPages.Add(st.Vacuum.PagesPruned)
	db.Close()
	m.SetOpHook(nil)
	return points, checked, failure
}

// ladderStates returns the committed state after each prefix of work's
// commits, applied to start (states[k]: after the first k) and, for each
// transaction, the index into states once it has committed (-1 for a
// rollback).
func ladderStates(start ladderState, work []ladderTxn) (states []ladderState, commitOf []int) {
	states = []ladderState{start}
	commitOf = make([]int, len(work))
	for i, w := range work {
		commitOf[i] = -1
		if w.rollback {
			continue
		}
		next := maps.Clone(states[len(states)-1])
		for k, v := range w.writes {
			if v == nil {
				delete(next, k)
			} else {
				next[k] = string(v)
			}
		}
		states = append(states, next)
		commitOf[i] = len(states) - 1
	}
	return states, commitOf
}

// ladderStaleIndex is the index file of the running ladder's first
// checkpoint.
var ladderStaleIndex []byte

// readMemFile returns the contents of a file on m.
func readMemFile(m *vfs.MemFS, name string) ([]byte, error) {
	size, err := m.Stat(name)
	if err != nil {
		return nil, err
	}
	f, err := m.OpenReadOnly(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && size > 0 {
		return nil, err
	}
	return b, nil
}

// writeMemFile replaces a file on m with b, durably.
func writeMemFile(m *vfs.MemFS, name string, b []byte) error {
	f, err := m.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return m.SyncDir("/db")
}

// ladderPrunes and ladderVacuumPages count the pages pruned outside vacuum
// and by vacuum in the ladder's workloads, so that the test can show it
// crashed in the middle of both.
var ladderPrunes, ladderVacuumPages atomic.Uint64

// checkRecovered opens a crash copy and checks that it holds states[k] for
// some lo <= k <= hi, that it verifies, and that reopening it, plainly and
// after a crash during its own recovery, gives the same state.
func checkRecovered(c *vfs.MemFS, states []ladderState, lo, hi int, rng *rand.Rand) error {
	var fromFile bool // the last open's index came from the index file
	open := func(fs vfs.FS) (ladderState, error) {
		db, err := Open("/db", Options{FS: fs, SharedBuffers: 2 << 20, CheckpointTimeout: -1})
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		defer db.Close()
		fromFile = db.Recovery().IndexFromFile
		st, err := scanState(db)
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		// Verify checks every set visibility map bit against its page;
		// index-only Count relies on them.
		rep, err := db.Verify()
		if err != nil || !rep.OK() {
			return nil, fmt.Errorf("verify: %v %v", err, rep.Problems)
		}
		if _, count := countKeys(nil, db); count != len(st) {
			return nil, fmt.Errorf("index-only Count says %d keys, Scan %d", count, len(st))
		}
		return st, nil
	}
	// A crash during recovery: stop the copy's first open at a random
	// operation and recover again from what reached its disk.
	during := c.Clone()
	during.SetCrashAfter(int64(1 + rng.IntN(40)))
	if db, err := Open("/db", Options{FS: during, SharedBuffers: 2 << 20, CheckpointTimeout: -1}); err == nil {
		db.Close()
	}
	var midRecovery *vfs.MemFS
	if cs := during.CrashState(); cs != nil {
		midRecovery = cs.CrashCopy(vfs.DropUnsynced, nil)
	}
	// And with its index file missing, damaged or from an older
	// checkpoint: Open must rebuild and reach the same state.
	variant, how := c.Clone(), ""
	switch rng.IntN(3) {
	case 0:
		how = "without its index file"
		if err := variant.Remove("/db/index"); err != nil {
			how += " (it had none)"
		}
	case 1:
		how = "with its index file damaged"
		if b, err := readMemFile(variant, "/db/index"); err == nil && len(b) > 0 {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			if err := writeMemFile(variant, "/db/index", b); err != nil {
				return err
			}
		}
	case 2:
		how = "with the index file of the first checkpoint"
		if err := writeMemFile(variant, "/db/index", ladderStaleIndex); err != nil {
			return err
		}
	}

	got, err := open(c)
	if err != nil {
		return err
	}
	match := -1
	for k := hi; k >= lo && k >= 0; k-- {
		if maps.Equal(got, states[k]) {
			match = k
			break
		}
	}
	if match < 0 {
		return fmt.Errorf("recovered state matches no commit prefix in [%d, %d]: %s", lo, hi, diffState(got, states[lo]))
	}
	again, err := open(c)
	if err != nil {
		return fmt.Errorf("second open: %w", err)
	}
	if !maps.Equal(again, got) {
		return fmt.Errorf("second open differs: %s", diffState(again, got))
	}
	// The first open ended with a clean Close, whose checkpoint wrote
	// the index file the second one loads.
	if !fromFile {
		return fmt.Errorf("the open after a clean Close rebuilt the index from the heap")
	}
	if st, err := open(variant); err != nil {
		return fmt.Errorf("opened %s: %w", how, err)
	} else if !maps.Equal(st, got) {
		return fmt.Errorf("opened %s, the state differs: %s", how, diffState(st, got))
	}
	if midRecovery != nil {
		st, err := open(midRecovery)
		if err != nil {
			return fmt.Errorf("after a crash during recovery: %w", err)
		}
		if !maps.Equal(st, got) {
			return fmt.Errorf("after a crash during recovery the state differs: %s", diffState(st, got))
		}
	}
	return nil
}

func diffState(got, want ladderState) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, k+" missing")
		} else if g != v {
			d = append(d, fmt.Sprintf("%s=%.20q want %.20q", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, k+" unexpected")
		}
	}
	sort.Strings(d)
	if len(d) > 8 {
		d = append(d[:8], "...")
	}
	return strings.Join(d, ", ")
}

// runLadderTxn runs transaction i of a ladder workload: its writes, then a
// rollback or a commit at the transaction's synchronous_commit setting,
// calling beforeCommit just before Commit (the crash-point bookkeeping
// marks the commit as started there). committed is false after a rollback.
func runLadderTxn(ctx context.Context, db *DB, i int, w ladderTxn, beforeCommit func()) (committed bool, err error) {
	sc := SyncCommitOff
	if w.sync {
		sc = SyncCommitOn
	}
	tx, err := db.Begin(ctx, TxnOptions{SynchronousCommit: &sc})
	if err != nil {
		return false, err
	}
	for k, v := range w.writes {
		if v == nil {
			err = tx.Delete([]byte(k))
		} else {
			err = tx.Put([]byte(k), v)
		}
		if err != nil {
			tx.Rollback()
			return false, fmt.Errorf("txn %d: %v", i, err)
		}
	}
	if w.rollback {
		tx.Rollback()
		return false, nil
	}
	beforeCommit()
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("txn %d commit: %v", i, err)
	}
	return true, nil
}

// ladderProgress is how far a ladder workload's commits have come, read by
// its crash hook: the states index of the last acknowledged synchronous
// commit and of the last commit begun. A crash copy must recover to a state
// between the two.
type ladderProgress struct {
	mu                 sync.Mutex
	ackedSync, started int // guarded by mu
}

func (p *ladderProgress) begun(state int) { p.mu.Lock(); p.started = state; p.mu.Unlock() }
func (p *ladderProgress) acked(state int) { p.mu.Lock(); p.ackedSync = state; p.mu.Unlock() }

func (p *ladderProgress) bounds() (lo, hi int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ackedSync, p.started
}

// ladderCrashHook returns the MemFS operation hook of a crash ladder: at
// one file operation in sample (chosen by rng) it takes a crash copy in
// each crash mode and checks it recovers to a state prog allows, counting
// points and checked copies and keeping the first failure.
func ladderCrashHook(seed uint64, sample int, states []ladderState, rng *rand.Rand, prog *ladderProgress, points, checked *int, failure *error) func(vfs.CrashPoint) {
	return func(p vfs.CrashPoint) {
		*points++
		if *failure != nil || rng.IntN(sample) != 0 {
			return
		}
		lo, hi := prog.bounds()
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast} {
			*checked++
			c := p.CrashCopy(mode, rand.New(rand.NewPCG(seed, uint64(p.Op.Index))))
			if err := checkRecovered(c, states, lo, hi, rng); err != nil {
				*failure = fmt.Errorf("crash after op %v (%v), acknowledged sync commits through state %d, %d commits begun: %v", p.Op, mode, lo, hi, err)
				return
			}
		}
	}
}

// TestCrashLadderPruning is the crash ladder over a workload built to make
// updates and reads prune pages all along: a few keys with values of 600
// bytes, a dozen versions a page, so that pages fill within a few
// transactions and every crash point lies near a prune by an update, a
// prune by a read, or a slot reused right after one. Vacuum runs once in
// 48 transactions rather than 16, so that pages fill between its runs.
func TestCrashLadderPruning(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	r := rand.New(rand.NewPCG(seed, 5))
	work := make([]ladderTxn, 160)
	for i := range work {
		w := ladderTxn{writes: map[string][]byte{}, sync: r.IntN(3) != 0, rollback: r.IntN(12) == 0}
		for n := 0; n < 1+r.IntN(2); n++ {
			k := fmt.Sprintf("p%d", r.IntN(4))
			if r.IntN(15) == 0 {
				w.writes[k] = nil
			} else {
				w.writes[k] = []byte(fmt.Sprintf("%d:%s:%s", i, k, strings.Repeat("v", 600)))
			}
		}
		work[i] = w
	}
	sample := *ladderSample
	if sample <= 0 {
		sample = 3
		if raceEnabled {
			sample = 32 // .ci/run checks every point without -race
		}
	}
	before := ladderPrunes.Load()
	points, checked, err := crashLadder(seed, work, sample, 48, 0)
	if err != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, err)
	}
	pruned := ladderPrunes.Load() - before
	if pruned == 0 {
		t.Fatalf("seed %d: no page pruned by updates or reads; the workload no longer tests pruning", seed)
	}
	t.Logf("seed %d: %d file-system operations, %d crash copies checked, %d pages pruned by updates and reads", seed, points, checked, pruned)
}

// TestCrashLadderCLOGPage is the crash ladder over a workload whose xids
// cross onto a new CLOG page, with garbage lying in the file where that
// page goes: crashes before, at and after the first xid of the page,
// before and after the checkpoint that writes it, must all recover every
// acknowledged commit, and the page must never be read as damage.
func TestCrashLadderCLOGPage(t *testing.T) {
	seed := testSeed(t, *ladderSeed)
	work := ladderWorkload(seed, 60)
	sample := *ladderSample
	if sample <= 0 {
		sample = 2
		if raceEnabled {
			sample = 24 // .ci/run checks every point without -race
		}
	}
	points, checked, err := crashLadder(seed, work, sample, 16, clog.XidsPerPage-25)
	if err != nil {
		t.Fatalf("seed %d (-crash.seed reproduces it): %v", seed, err)
	}
	t.Logf("seed %d: %d file-system operations, %d crash copies checked", seed, points, checked)
}
