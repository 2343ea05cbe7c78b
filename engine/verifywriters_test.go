package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"mvkv/internal/verify"
	"mvkv/vfs"
	"mvkv/visibility"
)

// errRollBack makes a writer of TestVerifyBesideWriters roll back.
var errRollBack = errors.New("roll back")

// TestVerifyBesideWriters runs Verify in a loop beside writers that put,
// overwrite, delete and roll back large values (out of line, in chunk tuples) and
// small ones, with pruning (a pool of 16 pages, so that pages are written
// out while Verify reads the files, and full pages are pruned) and vacuum
// running. The database is never damaged, so no Verify may find anything:
// no problem, no lost key, no orphan chunk, no note. Verify reads the
// files page by page while the writers change them: a writer running when
// Verify began, or begun since, may have placed a version whose chunks
// lie on a page Verify read before they were written there, changed a
// page after Verify read its visibility map bits, written a tuple with an
// xid above the next xid Verify saw first, or moved a key's index entry
// to a version placed after Verify read its page; none of it is damage.
func TestVerifyBesideWriters(t *testing.T) {
	// Both commit orders: with early lock release and asynchronous
	// commits, the CLOG is set before the commit record is durable;
	// without (PostgreSQL's order), a commit record is durable for a
	// while before the CLOG says so.
	for _, elr := range []bool{true, false} {
		t.Run(fmt.Sprintf("early_lock_release=%v", elr), func(t *testing.T) {
			o := Options{FS: vfs.NewMemFS(), SharedBuffers: 16 * 8192, Autovacuum: noAutovacuum, CheckpointTimeout: -1, EarlyLockRelease: &elr}
			if elr {
				o.SynchronousCommit = SyncCommitOff
			}
			testVerifyBesideWriters(t, o)
		})
	}
}

func testVerifyBesideWriters(t *testing.T, o Options) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := openTest(t, "/db", o)
	defer db.Close()
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	const writers, keys, opsPerRound = 3, 8, 40
	// Writes are handed out per round, so that the heap and the WAL stay
	// small however slowly Verify runs (under -race, or on a loaded
	// machine): each round allows opsPerRound writes per writer, done
	// beside that round's Verify or the next.
	tokens := make(chan struct{}, writers*opsPerRound)
	var wg sync.WaitGroup
	errc := make(chan error, writers+1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-tokens:
				case <-ctx.Done():
					return
				}
				key := fmt.Sprintf("k%d", (w*7+i)%keys)
				val := fmt.Appendf(nil, "small %d %d", w, i)
				if i%3 != 0 {
					val = patterned(2*chunkSize+i%5000, uint32(w*1000+i))
				}
				err := db.Update(ctx, func(tx *Txn) error {
					put := func() error { return tx.Put([]byte(key), val) }
					if i%5 == 2 {
						put = func() error { return tx.Delete([]byte(key)) }
					}
					if err := put(); err != nil {
						return err
					}
					if i%4 == 1 {
						return errRollBack
					}
					return nil
				})
				if err != nil && !errors.Is(err, errRollBack) && ctx.Err() == nil {
					errc <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := db.Vacuum(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("vacuum: %w", err)
				return
			}
		}
	}()
	failed := false
	for r := 0; r < rounds && !failed; r++ {
		for len(tokens) < cap(tokens) {
			tokens <- struct{}{}
		}
		rep, err := db.Verify()
		if err != nil {
			t.Errorf("Verify %d: %v", r, err)
			break
		}
		if !rep.OK() || len(rep.LostKeys) > 0 || rep.OrphanChunks > 0 || len(rep.Notes) > 0 {
			t.Errorf("Verify %d beside writers: lost keys %q, %d orphan chunks:\n%s", r, rep.LostKeys, rep.OrphanChunks, rep)
			failed = true
		}
		select {
		case err := <-errc:
			t.Error(err)
			failed = true
		default:
		}
	}
	cancel()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if failed {
		return
	}
	// Quiet now: the same database checks out too.
	if rep, err := db.Verify(); err != nil || !rep.OK() {
		t.Fatalf("Verify without writers: %v\n%s", err, rep)
	}
}

// staleTarget is Verify's view of the database with some heap blocks read
// as they were on disk before a write: what a check reading the files
// beside a writer sees when it reads a page before the writer's change
// reached it.
type staleTarget struct {
	verifyTarget
	stale map[uint32][]byte
}

func (t staleTarget) ReadBlock(blk uint32, p []byte) error {
	if img, ok := t.stale[blk]; ok {
		copy(p, img)
		return nil
	}
	return t.verifyTarget.ReadBlock(blk, p)
}

// TestVerifyUpdateSeenHalf: an update by a transaction begun after Verify
// began moves a key's newest version from one page to another, and
// Verify reads the old version's page as it was before the update
// stamped its xmax, and the new version's page after it: the heap shows
// two committed newest versions, and the index (read after the heap) a
// head that is not the older one. Neither is reported: the writer had not
// ended when Verify began. Without the writer in between, the same stale
// page is damage and is reported.
func TestVerifyUpdateSeenHalf(t *testing.T) {
	db := openTest(t, "/db", Options{FS: vfs.NewMemFS(), Autovacuum: noAutovacuum, CheckpointTimeout: -1})
	defer db.Close()
	// Fill the key's page, so that its update goes to another one.
	mustPut(t, db, "k", "v1")
	old := db.idx.get([]byte("k")).headTID()
	for i := 0; freeSpaceOf(t, db, old.Block) > 1000; i++ {
		mustPut(t, db, fmt.Sprintf("fill%04d", i), strings.Repeat("f", 500))
	}
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 8192)
	if err := db.storage.ReadBlock(old.Block, img); err != nil {
		t.Fatal(err)
	}
	run := func(begun *visibility.Snapshot) VerifyReport {
		t.Helper()
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		var rep VerifyReport
		db.vac.mu.Lock()
		db.pruneMu.Lock()
		db.closeMu.RLock()
		verify.Run(staleTarget{verifyTarget{db, begun}, map[uint32][]byte{old.Block: img}}, rep.problem, rep.note)
		db.closeMu.RUnlock()
		db.pruneMu.Unlock()
		db.vac.mu.Unlock()
		return rep
	}
	begun := db.procs.snapshot()
	mustPut(t, db, "k", strings.Repeat("2", 1900))
	if head := db.idx.get([]byte("k")).headTID(); head.Block == old.Block {
		t.Fatalf("the update stayed on block %d: the test no longer moves the version", old.Block)
	}
	if rep := run(begun); !rep.OK() {
		t.Fatalf("Verify begun before the update, reading the old version's page from before it: %s", rep)
	}
	// Begun after the update: the stale page is a lost write.
	if rep := run(db.procs.snapshot()); rep.OK() {
		t.Fatal("Verify begun after the update found nothing wrong with the old version's page as it was before the update")
	}
}
