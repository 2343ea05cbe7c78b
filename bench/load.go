package bench

import (
	"context"
	"fmt"
	"io"
	"iter"
	"time"
)

// tableCreator is a server target (PostgreSQL, a RESP server): CreateTables
// drops and creates pgbench's tables, or deletes their rows, before Load's
// first batch, so that -i reloads a loaded server.
type tableCreator interface {
	CreateTables(ctx context.Context) error
}

// loadBatchRows is how many rows go into one load transaction.
const loadBatchRows = 10000

// Load fills an empty target with scale branches, 10*scale tellers and
// accounts*scale accounts (accounts <= 0 means pgbench's 100,000), all
// balances zero. The engine target, when its directory is empty, takes
// them in one bulk load (DB.BulkLoad), durable when it returns; otherwise
// they go in transactions of 10,000 rows, then the target's FinishLoad
// runs. Progress goes to log in pgbench -i's words. The last batch is
// durable; on the engine and pebble FinishLoad makes the rest durable.
// Errors: a scale outside 1 to MaxScale; ctx's error once it ends between
// batches (what was loaded stays); the target's errors from creating its
// tables, its bulk load or a batch, and FinishLoad's, wrapped.
func Load(ctx context.Context, t Target, scale, accounts int, log io.Writer) error {
	if scale < 1 || scale > MaxScale {
		return fmt.Errorf("bench: scale %d: must be 1 to %d", scale, MaxScale)
	}
	if accounts <= 0 {
		accounts = defaultAccounts
	}
	start := time.Now()
	if c, ok := t.(tableCreator); ok {
		fmt.Fprintf(log, "dropping old tables...\ncreating tables...\n")
		if err := c.CreateTables(ctx); err != nil {
			return err
		}
	}
	if bl, ok := t.(bulkLoader); ok {
		done, err := bulkLoad(ctx, bl, scale, accounts, start, log)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	fmt.Fprintf(log, "generating data (client-side)...\n")
	rows := make([]KV, 0, loadBatchRows)
	for bid := int64(1); bid <= int64(scale); bid++ {
		rows = append(rows, KV{branchKey(bid), branchValue(0)})
	}
	for tid := int64(1); tid <= int64(tellersPerScale*scale); tid++ {
		rows = append(rows, KV{tellerKey(tid), tellerValue(0, (tid-1)/tellersPerScale+1)})
	}
	if err := t.LoadBatch(ctx, rows, false); err != nil {
		return err
	}
	total := int64(accounts) * int64(scale)
	// pgbench reports every 100,000 rows; tests use tiny tables, so also
	// report at the end.
	const reportEvery = 100000
	rows = rows[:0]
	for aid := int64(1); aid <= total; aid++ {
		rows = append(rows, KV{accountKey(aid), accountValue(0, (aid-1)/int64(accounts)+1)})
		if len(rows) == loadBatchRows || aid == total {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := t.LoadBatch(ctx, rows, aid == total); err != nil {
				return err
			}
			rows = rows[:0]
		}
		if aid%reportEvery == 0 || aid == total {
			el := time.Since(start).Seconds()
			fmt.Fprintf(log, "%d of %d tuples (%d%%) done (elapsed %.2f s, remaining %.2f s)\n",
				aid, total, aid*100/total, el, el/float64(aid)*float64(total-aid))
		}
	}
	gen := time.Since(start)
	fmt.Fprintf(log, "checkpointing...\n")
	fstart := time.Now()
	if err := t.FinishLoad(ctx); err != nil {
		return fmt.Errorf("bench: finish load: %w", err)
	}
	fin := time.Since(fstart)
	fmt.Fprintf(log, "done in %.2f s (client-side generate %.2f s, checkpoint %.2f s).\n",
		time.Since(start).Seconds(), gen.Seconds(), fin.Seconds())
	return nil
}

// bulkLoader is a target that loads every table in one pass, in key order
// (the engine's DB.BulkLoad, PostgreSQL's COPY FREEZE into new tables).
// done false with a nil error means the target cannot take a bulk load
// (it is not empty) and Load falls back to batches.
type bulkLoader interface {
	BulkLoad(ctx context.Context, rows iter.Seq2[[]byte, []byte]) (done bool, err error)
}

// bulkLoad loads the tables through bl, in key order: accounts ("a:"),
// branches ("b:"), tellers ("t:"), ids zero-padded so that their byte
// order is their numeric order. Progress goes to log as Load's.
func bulkLoad(ctx context.Context, bl bulkLoader, scale, accounts int, start time.Time, log io.Writer) (bool, error) {
	fmt.Fprintf(log, "generating data (client-side, bulk load)...\n")
	total := int64(accounts) * int64(scale)
	const reportEvery = 100000
	rows := func(yield func(k, v []byte) bool) {
		key := make([]byte, 0, 2+idDigits)
		var val []byte
		for aid := int64(1); aid <= total; aid++ {
			bid := (aid-1)/int64(accounts) + 1
			if val == nil || aid == (bid-1)*int64(accounts)+1 {
				val = accountValue(0, bid)
			}
			key = appendID(key[:0], prefixAccount, aid)
			if !yield(key, val) {
				return
			}
			if aid%reportEvery == 0 || aid == total {
				el := time.Since(start).Seconds()
				fmt.Fprintf(log, "%d of %d tuples (%d%%) done (elapsed %.2f s, remaining %.2f s)\n",
					aid, total, aid*100/total, el, el/float64(aid)*float64(total-aid))
			}
		}
		val = branchValue(0)
		for bid := int64(1); bid <= int64(scale); bid++ {
			if !yield(appendID(key[:0], prefixBranch, bid), val) {
				return
			}
		}
		for tid := int64(1); tid <= int64(tellersPerScale*scale); tid++ {
			if !yield(appendID(key[:0], prefixTeller, tid), tellerValue(0, (tid-1)/tellersPerScale+1)) {
				return
			}
		}
	}
	done, err := bl.BulkLoad(ctx, rows)
	if err != nil || !done {
		return false, err
	}
	fmt.Fprintf(log, "done in %.2f s (bulk load: pages written, fsynced and committed, index file written).\n",
		time.Since(start).Seconds())
	return true, nil
}
