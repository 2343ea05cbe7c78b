package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"mvkv/vfs"
)

// errRollBack makes a writer of TestVerifyBesideWriters roll back.
var errRollBack = errors.New("roll back")

// TestVerifyBesideWriters runs Verify in a loop beside writers that put,
// overwrite and roll back large values (out of line, in chunk tuples) and
// small ones, with pruning (a pool of 16 pages, so that pages are written
// out while Verify reads the files, and full pages are pruned) and vacuum
// running. The database is never damaged, so no Verify may find anything
// wrong with a value: no pointer or directory problem, no lost key, no
// orphan chunk. A writer running when Verify began, or begun since, may
// have placed a version whose chunks lie on a page Verify read before they
// were written there; its value is not judged yet. (The index and
// visibility map checks compare things read at different moments and are
// not exact beside writers, as Verify's doc says; the last Verify, run
// after the writers stopped, must find nothing at all.)
func TestVerifyBesideWriters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := openTest(t, "/db", Options{FS: vfs.NewMemFS(), SharedBuffers: 16 * 8192,
		Autovacuum: noAutovacuum, CheckpointTimeout: -1, SynchronousCommit: SyncCommitOff})
	defer db.Close()
	rounds := 40
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
					if err := tx.Put([]byte(key), val); err != nil {
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
		var bad []string
		for _, p := range rep.Problems {
			if strings.Contains(p, "external value") || strings.Contains(p, "directory") || strings.Contains(p, "keys lost") {
				bad = append(bad, p)
			}
		}
		if len(bad) > 0 || len(rep.LostKeys) > 0 || rep.OrphanChunks > 0 || len(rep.Notes) > 0 {
			t.Errorf("Verify %d beside writers: lost keys %q, %d orphan chunks, notes %q, problems with values:\n%s",
				r, rep.LostKeys, rep.OrphanChunks, rep.Notes, strings.Join(bad, "\n"))
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
