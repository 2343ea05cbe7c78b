package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"mvkv/engine"
)

// engineTarget runs the benchmark on the embedded engine.
type engineTarget struct {
	db       *engine.DB
	opts     engine.TxnOptions // READ COMMITTED, synchronous commit as configured
	openTime time.Duration     // engine.Open's wall time, recovery included
}

func openEngine(dir string, o TargetOptions) (*engineTarget, error) {
	sc := engine.SyncCommitOn
	if !o.SynchronousCommit {
		sc = engine.SyncCommitOff
	}
	eo := o.Engine
	eo.FS = engineDiskFS(o.Disk)
	eo.Logger = o.Logger
	eo.SharedBuffers = o.SharedBuffers
	eo.SynchronousCommit = sc
	eo.CommitDelay = o.CommitDelay
	// TargetOptions' commit_siblings is the setting's value, where
	// engine.Options takes NoCommitSiblings for 0.
	eo.CommitSiblings = o.CommitSiblings
	if o.CommitSiblings == 0 {
		eo.CommitSiblings = engine.NoCommitSiblings
	}
	begin := time.Now()
	db, err := engine.Open(dir, eo)
	if err != nil {
		return nil, fmt.Errorf("bench: open engine in %s: %w", dir, err)
	}
	return &engineTarget{
		db:       db,
		opts:     engine.TxnOptions{Isolation: engine.ReadCommitted, SynchronousCommit: &sc},
		openTime: time.Since(begin),
	}, nil
}

// OpenStats says how long opening the directory took and what recovery
// did.
func (t *engineTarget) OpenStats() *OpenStats {
	return &OpenStats{Took: t.openTime, Recovery: t.db.Recovery()}
}

func (t *engineTarget) Name() string { return "engine" }

func (t *engineTarget) Close() error { return t.db.Close() }

func (t *engineTarget) CommitStats() CommitStats {
	s := t.db.Stats()
	return CommitStats{Commits: s.Txn.Commits, WALSyncs: s.WAL.Syncs, WALBytes: s.WAL.Bytes}
}

func (t *engineTarget) EngineStats() engine.Stats { return t.db.Stats() }

// TableUsage counts the heap pages holding rows of the tables the
// transactions update (accounts, tellers, branches) and of history, with
// engine.DB.StatTuple. A page holding rows of both kinds counts in both,
// so the two may add up to more than the heap; were the tables relations
// of their own, as in PostgreSQL, those rows would sit on pages of each.
func (t *engineTarget) TableUsage(ctx context.Context) (TableUsage, error) {
	u, _, err := t.db.StatTuple(ctx, func(key []byte) string {
		switch {
		case bytes.HasPrefix(key, []byte(prefixHistory)):
			return "history"
		case bytes.HasPrefix(key, []byte(prefixAccount)), bytes.HasPrefix(key, []byte(prefixTeller)),
			bytes.HasPrefix(key, []byte(prefixBranch)):
			return "updated"
		}
		return "other"
	})
	if err != nil {
		return TableUsage{}, err
	}
	return TableUsage{UpdatedPages: u["updated"].Pages, HistoryPages: u["history"].Pages}, nil
}

