package engine

import (
	"cmp"
	"fmt"
	"slices"
)

// deleteRangeBatch is the most keys DeleteRange orders by heap location
// at once: 16 MiB of entry pointers and heads. The larger the batch, the
// fewer times each heap page is read: a batch's keys lie all over the
// heap, so every batch reads about every page once.
var deleteRangeBatch = 1 << 20

// deleteRangeSnapshotTaken, if set (by tests), runs right after
// DeleteRange took its snapshot: before it takes any row lock, unless
// the range was locked before the snapshot (lockRange).
var deleteRangeSnapshotTaken func()

// DeleteRange deletes every key in [start, end) that has a version visible
// to the transaction (an empty or nil end: no upper bound; a nil start:
// from the first key), as PostgreSQL's DELETE FROM t WHERE k >= start AND
// k < end, and returns how many keys it deleted (0 and nil for an empty
// range, a non-empty end at or below start, as that WHERE clause). fn, if
// not nil, is called after each key's delete with the key and the value
// the delete removed (both belong to fn; fn runs outside the engine's locks and may read or
// write in this transaction, but keys it writes in the range may or may
// not be deleted).
//
// Which keys: one snapshot is taken for the whole call, as for Scan; a key
// visible to it is then deleted as Delete does, under its row lock: under
// READ COMMITTED the newest committed version is deleted even if it
// committed after the snapshot (a key another transaction deleted
// meanwhile is passed over), under REPEATABLE READ a key changed since
// the snapshot fails with ErrSerializationFailure. A key created after
// the snapshot is left alone; so at READ COMMITTED a key created after
// the snapshot stays while another key's version committed after it is
// deleted, which no serial order of the two gives. The row locks of a
// batch's keys (of every key in the index's range, visible or not) are
// taken in key order before any of them is deleted, as MSET and DEL take
// theirs, so that DeleteRange queues behind such writers instead of
// deadlocking with them; they are held to the end of the transaction, as
// for Delete, so a large range holds many.
//
// In a REPEATABLE READ transaction that has not taken its snapshot yet
// (it has read and written nothing), the row locks of every key in the
// range are taken first, in key order, and the snapshot after them, as a
// server's EXEC block takes its keys' locks before its first read: no key
// the snapshot sees can change before its delete, so the call deletes
// the range as it was at one moment. A key that appeared while those
// locks were taken is locked only by its delete, out of key order, if the
// snapshot sees it (it may then meet ErrDeadlock, or
// ErrSerializationFailure if it changed after the snapshot); one the
// snapshot does not see is neither locked nor deleted.
//
// Why not Scan and then Delete: the keys are visited in the order of the
// heap blocks holding their newest versions, a batch of up to about a
// million at a time, not in key order. In key order every key reads a
// random heap page, and once the heap outgrows shared_buffers most reads
// miss and most deletes dirty a page that is written out again before the
// next key on it comes (a FLUSHALL of 1.26 million keys spent most of its
// 11 seconds so); in block order each page is read and dirtied about once
// per batch. The price: fn sees keys out of key order.
//
// Errors: Delete's; such an error aborts the transaction, rolling back
// every delete it made, so the count returned with it is 0 (PostgreSQL's
// DELETE that fails reports no row count either); ErrReadOnly in a read-only transaction; with fn, ErrCorruption for a
// value that cannot be read (a chunk of it lost), which fails the call
// and aborts the transaction, as Update's read does (DeleteRangePrefix
// deletes such a key). A call fn makes in the transaction that aborts it
// ends DeleteRange after that call of fn, with an error wrapping the
// call's, whether or not fn passed the error on; an fn that ends the
// transaction (Commit, Rollback) ends it with ErrTxnDone and the count of
// the deletes made before, which that Commit kept or Rollback undid.
func (t *Txn) DeleteRange(start, end []byte, fn func(key, old []byte)) (int, error) {
	if fn == nil {
		return t.deleteRange(start, end, writeOp{read: readNone}, nil)
	}
	return t.deleteRange(start, end, writeOp{read: readAll}, func(key []byte, old oldValue) { fn(key, old.val) })
}

// DeleteRangePrefix is DeleteRange whose fn receives, for each key
// deleted, at most the first n bytes of the value the delete removed and
// the value's whole length, as UpdatePrefix's function does: of an
// out-of-line value only the chunks holding those bytes are read. A key
// whose first bytes cannot be read (a chunk of its value lost, or its
// pointer damaged) is deleted all the same, and counted; fn then gets a
// nil prefix, length 0 and unreadable, the ErrCorruption naming the
// chunk's file and offset. fn may be nil. A negative n gets a plain
// error, nothing deleted; errors otherwise as DeleteRange's.
func (t *Txn) DeleteRangePrefix(start, end []byte, n int, fn func(key, prefix []byte, length int, unreadable error)) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("mvkv: DeleteRangePrefix of %d bytes", n)
	}
	if fn == nil {
		return t.deleteRange(start, end, writeOp{read: readNone}, nil)
	}
	return t.deleteRange(start, end, writeOp{read: n, tolerate: true}, func(key []byte, old oldValue) {
		fn(key, old.val, old.length, old.unreadable)
	})
}

