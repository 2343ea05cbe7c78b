package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"mvkv/internal/heap"
)

// TestPruneAccounting: one writer updates, deletes, re-inserts and rolls
// back on a few pages, a few values out of line, with snapshots held now
// and then, pages pruned by
// its updates and reads and, every few hundred transactions, by vacuum.
// The counters must add up at every vacuum and at the end: every version
// placed is on the heap or was counted removed by exactly one of the
// prunes by update or read or by vacuum (its pruning or its second pass),
// and autovacuum's dead count is what the transactions' ends added less
// what pruning outside vacuum took off (never below zero), paid in full by
// each completed vacuum, a manual one too.
func TestPruneAccounting(t *testing.T) {
	seed := testSeed(t, 0)
	r := rand.New(rand.NewPCG(seed, 1))
	db := openTest(t, t.TempDir(), Options{Autovacuum: noAutovacuum, SharedBuffers: 32 * heap.PageSize, VacuumFreezeMinAge: -1, CheckpointTimeout: -1})
	defer db.Close()
	ctx := context.Background()
	const nkeys = 60
	live := map[string]bool{}
	var placed int64 // versions placed
	var removedByVacuum uint64
	// dead is autovacuum's count as the test expects it; pruned the
	// versions pruning outside vacuum had removed when it was last set.
	var dead int64
	pruned := func() int64 { st := db.Stats(); return int64(st.Heap.PrunedByUpdate + st.Heap.PrunedByRead) }
	lastPruned := int64(0)
	check := func(when string) {
		t.Helper()
		st := db.Stats()
		usage, _, err := db.StatTuple(ctx, func(key []byte) string {
			if key == nil {
				return "chunk"
			}
			return "version"
		})
		if err != nil {
			t.Fatal(err)
		}
		onHeap := int64(usage["version"].Tuples)
		removed := int64(st.Heap.PrunedByUpdate + st.Heap.PrunedByRead + removedByVacuum)
		if placed != onHeap+removed {
			t.Fatalf("%s: %d versions placed; %d on the heap + %d pruned by updates + %d by reads + %d by vacuum = %d",
				when, placed, onHeap, st.Heap.PrunedByUpdate, st.Heap.PrunedByRead, removedByVacuum, onHeap+removed)
		}
		if _, got := db.autovacuumDue(); got != dead {
			t.Fatalf("%s: dead count %d, want %d", when, got, dead)
		}
	}
	var held *Txn
	for i := 0; i < 4000; i++ {
		if held == nil && r.IntN(200) == 0 {
			var err error
			if held, err = db.Begin(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := held.Get([]byte("x")); err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
		} else if held != nil && r.IntN(100) == 0 {
			held.Rollback()
			held = nil
		}
		tx, err := db.Begin(ctx, TxnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var np, no int64
		mine := map[string]bool{}
		for n := 1 + r.IntN(3); n > 0; n-- {
			k := fmt.Sprintf("k%02d", r.IntN(nkeys))
			alive, ok := mine[k]
			if !ok {
				alive = live[k]
			}
			if r.IntN(4) == 0 {
				if err := tx.Delete([]byte(k)); err != nil {
					t.Fatal(err)
				}
				if alive {
					no++
				}
				mine[k] = false
				continue
			}
			v := strings.Repeat("v", 100+r.IntN(300))
			if r.IntN(30) == 0 {
				v = strings.Repeat("L", 3000+r.IntN(10000)) // out of line: left to vacuum
			}
			if err := tx.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			np++
			if alive {
				no++
			}
			mine[k] = true
		}
		placed += np
		// The prunes this transaction's reads and writes made come off
		// before its end adds what it left (noteEnd runs as it ends).
		p := pruned()
		dead, lastPruned = max(0, dead-(p-lastPruned)), p
		if r.IntN(5) == 0 {
			tx.Rollback()
			dead += np
		} else {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			dead += no
			for k, v := range mine {
				live[k] = v
			}
		}
		if i%50 == 49 {
			check(fmt.Sprintf("after transaction %d", i))
		}
		if i%500 == 499 {
			st := mustVacuum(t, db)
			removedByVacuum += st.TuplesRemoved
			dead = 0
			check(fmt.Sprintf("after vacuum at transaction %d", i))
		}
	}
	if held != nil {
		held.Rollback()
	}
	check("at the end")
	st := db.Stats()
	if st.Heap.PrunesByUpdate+st.Heap.PrunesByRead == 0 || removedByVacuum == 0 {
		t.Fatalf("pruned by updates %d, by reads %d, by vacuum %d versions: the workload no longer tests pruning",
			st.Heap.PrunedByUpdate, st.Heap.PrunedByRead, removedByVacuum)
	}
	t.Logf("seed %d: %d versions placed; pruned by updates %d (%d pages), by reads %d (%d pages), by vacuum %d",
		seed, placed, st.Heap.PrunedByUpdate, st.Heap.PrunesByUpdate, st.Heap.PrunedByRead, st.Heap.PrunesByRead, removedByVacuum)
}
