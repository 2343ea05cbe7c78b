package engine

// Lock takes key's row lock without reading or writing the key, as
// PostgreSQL's SELECT ... FOR UPDATE takes a row lock: it is held until
// the transaction ends, and every other writer of key waits for it. Lock
// takes no snapshot. So a REPEATABLE READ transaction that locks every key
// it will write before its first read or write takes its snapshot after
// the locks were granted; every version of those keys committed before
// then is in the snapshot, no other transaction can commit one until this
// one ends, and its writes of them cannot fail with
// ErrSerializationFailure. Locking a key the transaction already holds
// does nothing. With early lock release on, the lock may come from a
// commit not yet durable: like a read, Lock then makes Commit (or
// WaitObserved) wait until it is.
//
// Errors: ErrReadOnly, ErrEmptyKey and ErrTooLarge leave the transaction
// usable, and so does the failure that stopped the database taking writes
// (see DB.Failure), returned before any lock is taken; ErrDeadlock,
// ErrLockTimeout, ErrClosed and the context's error abort it, as a failed
// write does, releasing its row locks before Lock returns (see Txn). After the transaction ended Lock returns ErrTxnDone, and
// after it was aborted an error wrapping the one that aborted it.
func (t *Txn) Lock(key []byte) error {
	if err := t.usable(); err != nil {
		return err
	}
	if t.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := t.db.writable(); err != nil {
		return err
	}
	if t.st == nil {
		t.st = newTxnState()
	}
	t.nest++
	defer t.leave()
	if err := t.db.rowLock(t.ctx, key, t.st); err != nil {
		t.fail(err)
		return err
	}
	// The lock may have been let go by an early-released commit not yet
	// durable: what the caller learns under the lock (that a key changed,
	// say) depends on it, as a read does.
	t.noteDependency()
	return nil
}
