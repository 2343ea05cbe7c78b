package engine

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
)

var (
	stressTime = flag.Duration("stress.time", 2*time.Second, "TestSnapshotModelStress: how long it runs")
	stressSeed = flag.Uint64("stress.seed", 0, "TestSnapshotModelStress: its random seed (0: MVKV_TEST_SEED, or the fixed default)")
)

// TestSnapshotModelStress: writers Put, Delete, re-insert and Update a small
// key set (so keys are deleted and created again, chains link past deletes,
// and vacuum drops and re-creates index entries), at both isolation levels,
// with rollbacks; REPEATABLE READ readers keep old snapshots across many
// vacuums and prunes and check Get, Exists, Count, ScanKeys and Scan against
// the exact state at their snapshot; a READ COMMITTED reader checks single
// statements against the current state. Commits and snapshot-taking are
// serialized by a test mutex so that the model is exact; everything else
// (the writes, row-lock waits, pruning, vacuum, checkpoints) runs freely.
func TestSnapshotModelStress(t *testing.T) {
	snapshotModelStress(t, modelStress{vacuumEvery: 20 * time.Millisecond})
}

// TestSnapshotModelStressXidJumps is TestSnapshotModelStress across CLOG
// truncations: one commit in three is asynchronous, and the vacuum loop
// pushes the xid counter half a CLOG segment ahead every third round, so
// that vacuum (freezing at once) truncates the CLOG again and again under
// readers holding old snapshots. -stress.time and -stress.seed as there.
func TestSnapshotModelStressXidJumps(t *testing.T) {
	snapshotModelStress(t, modelStress{vacuumEvery: 5 * time.Millisecond, xidJumps: true, asyncCommits: true})
}

// TestSnapshotModelStressPruneOnly is TestSnapshotModelStress with no
// vacuum at all, on keys that fill several pages, at fillfactor 10 and
// 100: every version is freed by writers and readers pruning pages they
// visit (heap_page_prune_opt), slots are reused at once by versions of
// other keys and of the same key, and chains run across pages whose
// prunes cut them at different moments. Writers also delete key ranges.
// -stress.time and -stress.seed as there.
func TestSnapshotModelStressPruneOnly(t *testing.T) {
	// At fillfactor 10 a page takes three new keys, and a key deleted and
	// written again moves to a new page: pages rarely fill, so that run
	// tests chains spread over many pages more than pruning, which the
	// run at 100 does.
	for _, c := range []struct{ ff, nkeys int }{{10, 40}, {100, 300}} {
		t.Run(fmt.Sprintf("fillfactor=%d", c.ff), func(t *testing.T) {
			snapshotModelStress(t, modelStress{vacuumEvery: -1, nkeys: c.nkeys, fillFactor: c.ff, deleteRanges: true})
		})
	}
}

// modelStress varies snapshotModelStress.
type modelStress struct {
	// vacuumEvery is the pause between vacuum rounds; negative: no
	// vacuum, only checkpoints (every 200ms).
	vacuumEvery  time.Duration
	nkeys        int  // keys written (0: 40)
	fillFactor   int  // Options.FillFactor (0: the default)
	deleteRanges bool // writers also delete ranges of keys
	xidJumps     bool // every third round, advance the xid counter half a CLOG segment
	asyncCommits bool // one commit in three with synchronous_commit off
}

