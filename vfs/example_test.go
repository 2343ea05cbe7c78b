package vfs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"

	"mvkv/engine"
	"mvkv/vfs"
)

// bank is a tiny application: two accounts and a count of transfers. Its
// invariant is that the balances sum to 100 and that account a has given
// away exactly one unit per transfer.
type bank struct{ db *engine.DB }

func (b bank) get(tx *engine.Txn, k string) (int, error) {
	v, err := tx.Get([]byte(k))
	if errors.Is(err, engine.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

func (b bank) add(tx *engine.Txn, k string, d int) error {
	n, err := b.get(tx, k)
	if err != nil {
		return err
	}
	return tx.Put([]byte(k), []byte(strconv.Itoa(n+d)))
}

// transfer moves one unit from a to b in one transaction.
func (b bank) transfer(ctx context.Context) error {
	return b.db.Update(ctx, func(tx *engine.Txn) error {
		if err := b.add(tx, "a", -1); err != nil {
			return err
		}
		if err := b.add(tx, "b", +1); err != nil {
			return err
		}
		return b.add(tx, "transfers", +1)
	})
}

// check reads the state and returns an error if the invariant does not hold
// or if fewer than acked transfers survived.
func (b bank) check(ctx context.Context, acked int) error {
	return b.db.View(ctx, func(tx *engine.Txn) error {
		a, err := b.get(tx, "a")
		if err != nil {
			return err
		}
		bb, err := b.get(tx, "b")
		if err != nil {
			return err
		}
		n, err := b.get(tx, "transfers")
		if err != nil {
			return err
		}
		switch {
		case a+bb != 100:
			return fmt.Errorf("a+b = %d+%d, want 100", a, bb)
		case a != 100-n:
			return fmt.Errorf("a = %d after %d transfers", a, n)
		case n < acked:
			return fmt.Errorf("%d transfers survived, %d were acknowledged", n, acked)
		}
		return nil
	})
}

// This example crash-tests an application built on the engine: it runs the
// application's workload on a MemFS, takes a crash copy of the file system
// after every file operation (in each crash mode), reopens the engine on the
// copy as a restarted process would, and checks the application's own
// invariant there, including that every transfer acknowledged before the
// crash point survived.
func Example_crashTest() {
	ctx := context.Background()
	// Open makes /db and syncs the directories that hold its name.
	fsys := vfs.NewMemFS()
	off := false
	opts := engine.Options{
		FS:                fsys,
		SharedBuffers:     1 << 20,
		WALSegmentSize:    1 << 20,
		CheckpointTimeout: -1,
		Autovacuum:        &off,
	}
	db, err := engine.Open("/db", opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	app := bank{db}
	_ = db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("a"), []byte("100")) })

	var (
		mu       sync.Mutex
		acked    int // transfers acknowledged so far
		points   int
		failures []string
	)
	modes := []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast, vfs.KeepRandom}
	fsys.SetOpHook(func(p vfs.CrashPoint) {
		// The workload is paused here, right after operation p.Op; whatever
		// it has acknowledged was acknowledged before this point.
		mu.Lock()
		n := acked
		mu.Unlock()
		points++
		for _, mode := range modes {
			o := opts
			o.FS = p.CrashCopy(mode, rand.New(rand.NewPCG(uint64(p.Op.Index), 1)))
			cdb, err := engine.Open("/db", o)
			if err != nil {
				failures = append(failures, fmt.Sprintf("after %v (%v): open: %v", p.Op, mode, err))
				continue
			}
			if err := (bank{cdb}).check(ctx, n); err != nil {
				failures = append(failures, fmt.Sprintf("after %v (%v): %v", p.Op, mode, err))
			}
			_ = cdb.Close()
		}
	})
	for range 5 {
		if err := app.transfer(ctx); err != nil {
			fmt.Println(err)
			return
		}
		mu.Lock()
		acked++
		mu.Unlock()
	}
	_ = db.Checkpoint()
	fsys.SetOpHook(nil)
	_ = db.Close()

	fmt.Println("crash points checked:", points > 0)
	fmt.Println("failures:", len(failures))
	for _, f := range failures {
		fmt.Println(f)
	}
	// Output:
	// crash points checked: true
	// failures: 0
}

// This example injects a write error into the WAL with FaultFS and shows the
// engine refusing further writes until it is reopened.
func ExampleFaultFS() {
	ctx := context.Background()
	mem := vfs.NewMemFS()
	fsys := vfs.NewFaultFS(mem)
	off := false
	db, err := engine.Open("/db", engine.Options{FS: fsys, SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20, Autovacuum: &off})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Fail every later WAL sync with EIO.
	fault := fsys.Inject(vfs.Rule{Kinds: vfs.SyncOps, Contains: "/wal/"})
	err = db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte("v")) })
	fmt.Println("commit failed:", err != nil, "fault fired:", fault.Fired() > 0)
	fmt.Println("read-only until reopened:", errors.Is(err, engine.ErrWALSyncFailed))
	_ = db.Close()
	// Output:
	// commit failed: true fault fired: true
	// read-only until reopened: true
}
