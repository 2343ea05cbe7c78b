package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"mvkv/vfs"
)

// TestBackupUnderChurn takes backups while writers move balances, a
// goroutine deletes ranges of out-of-line values, and autovacuum (and
// explicit vacuums, truncating the heap) run, through a small pool: each
// copy opens, verifies and holds the acknowledged prefix. With
// synchronous commit and early lock release off and on, and with
// asynchronous commit.
func TestBackupUnderChurn(t *testing.T) {
	for _, c := range []struct {
		name  string
		async bool
		elr   bool
	}{{"sync", false, false}, {"sync-elr", false, true}, {"async", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			m := vfs.NewMemFS()
			elr, av := c.elr, true
			o := Options{SharedBuffers: 192 << 10, EarlyLockRelease: &elr, Autovacuum: &av,
				AutovacuumNaptime: time.Millisecond, AutovacuumVacuumThreshold: 20, AutovacuumVacuumScaleFactor: -1}
			if c.async {
				o.SynchronousCommit = SyncCommitOff
			}
			db := openMem(t, m, o)
			defer db.Close()
			const accounts, writers = 600, 2
			wl := startBackupWorkload(t, db, accounts, writers)
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var churnErr error
			var mu sync.Mutex
			fail := func(err error) {
				if err != nil && !errors.Is(err, ErrClosed) {
					mu.Lock()
					if churnErr == nil {
						churnErr = err
					}
					mu.Unlock()
				}
			}
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					fail(db.Update(context.Background(), func(tx *Txn) error {
						_, err := tx.DeleteRange([]byte("big"), []byte("big9"), nil)
						return err
					}))
					_, err := db.Vacuum(context.Background())
					fail(err)
				}
			})
			backups := 2
			if raceEnabled {
				backups = 1
			}
			for b := range backups {
				wl.waitAcked(int64(30 * (b + 1)))
				lo := wl.ackedNow()
				dir := fmt.Sprintf("/bk%d", b)
				if _, err := db.Backup(context.Background(), dir); err != nil {
					t.Fatal(err)
				}
				hi := wl.ackedNow()
				checkBackupCopy(t, m, dir, accounts, lo, hi)
			}
			close(stop)
			wg.Wait()
			wl.finish(t)
			if churnErr != nil {
				t.Fatal(churnErr)
			}
		})
	}
}
