package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// stopAfter is a context whose Err reports context.Canceled from its at-th
// call on (never, for at 0), and counts the calls: recovery looks at its
// context only through Err, so the stop lands at a chosen look.
type stopAfter struct {
	context.Context
	at    int64
	looks atomic.Int64
}

func (c *stopAfter) Err() error {
	if n := c.looks.Add(1); c.at > 0 && n >= c.at {
		return context.Canceled
	}
	return nil
}

// TestOpenContextStopsRecovery: an OpenContext whose context ends during
// recovery (reading the WAL, redo, the rebuild of the key index) returns
// an error matching ErrOpenStopped and context.Canceled, and the directory
// it leaves opens afterwards with every committed key, whatever look the
// stop came at, as after a crash during recovery; a stop before the first
// look leaves a new directory absent.
func TestOpenContextStopsRecovery(t *testing.T) {
	for _, rebuild := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild=%v", rebuild), func(t *testing.T) {
			m := vfs.NewMemFS()
			o := Options{FS: m, SharedBuffers: 4 << 20, WALSegmentSize: 1 << 20}
			db := openTest(t, "/d", o)
			const keys = 3000
			for i := 0; i < keys; i += 100 {
				if err := db.Update(context.Background(), func(tx *Txn) error {
					for j := i; j < i+100; j++ {
						if err := tx.Put(fmt.Appendf(nil, "k%05d", j), fmt.Appendf(nil, "value %d", j)); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			base := m.CrashCopy(vfs.DropUnsynced, nil) // a crash: every commit is in the WAL since the first checkpoint
			db.Close()
			if rebuild {
				// No index file: Open rebuilds the index from the heap.
				if err := base.Remove(filepath.Join("/d", indexFileName)); err != nil {
					t.Fatal(err)
				}
			}
			// How many looks a whole recovery takes.
			count := &stopAfter{Context: context.Background()}
			o.FS = base.Clone()
			db, err := OpenContext(count, "/d", o)
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
			total := count.looks.Load()
			t.Logf("a whole recovery looks at its context %d times", total)
			if total < 3 {
				t.Fatalf("a recovery of %d keys looked at its context %d times; want it to look in each pass", keys, total)
			}
			for at := int64(1); at <= total; at++ {
				fsys := base.Clone()
				o.FS = fsys
				_, err := OpenContext(&stopAfter{Context: context.Background(), at: at}, "/d", o)
				if !errors.Is(err, ErrOpenStopped) || !errors.Is(err, context.Canceled) {
					t.Fatalf("stop at look %d of %d: %v; want ErrOpenStopped and context.Canceled", at, total, err)
				}
				db := openTest(t, "/d", o)
				n, _ := countKeys(t, db)
				if n != keys {
					t.Errorf("stop at look %d of %d, then Open: %d keys, want %d", at, total, n, keys)
				}
				if rep, err := db.Verify(); err != nil || !rep.OK() {
					t.Errorf("stop at look %d of %d, then Open: Verify %v %v", at, total, err, rep.Problems)
				}
				db.Close()
			}
		})
	}
	// A new directory whose first Open is stopped is not left behind.
	m := vfs.NewMemFS()
	_, err := OpenContext(&stopAfter{Context: context.Background(), at: 1}, "/new", Options{FS: m})
	if !errors.Is(err, ErrOpenStopped) {
		t.Fatalf("first Open stopped: %v", err)
	}
	if _, err := m.Stat("/new"); err == nil {
		t.Errorf("a new data directory whose first Open was stopped is left behind")
	}
}

// TestOpenContextStopsIndexFileLoad: an Open after a clean shutdown spends
// its time loading the index file, so OpenContext looks at its context
// while it loads (once every indexLoadLook keys), and a stop at any of
// those looks leaves the file in use for the next Open, with every key.
func TestOpenContextStopsIndexFileLoad(t *testing.T) {
	o := Options{Autovacuum: noAutovacuum}
	// fill returns a cleanly shut down database of n keys, written 1,000
	// a transaction.
	fill := func(n int) *vfs.MemFS {
		m := vfs.NewMemFS()
		o := o
		o.FS = m
		db := openTest(t, "/d", o)
		for i := 0; i < n; i += 1000 {
			if err := db.Update(context.Background(), func(tx *Txn) error {
				for j := i; j < min(i+1000, n); j++ {
					if err := tx.Put(fmt.Appendf(nil, "k%06d", j), []byte("v")); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// looks opens a copy of m and returns how many times Open looked at
	// its context.
	looks := func(m *vfs.MemFS) int64 {
		count := &stopAfter{Context: context.Background()}
		o := o
		o.FS = m.Clone()
		db, err := OpenContext(count, "/d", o)
		if err != nil {
			t.Fatal(err)
		}
		if !db.Recovery().IndexFromFile {
			t.Fatal("the index was rebuilt after a clean shutdown; the test needs the index file loaded")
		}
		db.Close()
		return count.looks.Load()
	}
	const keys = 34_000 // over twice indexLoadLook: three looks while loading
	base := fill(keys)
	total := looks(base)
	loads := int64(keys+indexLoadLook-1) / indexLoadLook
	// The other looks (the WAL's reading and redo, from the shutdown
	// checkpoint) are as many for one key: the difference is the load's.
	if one := looks(fill(1)); total-one != loads-1 {
		t.Fatalf("an Open that loaded %d keys from the index file looked at its context %d times, one that loaded 1 key %d times; want %d more (one every %d keys)", keys, total, one, loads-1, indexLoadLook)
	}
	// The last looks are the load's: nothing after it looks.
	for at := total - loads + 1; at <= total; at++ {
		o.FS = base.Clone()
		if _, err := OpenContext(&stopAfter{Context: context.Background(), at: at}, "/d", o); !errors.Is(err, ErrOpenStopped) || !errors.Is(err, context.Canceled) {
			t.Fatalf("stop at look %d of %d: %v; want ErrOpenStopped and context.Canceled", at, total, err)
		}
		db := openTest(t, "/d", o)
		if !db.Recovery().IndexFromFile {
			t.Errorf("stop at look %d of %d, then Open: the index was rebuilt, not loaded from its file", at, total)
		}
		n, _ := countKeys(t, db)
		if n != keys {
			t.Errorf("stop at look %d of %d, then Open: %d keys, want %d", at, total, n, keys)
		}
		db.Close()
	}
}
