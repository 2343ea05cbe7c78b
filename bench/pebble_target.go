package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"mvkv/vfs"
)

// lockStripes is the number of striped key locks on the pebble target.
// Enough that 100+ clients on distinct accounts rarely share a stripe; the
// tellers and branches conflict anyway, as they do under row locks.
const lockStripes = 4096

// pebbleTarget runs the benchmark on pebble, the baseline. pebble has
// batches but no row locks, so read-modify-write atomicity comes from
// striped mutexes held from the first read until Commit returns: the same
// serialization the engine's row locks give an UPDATE at READ COMMITTED.
type pebbleTarget struct {
	db    *pebble.DB
	cache interface{ Unref() }
	wo    *pebble.WriteOptions // pebble.Sync, or pebble.NoSync with synchronous commit off
	disk  *vfs.ModelClock      // the disk model's clock; nil on the real disk

	// stripes[i] guards every key whose stripe(key) == i for the duration of
	// a writing transaction. Always acquired in increasing index order.
	stripes [lockStripes]sync.Mutex
}

func openPebble(dir string, o TargetOptions) (*pebbleTarget, error) {
	size := o.SharedBuffers
	if size <= 0 {
		size = 128 << 20
	}
	cache := pebble.NewCache(size)
	po := &pebble.Options{Cache: cache, Logger: quietLogger{}}
	var disk *vfs.ModelClock
	if !o.Disk.IsZero() {
		fs := newPebbleDiskFS(o.Disk)
		po.FS, disk = fs, fs.clock
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("bench: open pebble in %s: %w", dir, err)
	}
	wo := pebble.Sync
	if !o.SynchronousCommit {
		wo = pebble.NoSync
	}
	return &pebbleTarget{db: db, cache: cache, wo: wo, disk: disk}, nil
}

func (t *pebbleTarget) Name() string { return "pebble" }

func (t *pebbleTarget) Close() error {
	err := t.db.Close()
	t.cache.Unref()
	return err
}

func stripe(key []byte) int {
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % lockStripes)
}

// lock acquires the stripes of keys in increasing order (so two transactions
// can never wait on each other in a cycle) and returns the unlock function.
func (t *pebbleTarget) lock(keys ...[]byte) func() {
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, stripe(k))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		t.stripes[i].Lock()
	}
	return func() {
		for j := len(idx) - 1; j >= 0; j-- {
			t.stripes[idx[j]].Unlock()
		}
	}
}

func (t *pebbleTarget) scan(prefix string, fn func(k, v []byte) error) error {
	return scanPrefix(t.db, prefix, fn)
}

// scanPrefix calls fn for every key with the prefix in r (the database or a
// snapshot of it), in key order, stopping at fn's first error.
func scanPrefix(r pebble.Reader, prefix string, fn func(k, v []byte) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key(), v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

func (t *pebbleTarget) DetectScale(ctx context.Context) (int, error) {
	n := 0
	err := t.scan(prefixBranch, func(k, _ []byte) error {
		if isRowKey(prefixBranch, string(k)) {
			n++
		}
		return nil
	})
	return n, err
}

func (t *pebbleTarget) LoadBatch(ctx context.Context, rows []KV, durable bool) error {
	b := t.db.NewBatch()
	defer b.Close()
	for _, r := range rows {
		if err := b.Set(r.Key, r.Value, nil); err != nil {
			return err
		}
	}
	wo := pebble.NoSync
	if durable {
		wo = pebble.Sync
	}
	return b.Commit(wo)
}

func (t *pebbleTarget) FinishLoad(ctx context.Context) error { return t.db.Flush() }

func (t *pebbleTarget) Sums(ctx context.Context) (Sums, error) {
	var s Sums
	// One snapshot, so the four scans see the same state even if someone
	// wrote concurrently.
	snap := t.db.NewSnapshot()
	defer snap.Close()
	scan := func(prefix string, fn func(k, v []byte) error) error { return scanPrefix(snap, prefix, fn) }
	for _, p := range []struct {
		prefix string
		size   int
		dst    *int64
	}{
		{prefixAccount, accountValueSize, &s.Accounts},
		{prefixTeller, tellerValueSize, &s.Tellers},
		{prefixBranch, branchValueSize, &s.Branches},
	} {
		if err := scan(p.prefix, func(k, v []byte) error {
			b, err := decodeBalance(k, v, p.size)
			*p.dst += b
			return err
		}); err != nil {
			return s, err
		}
	}
	err := scan(prefixHistory, func(k, v []byte) error {
		h, err := decodeHistory(k, v)
		s.History += h.Delta
		s.HistoryRows++
		return err
	})
	return s, err
}

func (t *pebbleTarget) NewClient(ctx context.Context) (Client, error) {
	return &pebbleClient{t: t}, nil
}

// pebbleClient is one session on pebble.
type pebbleClient struct {
	t *pebbleTarget
}

func (c *pebbleClient) Close() error { return nil }

// get reads key through the indexed batch (so it sees the batch's own
// writes), checks the value's length and returns a copy: the slice pebble
// returns belongs to it once the closer is closed.
func get(b *pebble.Batch, key []byte, size int) ([]byte, error) {
	v, closer, err := b.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", errMissingRow, key)
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	if len(unescapeMark(v, size)) != size {
		return nil, fmt.Errorf("%w: key %q: value is %d bytes, want %d", ErrBadValue, key, len(v), size)
	}
	return slices.Clone(v), nil
}

func update(b *pebble.Batch, key []byte, size int, delta int64) (int64, error) {
	v, err := get(b, key, size)
	if err != nil {
		return 0, err
	}
	nv, bal, err := addBalance(key, v, size, delta)
	if err != nil {
		return 0, err
	}
	return bal, b.Set(key, nv, nil)
}

func (c *pebbleClient) TPCB(ctx context.Context, p *TxnParams, simple bool) error {
	ak, tk, bk := accountKey(p.AID), tellerKey(p.TID), branchKey(p.BID)
	var unlock func()
	if simple {
		unlock = c.t.lock(ak)
	} else {
		unlock = c.t.lock(ak, tk, bk)
	}
	defer unlock()
	b := c.t.db.NewIndexedBatch()
	defer b.Close()
	bal, err := update(b, ak, accountValueSize, p.Delta)
	if err != nil {
		return err
	}
	v, err := get(b, ak, accountValueSize)
	if err != nil {
		return err
	}
	if got, _ := decodeBalance(ak, v, accountValueSize); got != bal {
		return fmt.Errorf("%w: %q wrote %d, read %d", errReadMismatch, ak, bal, got)
	}
	if !simple {
		if _, err := update(b, tk, tellerValueSize, p.Delta); err != nil {
			return err
		}
		if _, err := update(b, bk, branchValueSize, p.Delta); err != nil {
			return err
		}
	}
	if err := b.Set(p.HistoryKey, p.historyValue(), nil); err != nil {
		return err
	}
	return b.Commit(c.t.wo)
}

func (c *pebbleClient) SelectOnly(ctx context.Context, aid int64) error {
	ak := accountKey(aid)
	v, closer, err := c.t.db.Get(ak)
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: %q", errMissingRow, ak)
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	_, err = decodeBalance(ak, v, accountValueSize)
	return err
}

// quietLogger drops pebble's informational messages (which would land in the
// middle of the report) and keeps its errors and fatal errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}
