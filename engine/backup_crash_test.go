package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"mvkv/vfs"
)

// TestBackupPowerLossEveryOp cuts the power at every file operation a
// Backup makes on its target (and at a sample of the source's), into a
// directory whose parent does not exist yet: the target exists in a crash
// copy only once whole, and then opens, verifies and holds the acknowledged
// prefix; the source recovers with every acknowledged commit.
func TestBackupPowerLossEveryOp(t *testing.T) {
	m := vfs.NewMemFS()
	db := openMem(t, m, Options{SharedBuffers: 160 << 10})
	defer db.Close()
	const accounts, writers = 400, 2
	wl := startBackupWorkload(t, db, accounts, writers)
	wl.waitAcked(20)
	type point struct {
		op     vfs.Op
		fs     *vfs.MemFS
		acked  []int64
		target bool
	}
	var (
		mu     sync.Mutex
		points []point
		during bool
		n      int
	)
	rng := rand.New(rand.NewPCG(1, 2))
	sample := 16
	if raceEnabled {
		sample = 64
	}
	m.SetOpHook(func(p vfs.CrashPoint) {
		mu.Lock()
		defer mu.Unlock()
		if !during {
			return
		}
		n++
		target := strings.HasPrefix(p.Op.Path, "/bk")
		if !target && n%sample != 0 {
			return
		}
		mode := vfs.DropUnsynced
		if n%2 == 0 {
			mode = vfs.TearLast
		}
		points = append(points, point{p.Op, p.CrashCopy(mode, rng), wl.ackedNow(), target})
	})
	lo := wl.ackedNow()
	mu.Lock()
	during = true
	mu.Unlock()
	info, err := db.Backup(context.Background(), "/bk/nested/copy")
	mu.Lock()
	during = false
	mu.Unlock()
	hi := wl.ackedNow()
	after := m.CrashCopy(vfs.DropUnsynced, nil)
	m.SetOpHook(nil)
	wl.finish(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup %+v; %d crash points", info, len(points))
	srcEvery := 4
	if raceEnabled {
		srcEvery = 12
	}
	if _, err := after.Stat("/bk/nested/copy/control"); err != nil {
		t.Fatalf("after a power loss following Backup's return: %v", err)
	}
	checkBackupCopy(t, after, "/bk/nested/copy", accounts, lo, hi)
	for i, p := range points {
		if _, err := p.fs.Stat("/bk/nested/copy"); err == nil {
			checkBackupCopy(t, p.fs, "/bk/nested/copy", accounts, lo, p.acked)
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("point %d (%v): stat: %v", i, p.op, err)
		}
		if p.target && i%srcEvery != 0 {
			continue
		}
		src, err := Open("/db", Options{FS: p.fs, SharedBuffers: 2 << 20, WALSegmentSize: 1 << 20, CheckpointTimeout: -1})
		if err != nil {
			t.Fatalf("point %d (%v): open the source: %v", i, p.op, err)
		}
		err = src.View(context.Background(), func(tx *Txn) error {
			for w, acked := range p.acked {
				v, err := tx.Get(ledgerKey(w))
				if err != nil {
					return err
				}
				if n, _ := strconv.ParseInt(string(v), 10, 64); n < acked {
					return fmt.Errorf("writer %d's ledger reads %d, %d was acknowledged", w, n, acked)
				}
			}
			return nil
		})
		src.Close()
		if err != nil {
			t.Fatalf("point %d (%v): the source after a power loss: %v", i, p.op, err)
		}
	}
}
