// Command crashapp crash-tests a small bank application built on mvkv's
// engine: it runs transfers on a vfs.MemFS, takes a crash copy after every
// file operation, reopens the engine on each copy and checks the
// application's invariant. With -split, transfers debit and credit in two
// transactions, a bug the crash loop must find.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"

	"mvkv/engine"
	"mvkv/vfs"
)

var split = flag.Bool("split", false, "debit and credit in separate transactions (the planted bug)")

func get(tx *engine.Txn, k string) (int, error) {
	v, err := tx.Get([]byte(k))
	if errors.Is(err, engine.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

func add(tx *engine.Txn, k string, d int) error {
	n, err := get(tx, k)
	if err != nil {
		return err
	}
	return tx.Put([]byte(k), []byte(strconv.Itoa(n+d)))
}

func transfer(ctx context.Context, db *engine.DB) error {
	if *split {
		if err := db.Update(ctx, func(tx *engine.Txn) error { return add(tx, "a", -1) }); err != nil {
			return err
		}
		return db.Update(ctx, func(tx *engine.Txn) error { return add(tx, "b", +1) })
	}
	return db.Update(ctx, func(tx *engine.Txn) error {
		if err := add(tx, "a", -1); err != nil {
			return err
		}
		return add(tx, "b", +1)
	})
}

// check: the balances sum to 100 and at least acked units moved.
func check(ctx context.Context, db *engine.DB, acked int) error {
	return db.View(ctx, func(tx *engine.Txn) error {
		a, err := get(tx, "a")
		if err != nil {
			return err
		}
		b, err := get(tx, "b")
		if err != nil {
			return err
		}
		if a+b != 100 {
			return fmt.Errorf("a+b = %d+%d, want 100", a, b)
		}
		if b < acked {
			return fmt.Errorf("b = %d, but %d transfers were acknowledged", b, acked)
		}
		return nil
	})
}

func main() {
	flag.Parse()
	ctx := context.Background()
	fsys := vfs.NewMemFS()
	_ = fsys.MkdirAll("/db")
	_ = fsys.SyncDir("/")
	off := false
	opts := engine.Options{FS: fsys, SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20,
		CheckpointTimeout: -1, Autovacuum: &off}
	db, err := engine.Open("/db", opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_ = db.Update(ctx, func(tx *engine.Txn) error { return tx.Put([]byte("a"), []byte("100")) })

	var mu sync.Mutex
	acked, points := 0, 0
	var failures []string
	fsys.SetOpHook(func(p vfs.CrashPoint) {
		mu.Lock()
		n := acked
		mu.Unlock()
		points++
		for _, mode := range []vfs.CrashMode{vfs.DropUnsynced, vfs.TearLast, vfs.KeepRandom} {
			o := opts
			o.FS = p.CrashCopy(mode, rand.New(rand.NewPCG(uint64(p.Op.Index), 1)))
			cdb, err := engine.Open("/db", o)
			if err != nil {
				failures = append(failures, fmt.Sprintf("crash after %v (%v): open: %v", p.Op, mode, err))
				continue
			}
			if err := check(ctx, cdb, n); err != nil {
				failures = append(failures, fmt.Sprintf("crash after %v (%v): %v", p.Op, mode, err))
			}
			_ = cdb.Close()
		}
	})
	for range 10 {
		if err := transfer(ctx, db); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		mu.Lock()
		acked++
		mu.Unlock()
	}
	fsys.SetOpHook(nil)
	_ = db.Close()
	fmt.Printf("%d crash points, %d failures\n", points, len(failures))
	for _, f := range failures {
		fmt.Println(f)
	}
	if len(failures) > 0 {
		os.Exit(1)
	}
}