func snapshotModelStress(t *testing.T, cfg modelStress) {
	dur := *stressTime
	seed := testSeed(t, *stressSeed)
	t.Logf("seed %d (rerun with -stress.seed=%d)", seed, seed)
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 24 * heap.PageSize,
		VacuumFreezeMinAge: -1, CheckpointTimeout: -1, WALWriterDelay: time.Millisecond, FillFactor: cfg.fillFactor})
	perSeg := uint64(clog.XidsPerPage * clog.PagesPerSegment)
	defer db.Close()
	nkeys := cmp.Or(cfg.nkeys, 40)
	key := func(i int) string { return fmt.Sprintf("key%02d-%s", i, strings.Repeat("x", 40)) }

	var mu sync.Mutex // commits and snapshots
	model := map[string]string{}
	var seq int
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	errc := make(chan error, 64)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
		cancel()
	}
	retryable := func(err error) bool {
		return errors.Is(err, ErrSerializationFailure) || errors.Is(err, ErrDeadlock)
	}
	var wg sync.WaitGroup

	// Writers.
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				iso := ReadCommitted
				if r.IntN(2) == 0 {
					iso = RepeatableRead
				}
				sc := SyncCommitOn
				if cfg.asyncCommits && r.IntN(3) == 0 {
					sc = SyncCommitOff
				}
				tx, err := db.Begin(context.Background(), TxnOptions{Isolation: iso, SynchronousCommit: &sc})
				if err != nil {
					report(err)
					return
				}
				mine := map[string]*string{}
				var werr error
				for n := 1 + r.IntN(4); n > 0 && werr == nil; n-- {
					k := key(r.IntN(nkeys))
					mu.Lock()
					seq++
					s := seq
					mu.Unlock()
					switch op := r.IntN(10); {
					case cfg.deleteRanges && op == 0 && r.IntN(4) == 0:
						lo := r.IntN(nkeys)
						hi := min(nkeys, lo+1+r.IntN(8))
						var del []string
						_, werr = tx.DeleteRange([]byte(key(lo)), []byte(key(hi)), func(k, _ []byte) { del = append(del, string(k)) })
						if werr == nil {
							for _, k := range del {
								mine[k] = nil
							}
						}
					case op < 3:
						werr = tx.Delete([]byte(k))
						if werr == nil {
							mine[k] = nil
						}
					case op < 5:
						var v string
						werr = tx.Update([]byte(k), func(old []byte, found bool) ([]byte, error) {
							if !found {
								v = fmt.Sprintf("%d|new", s)
							} else {
								v = fmt.Sprintf("%d|%s", s, strings.SplitN(string(old), "|", 2)[0])
							}
							return []byte(v), nil
						})
						if werr == nil {
							mine[k] = &v
						}
					default:
						v := fmt.Sprintf("%d|%s", s, strings.Repeat("v", 60+r.IntN(200)))
						if r.IntN(40) == 0 {
							v = fmt.Sprintf("%d|%s", s, strings.Repeat("L", 3000)) // out of line
						}
						werr = tx.Put([]byte(k), []byte(v))
						if werr == nil {
							mine[k] = &v
						}
					}
					if _, wrote := mine[k]; werr == nil && wrote {
						// read-your-writes (k is not written by a range delete)
						got, gerr := tx.Get([]byte(k))
						want := mine[k]
						if (want == nil) != errors.Is(gerr, ErrNotFound) || (want != nil && (gerr != nil || string(got) != *want)) {
							report(fmt.Errorf("writer %d: own Get(%s) = %.20q, %v; want %v", w, k, got, gerr, want != nil))
							tx.Rollback()
							return
						}
					}
				}
				if werr != nil {
					tx.Rollback()
					if retryable(werr) {
						continue
					}
					report(fmt.Errorf("writer %d: %w", w, werr))
					return
				}
				if r.IntN(6) == 0 {
					tx.Rollback()
					continue
				}
				mu.Lock()
				err = tx.Commit()
				if err == nil {
					for k, v := range mine {
						if v == nil {
							delete(model, k)
						} else {
							model[k] = *v
						}
					}
				}
				mu.Unlock()
				if err != nil && !retryable(err) {
					report(fmt.Errorf("writer %d commit: %w", w, err))
					return
				}
			}
		}(w)
	}

	check := func(tx *Txn, want map[string]string, r *rand.Rand, what string) error {
		got := map[string]string{}
		if err := tx.Scan(nil, nil, func(k, v []byte) bool { got[string(k)] = string(v); return true }); err != nil {
			return fmt.Errorf("%s: Scan: %w", what, err)
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("%s: Scan: %s", what, diffState(got, want))
		}
		var keys []string
		if err := tx.ScanKeys(nil, nil, func(k []byte) bool { keys = append(keys, string(k)); return true }); err != nil {
			return fmt.Errorf("%s: ScanKeys: %w", what, err)
		}
		wk := slices.Sorted(maps.Keys(want))
		if !slices.Equal(keys, wk) {
			return fmt.Errorf("%s: ScanKeys %d keys, want %d", what, len(keys), len(wk))
		}
		n, err := tx.Count(nil, nil)
		if err != nil || n != len(want) {
			return fmt.Errorf("%s: Count = %d, %v; want %d", what, n, err, len(want))
		}
		for j := 0; j < 10; j++ {
			k := key(r.IntN(nkeys))
			wv, ok := want[k]
			v, err := tx.Get([]byte(k))
			if ok != (err == nil) || (ok && string(v) != wv) || (err != nil && !errors.Is(err, ErrNotFound)) {
				return fmt.Errorf("%s: Get(%s) = %.30q, %v; want %.30q, %v", what, k[:5], v, err, wv, ok)
			}
			ex, err := tx.Exists([]byte(k))
			if err != nil || ex != ok {
				return fmt.Errorf("%s: Exists(%s) = %v, %v; want %v", what, k[:5], ex, err, ok)
			}
		}
		return nil
	}

	// REPEATABLE READ readers: snapshot (under mu), then check repeatedly
	// while the heap churns.
	for rd := 0; rd < 2; rd++ {
		wg.Add(1)
		go func(rd int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(100+rd)))
			for ctx.Err() == nil {
				tx, err := db.Begin(context.Background(), TxnOptions{Isolation: RepeatableRead, ReadOnly: true})
				if err != nil {
					report(err)
					return
				}
				mu.Lock()
				if _, err := tx.Get([]byte("snapshot")); err != nil && !errors.Is(err, ErrNotFound) { // takes the snapshot
					mu.Unlock()
					report(err)
					return
				}
				want := maps.Clone(model)
				mu.Unlock()
				for i := 0; i < 1+r.IntN(30) && ctx.Err() == nil; i++ {
					if err := check(tx, want, r, fmt.Sprintf("RR reader %d pass %d", rd, i)); err != nil {
						report(err)
						tx.Rollback()
						return
					}
					time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
				}
				tx.Rollback()
			}
		}(rd)
	}
	// READ COMMITTED reader: one statement at a time against the current state.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(seed, 200))
		for ctx.Err() == nil {
			tx, err := db.Begin(context.Background(), TxnOptions{Isolation: ReadCommitted, ReadOnly: true})
			if err != nil {
				report(err)
				return
			}
			for i := 0; i < 20 && ctx.Err() == nil; i++ {
				mu.Lock()
				err := check(tx, model, r, "RC reader")
				mu.Unlock()
				if err != nil {
					report(err)
					break
				}
				time.Sleep(time.Millisecond)
			}
			tx.Rollback()
		}
	}()
	// Vacuum and checkpoints.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			if cfg.xidJumps && i%3 == 0 {
				db.procs.mu.Lock()
				db.procs.nextXid += perSeg / 2
				db.procs.mu.Unlock()
			}
			if cfg.vacuumEvery < 0 {
				if err := db.Checkpoint(); err != nil {
					report(fmt.Errorf("checkpoint: %w", err))
					return
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if _, err := db.Vacuum(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				report(fmt.Errorf("vacuum: %w", err))
				return
			}
			if i%10 == 0 {
				if err := db.Checkpoint(); err != nil {
					report(fmt.Errorf("checkpoint: %w", err))
					return
				}
			}
			time.Sleep(cfg.vacuumEvery)
		}
	}()
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	s := db.Stats()
	t.Logf("CLOG truncations %d, oldest xid %d", s.CLOG.Truncations, db.clog.OldestXid())
	t.Logf("seq %d; prunes by update %d, by read %d; vacuum runs %d, removed %d; keys %d", seq,
		s.Heap.PrunesByUpdate, s.Heap.PrunesByRead, s.Vacuum.Runs, s.Vacuum.TuplesRemoved, len(model))
	mustVerify(t, db)
}