func (t *engineTarget) DetectScale(ctx context.Context) (int, error) {
	txn, err := t.db.Begin(ctx, engine.TxnOptions{Isolation: engine.RepeatableRead, ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer txn.Rollback()
	n := 0
	if err := txn.Scan([]byte(prefixBranch), prefixEnd(prefixBranch), func(k, _ []byte) bool {
		if isRowKey(prefixBranch, string(k)) {
			n++
		}
		return true
	}); err != nil {
		return 0, err
	}
	return n, txn.Commit()
}

// foreignChecker is a target that can tell whether it holds keys other
// than pgbench's, which a load must not be mixed with.
type foreignChecker interface {
	ForeignKey(ctx context.Context) (key []byte, found bool, err error)
}

// ForeignKey returns the first key that is not one of pgbench's tables'
// (at most 64 bytes of it), if any.
func (t *engineTarget) ForeignKey(ctx context.Context) ([]byte, bool, error) {
	txn, err := t.db.Begin(ctx, engine.TxnOptions{Isolation: engine.RepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, false, err
	}
	defer txn.Rollback()
	var found []byte
	err = txn.Scan(nil, nil, func(k, _ []byte) bool {
		for _, p := range []string{prefixAccount, prefixTeller, prefixBranch, prefixHistory} {
			if isRowKey(p, string(k)) {
				return true
			}
		}
		found = k[:min(len(k), 64)]
		return false
	})
	return found, found != nil, err
}

func (t *engineTarget) LoadBatch(ctx context.Context, rows []KV, durable bool) error {
	sc := engine.SyncCommitOff
	if durable {
		sc = engine.SyncCommitOn
	}
	txn, err := t.db.Begin(ctx, engine.TxnOptions{Isolation: engine.ReadCommitted, SynchronousCommit: &sc})
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := txn.Put(r.Key, r.Value); err != nil {
			txn.Rollback()
			return fmt.Errorf("bench: load %q: %w", r.Key, err)
		}
	}
	return txn.Commit()
}

func (t *engineTarget) FinishLoad(ctx context.Context) error { return t.db.Checkpoint() }

// BulkLoad loads rows with engine.DB.BulkLoad, which writes, fsyncs and
// commits the pages and writes the index file; a directory that is not
// empty (ErrBulkLoadNotEmpty before anything was written) is left to the
// batch load.
func (t *engineTarget) BulkLoad(ctx context.Context, rows iter.Seq2[[]byte, []byte]) (bool, error) {
	_, err := t.db.BulkLoad(ctx, rows)
	if errors.Is(err, engine.ErrBulkLoadNotEmpty) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("bench: bulk load: %w", err)
	}
	return true, nil
}

func (t *engineTarget) Sums(ctx context.Context) (Sums, error) {
	var s Sums
	txn, err := t.db.Begin(ctx, engine.TxnOptions{Isolation: engine.RepeatableRead, ReadOnly: true})
	if err != nil {
		return s, err
	}
	defer txn.Rollback()
	var derr error
	sum := func(prefix string, size int, dst *int64) error {
		return txn.Scan([]byte(prefix), prefixEnd(prefix), func(k, v []byte) bool {
			b, err := decodeBalance(k, v, size)
			if err != nil {
				derr = err
				return false
			}
			*dst += b
			return true
		})
	}
	for _, p := range []struct {
		prefix string
		size   int
		dst    *int64
	}{
		{prefixAccount, accountValueSize, &s.Accounts},
		{prefixTeller, tellerValueSize, &s.Tellers},
		{prefixBranch, branchValueSize, &s.Branches},
	} {
		if err := sum(p.prefix, p.size, p.dst); err != nil {
			return s, err
		}
		if derr != nil {
			return s, derr
		}
	}
	err = txn.Scan([]byte(prefixHistory), prefixEnd(prefixHistory), func(k, v []byte) bool {
		h, err := decodeHistory(k, v)
		if err != nil {
			derr = err
			return false
		}
		s.History += h.Delta
		s.HistoryRows++
		return true
	})
	if err != nil {
		return s, err
	}
	if derr != nil {
		return s, derr
	}
	return s, txn.Commit()
}

func (t *engineTarget) NewClient(ctx context.Context) (Client, error) {
	return &engineClient{db: t.db, opts: t.opts}, nil
}

// engineClient is one session on the embedded engine.
type engineClient struct {
	db   *engine.DB
	opts engine.TxnOptions
}

func (c *engineClient) Close() error { return nil }

// update is pgbench's "UPDATE t SET balance = balance + :delta WHERE id = :id"
// as one read-modify-write; fn may run more than once (EvalPlanQual), so it
// only records the balance of its last run.
func (c *engineClient) update(txn *engine.Txn, key []byte, size int, delta int64) (int64, error) {
	var bal int64
	err := txn.Update(key, func(old []byte, found bool) ([]byte, error) {
		if !found {
			return nil, fmt.Errorf("%w: %q", errMissingRow, key)
		}
		nv, b, err := addBalance(key, old, size, delta)
		bal = b
		return nv, err
	})
	return bal, err
}

func (c *engineClient) TPCB(ctx context.Context, p *TxnParams, simple bool) (err error) {
	txn, err := c.db.Begin(ctx, c.opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// A failed Commit has already ended the transaction.
			if rerr := txn.Rollback(); rerr != nil && !errors.Is(rerr, engine.ErrTxnDone) {
				err = errors.Join(err, rerr)
			}
		}
	}()
	ak := accountKey(p.AID)
	bal, err := c.update(txn, ak, accountValueSize, p.Delta)
	if err != nil {
		return err
	}
	v, err := txn.Get(ak)
	if err != nil {
		return err
	}
	got, err := decodeBalance(ak, v, accountValueSize)
	if err != nil {
		return err
	}
	if got != bal {
		return fmt.Errorf("%w: %q wrote %d, read %d", errReadMismatch, ak, bal, got)
	}
	if !simple {
		if _, err := c.update(txn, tellerKey(p.TID), tellerValueSize, p.Delta); err != nil {
			return err
		}
		if _, err := c.update(txn, branchKey(p.BID), branchValueSize, p.Delta); err != nil {
			return err
		}
	}
	if err := txn.Put(bytes.Clone(p.HistoryKey), p.historyValue()); err != nil {
		return err
	}
	return txn.Commit()
}

func (c *engineClient) SelectOnly(ctx context.Context, aid int64) (err error) {
	opts := c.opts
	opts.ReadOnly = true
	txn, err := c.db.Begin(ctx, opts)
	if err != nil {
		return err
	}
	ak := accountKey(aid)
	v, err := txn.Get(ak)
	if err == nil {
		_, err = decodeBalance(ak, v, accountValueSize)
	}
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) {
			err = fmt.Errorf("%w: %q", errMissingRow, ak)
		}
		txn.Rollback()
		return err
	}
	return txn.Commit()
}