// deleteRange is DeleteRange and DeleteRangePrefix: op says how much of
// each value to read for fn (op.fn is nil: a delete).
func (t *Txn) deleteRange(start, end []byte, op writeOp, fn func(key []byte, old oldValue)) (n int, err error) {
	defer func() {
		// Runs after leave, which carried out the abort: none of the
		// deletes counted stands any more.
		if err != nil && t.err != nil {
			n = 0
		}
	}()
	if err := t.usable(); err != nil {
		return 0, err
	}
	if t.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	if len(end) > 0 && len(start) > 0 && string(start) >= string(end) {
		return 0, nil
	}
	// The Locks and deletes below, and fn's calls, are nested in this
	// one: an error among them aborts the transaction as it returns.
	t.nest++
	defer t.leave()
	db := t.db
	prelocked := t.opts.Isolation == RepeatableRead && t.snap == nil
	if prelocked {
		if err := t.lockRange(start, end); err != nil {
			return 0, err
		}
	}
	snap, release := t.snapshot()
	defer release()
	if deleteRangeSnapshotTaken != nil {
		deleteRangeSnapshotTaken()
	}
	r := db.vm.NewReader()
	var c ioCounts
	defer c.add(db)
	type target struct {
		e    *indexEntry
		head uint64
	}
	var batch []target
	from := start
	deleted := 0
	for {
		batch = batch[:0]
		n := deleteRangeBatch
		db.idx.ascendRange(from, end, func(e *indexEntry) bool {
			batch = append(batch, target{e: e, head: e.head.Load()})
			return len(batch) < n
		})
		if len(batch) == 0 {
			return deleted, nil
		}
		last := batch[len(batch)-1].e.key()
		// The row locks first, in key order, as MSET, DEL and the
		// server's EXEC blocks take theirs, so that a delete of many
		// keys queues behind them instead of closing a cycle with one;
		// then the deletes, in heap order. A key that turns out not to
		// be visible keeps its lock to the end, as a Lock would. Not
		// when lockRange took them before the snapshot: a key it did
		// not lock came after it, and is locked by its delete only if
		// the snapshot sees it. Locking it here, out of key order,
		// would wait for a writer that created it and may be waiting
		// for one of the range's locks, a deadlock.
		for i := 0; i < len(batch) && !prelocked; i++ {
			if err := t.Lock([]byte(batch[i].e.key())); err != nil {
				return deleted, err
			}
		}
		slices.SortFunc(batch, func(a, b target) int { return cmp.Compare(a.head, b.head) })
		for _, tg := range batch {
			// Visible to the snapshot? Checked under the close lock, as
			// visibleKeys does, one key at a time: the delete below takes
			// that lock itself and may wait for a row lock.
			me := t.XID()
			db.closeMu.RLock()
			var ok bool
			err := ErrClosed
			if !db.closed.Load() {
				ok, err = db.keyVisible(tg.e, snap, me, r, &c)
			}
			db.closeMu.RUnlock()
			if err != nil {
				// As a delete's error would: the deletes made so far
				// must not be committed as if the range were done.
				t.fail(err)
				return deleted, err
			}
			if !ok {
				continue
			}
			key := []byte(tg.e.key())
			var di deleteInfo
			op.di = &di
			if err := t.write(key, op); err != nil {
				return deleted, err
			}
			// Not done: another transaction deleted the key after the
			// snapshot, and its delete committed.
			if di.done {
				deleted++
				if fn != nil {
					fn(key, di.old)
					// A call fn made in t may have aborted it, even if
					// fn kept the error to itself: stop and say so.
					if err := t.abortedInCallback(); err != nil {
						return deleted, err
					}
				}
			}
		}
		if len(batch) < n {
			return deleted, nil
		}
		from = append([]byte(last), 0)
	}
}

// lockRange takes the row lock of every key in the index's [start, end),
// in key order. The index's walk calls back outside its lock, a leaf,
// so a lock wait here holds nothing of the index.
func (t *Txn) lockRange(start, end []byte) error {
	var err error
	t.db.idx.ascendRange(start, end, func(e *indexEntry) bool {
		err = t.Lock([]byte(e.key()))
		return err == nil
	})
	return err
}
