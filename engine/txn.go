package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"mvkv/clog"
	"mvkv/internal/clip"
	"mvkv/internal/heap"
	"mvkv/visibility"
	"mvkv/wal"
)

const statusCommitted = clog.StatusCommitted

// Txn is a transaction. A Txn is not safe for concurrent use by several
// goroutines; use one transaction per goroutine.
//
// Every Txn must end with Commit or Rollback. A transaction that is never
// ended keeps its row locks and keeps its xid in the running table, so other
// writers of its keys wait for it forever and its writes never become
// visible.
//
// After an error from Put, Delete, Update, Lock or DeleteRange other than
// those their docs say leave it usable (ErrTooLarge, ErrEmptyKey,
// ErrReadOnly, an error returned by the caller's own update function), the
// transaction is aborted, as in PostgreSQL: before the call returns the
// error, its writes are rolled back (its xid is marked aborted in the CLOG, so they are invisible to
// everyone), it leaves the running table and its row locks are released,
// so that the transactions waiting for them go on at once, without
// waiting for the caller's Rollback (PostgreSQL's AbortTransaction runs
// when the ERROR is raised; the transaction block then only waits for the
// client's ROLLBACK). A deadlock's victim thus frees the other
// transactions of the cycle as soon as it learns it is the victim. Every
// later call returns an error wrapping the first one; Rollback ends the
// transaction (returning nil, or the error the abort met, such as
// ErrClosed), and Commit rolls back and returns that first error. An error
// met in a call made by the caller's own function (Update's, Scan's,
// DeleteRange's) aborts the transaction when the outermost call returns,
// since that call still holds what it is working on; the outermost call
// stops there and returns an error wrapping it. A REPEATABLE READ
// snapshot is released with the locks, so that it no longer holds back
// vacuum; the dependency WaitObserved waits for is kept until the
// transaction ends. An error from Get or Scan that their own reading met
// (ErrCorruption for a damaged page or a lost chunk of a value) leaves
// the transaction usable, where PostgreSQL's ERROR would abort it, so
// that a caller who finds a damaged key can delete or overwrite it in the
// same transaction.
type Txn struct {
	db   *DB
	ctx  context.Context
	opts TxnOptions
	sync bool

	st   *txnState            // nil until the first write takes a row lock; its xid comes with the first version placed
	snap *visibility.Snapshot // the transaction snapshot (REPEATABLE READ), taken at the first statement
	done bool                 // Commit or Rollback was called
	// managed: the transaction belongs to DB.Update or DB.View, which
	// end it; Commit, CommitAsync and Rollback refuse (ErrTxnManaged).
	managed bool
	err     error // the error that aborted the transaction, if any
	// abortErr is what rolling back after err met (ErrClosed, a CLOG
	// failure), for Rollback to return.
	abortErr error
	// nest counts the calls of this Txn in progress: more than one while
	// the caller's function (Update's, Scan's) calls it again. The
	// outermost call carries out the abort an error asks for (leave).
	nest int
	// writes counts the calls of Put, Delete, Update and UpdatePrefix
	// begun, so that Update learns cheaply whether its function wrote.
	writes uint64
	// onAbort, if set, runs when the transaction rolls back, before its
	// row locks are released (OnAbort).
	onAbort func()
	// dep is the highest commit LSN the transaction may have observed
	// (a snapshot or a row lock): Commit returns only once the WAL is
	// durable up to it (elr.go).
	dep wal.LSN

	// newVersions counts the versions this transaction placed and
	// obsoleted those it marked with its xmax: the dead tuples it leaves
	// behind if it aborts, or commits, for autovacuum (autovacuum.go).
	newVersions, obsoleted int
}

// Begin starts a transaction. The context bounds its row-lock waits (a
// commit's wait for durability is not interruptible: it lasts one WAL
// flush), and its waits for a bulk load before a write and before its
// commit record (a Commit that gives up there writes no commit record and
// rolls the transaction back); reads do not look
// at it (a Scan stops when its function returns false, and a Commit after
// it ended rolls back a transaction that wrote); a nil ctx is
// context.Background(). It returns ErrClosed after Close, the context's
// error if it is already done (as database/sql's BeginTx), and a
// *SettingError (matching ErrInvalidSetting) for an isolation level or
// synchronous_commit that is not one of the constants.
func (db *DB) Begin(ctx context.Context, o TxnOptions) (*Txn, error) {
	if db.closed.Load() {
		return nil, ErrClosed
	}
	if o.Isolation != ReadCommitted && o.Isolation != RepeatableRead {
		return nil, &SettingError{Name: "transaction_isolation", Value: o.Isolation.String(), Want: "want the constant ReadCommitted or RepeatableRead"}
	}
	if o.SynchronousCommit != nil {
		if err := checkSynchronousCommit(*o.SynchronousCommit); err != nil {
			return nil, err
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sc := db.syncCommit.Load() == int32(SyncCommitOn)
	if o.SynchronousCommit != nil {
		sc = *o.SynchronousCommit == SyncCommitOn
	}
	return &Txn{db: db, ctx: ctx, opts: o, sync: sc}, nil
}

// XID returns the transaction's id, or 0 while it has written nothing and
// once it has rolled back (or an error aborted it). An
// xid is assigned when the transaction first places a version, as in
// PostgreSQL: a delete of a missing key, or an Update whose function
// returned an error, takes the key's row lock but no xid.
func (t *Txn) XID() uint64 {
	if t.st == nil {
		return 0
	}
	return t.st.xid.Load()
}

// hasXid reports whether the transaction has an xid, and so has changed
// the heap and must end with a commit or abort record.
func (t *Txn) hasXid() bool {
	return t.st != nil && t.st.xid.Load() != 0
}

func (t *Txn) usable() error {
	if t.done {
		return ErrTxnDone
	}
	if t.db.closed.Load() {
		return ErrClosed
	}
	if t.err != nil {
		return wrapf(t.err, "current transaction is aborted")
	}
	return nil
}

// snapshot returns the snapshot for the next statement: a fresh one under
// READ COMMITTED, the transaction's under REPEATABLE READ. Both are
// registered, so vacuum keeps every version they can see; the statement
// calls release when it is done (a no-op for the transaction's snapshot,
// which is released when the transaction ends).
func (t *Txn) snapshot() (snap *visibility.Snapshot, release func()) {
	if t.opts.Isolation == RepeatableRead {
		if t.snap == nil {
			t.snap = t.db.snaps.take(t.db.procs)
			t.noteDependency()
		}
		return t.snap, func() {}
	}
	snap = t.db.snaps.take(t.db.procs)
	// After the snapshot: every commit it sees raised visibleLSN
	// before it left the running table.
	t.noteDependency()
	return snap, func() { t.db.snaps.release(snap) }
}

// releaseSnapshot unregisters the transaction snapshot when the
// transaction ends.
func (t *Txn) releaseSnapshot() {
	if t.snap != nil {
		t.db.snaps.release(t.snap)
		t.snap = nil
	}
}

func checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > MaxKeySize {
		return fmt.Errorf("%w: key of %d bytes (max %d)", ErrTooLarge, len(key), MaxKeySize)
	}
	return nil
}

// Get returns the value of key visible to the transaction, or ErrNotFound.
// The returned slice belongs to the caller. An empty value (Put of a nil or
// empty slice) is returned as a nil slice with a nil error: a missing key
// is told by ErrNotFound, not by a nil value. Other errors: ErrEmptyKey,
// ErrTooLarge (a key over MaxKeySize), ErrTxnDone, ErrClosed, the error
// that aborted the transaction, ErrCorruption (naming the page), and,
// with early lock release, ErrWALSyncFailed when the read may have seen a
// commit a failed flush lost. Not safe for concurrent use with other
// calls on the same Txn (none of Txn's methods are).
func (t *Txn) Get(key []byte) ([]byte, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	t.db.closeMu.RLock()
	defer t.db.closeMu.RUnlock()
	if t.db.closed.Load() {
		return nil, ErrClosed
	}
	// The snapshot must be taken before the head is read: a writer moves
	// the head before it commits, so every version committed before the
	// snapshot is then reachable from the head read. Read the other way
	// round, a version committed in between would be missed, and its
	// predecessor's xmax would make the key look deleted. It is taken
	// before the index lookup too: vacuum may drop the entry of a key
	// deleted for everyone, and a writer then creates a new one; an entry
	// found after the snapshot is either current or dropped for a key
	// this snapshot sees deleted.
	snap, release := t.snapshot()
	defer release()
	e := t.db.idx.get(key)
	if e == nil {
		return nil, ErrNotFound
	}
	val, found, err := t.db.fetchVisible(e, snap, t.XID())
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	return val, nil
}

// GetPrefix returns at most the first n bytes of key's value and the
// value's whole length in bytes, as Get would see the value: of an
// out-of-line value (one stored in chunks, over about 2 KiB) it reads only
// the chunks that hold those bytes, so a caller that needs a value's
// header or length does not read the whole of a large value, as
// PostgreSQL's detoast_attr_slice fetches only the TOAST chunks of a
// slice. Errors are Get's, and a plain error for a negative n. Safe for
// use as Get is.
func (t *Txn) GetPrefix(key []byte, n int) (prefix []byte, length int, err error) {
	if n < 0 {
		return nil, 0, fmt.Errorf("mvkv: GetPrefix of %d bytes", n)
	}
	if err := t.usable(); err != nil {
		return nil, 0, err
	}
	if err := checkKey(key); err != nil {
		return nil, 0, err
	}
	t.db.closeMu.RLock()
	defer t.db.closeMu.RUnlock()
	if t.db.closed.Load() {
		return nil, 0, ErrClosed
	}
	// The snapshot before the index lookup, as Get.
	snap, release := t.snapshot()
	defer release()
	e := t.db.idx.get(key)
	if e == nil {
		return nil, 0, ErrNotFound
	}
	val, length, found, err := t.db.fetchVisiblePrefix(e, snap, t.XID(), n)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		return nil, 0, ErrNotFound
	}
	return val, length, nil
}

// PrefixEnd returns the smallest key above every key that begins with
// prefix, for the end of a scan: Scan(prefix, PrefixEnd(prefix), fn)
// visits exactly the keys that begin with prefix. It is prefix with its
// trailing 0xff bytes dropped and its last other byte incremented, in a
// new slice; nil (no upper bound) when prefix is empty or all 0xff bytes,
// since then no key is above every key that begins with it. It is the
// upper bound an ordered key-value store's prefix iteration takes
// (LevelDB's and pebble's users compute the same), and only reads prefix.
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			end := append([]byte(nil), prefix[:i+1]...)
			end[i]++
			return end
		}
	}
	return nil
}

// Scan calls fn for every key in [start, end) visible to the transaction, in
// key order, with its value; an empty or nil end means no upper
// bound (no key is empty, so an empty end could bound nothing). For the
// keys that begin with a prefix p, give p and PrefixEnd(p). fn returning
// false stops the scan. Under READ COMMITTED the whole scan uses one
// snapshot. The slices passed to fn belong to fn. fn may write in this
// transaction, but whether the scan then visits keys fn wrote ahead of its
// position is unspecified: the range's index entries are collected in
// batches as the scan goes, and mvkv has no command ids (PostgreSQL's way
// of hiding a statement's own later writes from it), so a key already in
// the index is seen with fn's new value and a new key may or may not be.
// A scan that stops early costs the keys it visited, not the whole range.
// A write of fn's that aborts the transaction (a deadlock, say) ends the
// scan after that call of fn, with an error wrapping the write's, whether
// or not fn passed the error on or asked to stop; an fn that ends the
// transaction (Commit, Rollback) ends the scan with ErrTxnDone.
// Errors: ErrNilFunction for a nil fn, and Get's other than ErrNotFound
// and those about the key.
func (t *Txn) Scan(start, end []byte, fn func(key, value []byte) bool) error {
	if fn == nil {
		return fmt.Errorf("%w given to Txn.Scan", ErrNilFunction)
	}
	return t.scan(start, end, -1, func(key, value []byte, _ int) bool { return fn(key, value) })
}

// ScanPrefix is Scan that hands fn, for each key, at most the first n
// bytes of its value and the value's whole length, as GetPrefix: of an
// out-of-line value it reads only the chunks holding those bytes. The
// prefix is of each value; for the keys that begin with a prefix, see
// PrefixEnd. Errors as Scan's, and a plain error for a negative n.
func (t *Txn) ScanPrefix(start, end []byte, n int, fn func(key, prefix []byte, length int) bool) error {
	if n < 0 {
		return fmt.Errorf("mvkv: ScanPrefix of %d bytes", n)
	}
	if fn == nil {
		return fmt.Errorf("%w given to Txn.ScanPrefix", ErrNilFunction)
	}
	return t.scan(start, end, n, fn)
}

// RandomKey returns a key visible to the transaction chosen at random, as
// Redis's RANDOMKEY chooses one, with at most the first n bytes of its
// value and the value's whole length (as GetPrefix); ErrNotFound when no
// key is visible. Each key in the index is about equally likely (a key
// stored after a run of empty hash slots a little likelier, as Redis's
// random bucket makes it); keys the transaction cannot see are passed
// over, and after 64 such picks the first visible key after the last one
// is taken. n must not be negative.
func (t *Txn) RandomKey(n int) (key, prefix []byte, length int, err error) {
	if n < 0 {
		return nil, nil, 0, fmt.Errorf("mvkv: RandomKey of %d bytes", n)
	}
	if err := t.usable(); err != nil {
		return nil, nil, 0, err
	}
	snap, release := t.snapshot()
	defer release()
	me := t.XID()
	db := t.db
	var last *indexEntry
	for range 64 {
		db.idx.mu.RLock()
		e := db.idx.table.random(rand.IntN)
		db.idx.mu.RUnlock()
		if e == nil {
			return nil, nil, 0, ErrNotFound
		}
		last = e
		db.closeMu.RLock()
		var val []byte
		var found bool
		err = ErrClosed
		if !db.closed.Load() {
			val, length, found, err = db.fetchVisiblePrefix(e, snap, me, n)
		}
		db.closeMu.RUnlock()
		if err != nil {
			return nil, nil, 0, err
		}
		if found {
			return []byte(e.key()), val, length, nil
		}
	}
	// Mostly keys this snapshot cannot see (deleted ones vacuum has not
	// removed yet): the first visible one from the last pick on,
	// wrapping around.
	from := []byte(last.key())
	take := func(k, v []byte, l int) bool {
		key, prefix, length = k, v, l
		return false
	}
	if err := t.scan(from, nil, n, take); err != nil || key != nil {
		return key, prefix, length, err
	}
	if err := t.scan(nil, from, n, take); err != nil || key != nil {
		return key, prefix, length, err
	}
	return nil, nil, 0, ErrNotFound
}

// scan is Scan (n < 0: whole values) and ScanPrefix.
func (t *Txn) scan(start, end []byte, n int, fn func(key, value []byte, length int) bool) error {
	if err := t.usable(); err != nil {
		return err
	}
	t.nest++ // fn may write in t
	defer t.leave()
	snap, release := t.snapshot()
	defer release()
	var err error
	t.db.idx.ascendRange(start, end, func(e *indexEntry) bool {
		// The close lock is not held across fn, which may write in this
		// transaction; its first write gives the transaction its xid, so
		// the xid whose versions count as our own is read for each key.
		me := t.XID()
		t.db.closeMu.RLock()
		var val []byte
		var length int
		var found bool
		err = ErrClosed
		if !t.db.closed.Load() {
			val, length, found, err = t.db.fetchVisiblePrefix(e, snap, me, n)
		}
		t.db.closeMu.RUnlock()
		if err != nil {
			return false
		}
		if !found {
			return true
		}
		more := fn([]byte(e.key()), val, length)
		// A call fn made in t may have aborted it: the scan ends
		// there, as the statement would in PostgreSQL, and says so,
		// also when fn swallowed that call's error and stopped.
		if err = t.abortedInCallback(); err != nil {
			return false
		}
		return more
	})
	return err
}

// abortedInCallback returns the "current transaction is aborted" error
// once an error met by a call the caller's function made in t (Update's,
// Scan's, ScanKeys', DeleteRange's) has aborted t, or nil: the outer call
// stops there and returns it, instead of calling the function on for more
// keys (or placing its version) and reporting success, whether or not the
// function passed the error on. A function that ended t (its Commit or
// Rollback) gets ErrTxnDone: its snapshot and row locks are gone with it,
// and the call must not read, write or delete on in an ended transaction.
func (t *Txn) abortedInCallback() error {
	if t.err != nil {
		return wrapf(t.err, "current transaction is aborted")
	}
	if t.done {
		return ErrTxnDone
	}
	return nil
}

// Put sets key to value, creating a new version (its row lock is held to
// the end of the transaction); a nil or empty value is an empty value, not
// a delete. The value is copied before Put returns. It reads none of the
// key's current value: the new version's tuple is written and the old one's
// xmax set, which needs none of an out-of-line value's chunks, so Put
// replaces a value that lost a chunk to a damaged page (vacuum frees what
// is left of the old one). Errors: ErrEmptyKey, ErrTooLarge (a key over
// MaxKeySize, a value over MaxValueSize), ErrReadOnly, ErrTxnDone,
// ErrClosed; ErrSerializationFailure under REPEATABLE READ when a
// transaction outside the snapshot changed the key; ErrDeadlock,
// ErrLockTimeout or the context's error while waiting for the row lock;
// ErrWALSyncFailed, ErrIOFailure or ErrWriteFailed on an I/O failure;
// ErrCorruption when the page of the key's newest version cannot be read.
// After any error but ErrEmptyKey, ErrTooLarge, ErrReadOnly and the ones
// the transaction already had, it is aborted: later calls fail with
// "current transaction is aborted" and only Rollback is left, as in
// PostgreSQL.
func (t *Txn) Put(key, value []byte) error {
	return t.write(key, writeOp{fn: func(oldValue) ([]byte, error) { return value, nil }, read: readNone, vlen: len(value)})
}

// Delete removes key. Deleting a key that does not exist is not an error.
// Like Put it reads none of the value, so it removes a key whose value
// lost a chunk. Errors as Put's.
func (t *Txn) Delete(key []byte) error {
	return t.write(key, writeOp{read: readNone})
}

// Update is a read-modify-write of one key: fn receives the current value
// (found=false if there is none) and returns the new value. old belongs to
// fn, which may change it, keep it, or return it as the new value. Under READ
// COMMITTED, fn sees the newest committed version even when it committed
// after the statement began, as PostgreSQL's UPDATE re-evaluates the newest
// row version (EvalPlanQual), so concurrent increments are never lost. Under
// REPEATABLE READ a version newer than the snapshot gives
// ErrSerializationFailure. An error from fn is returned as it is and leaves
// the transaction usable, unless a call fn made in t had aborted it (that
// call's error said so): then t stays aborted. If fn panics, nothing is written and the panic
// goes on up through Update; the transaction keeps key's row lock until it
// ends (DB.Update and DB.View roll back a transaction whose function
// panics). fn runs holding key's row lock (and no other lock
// of the database): it may read and write other keys, in t or in other
// transactions, subject to the usual row-lock waits and deadlock checks.
// If fn ends t itself (Commit or Rollback), Update places nothing and
// returns ErrTxnDone; if fn places a version of key itself in t (a Put,
// an Update), Update fails with ErrNestedWrite, which aborts t. A delete
// of key by fn places none and is kept: Update places its value after
// it, in the order the two ran.
// A current value that cannot be read (an out-of-line value with a chunk
// on a damaged page) fails Update with ErrCorruption, as Put's errors do,
// before fn runs; UpdatePrefix lets fn decide instead.
func (t *Txn) Update(key []byte, fn func(old []byte, found bool) ([]byte, error)) error {
	if fn == nil {
		return fmt.Errorf("%w given to Txn.Update", ErrNilFunction)
	}
	return t.write(key, writeOp{fn: func(o oldValue) ([]byte, error) { return fn(o.val, o.found) }, read: readAll})
}

// UpdatePrefix is Update for a function that needs at most the first n
// bytes of the current value (a header stored at its start): fn receives
// them (all of a shorter value) and the value's whole length in bytes,
// read as GetPrefix reads them, so of an out-of-line value only the chunks
// holding those bytes are read; found is false, with nil and 0, when
// there is no value. fn runs under key's row lock and returns the new
// value, or an error, as Update's does.
//
// When those bytes cannot be read, because a chunk holding them is lost
// (its page fails its checks, or zero_damaged_pages read it as empty) or
// the value's pointer is damaged, fn is called all the same, with found
// true, a nil prefix, length 0 and unreadable the ErrCorruption naming
// the file and offset of the chunk (of the version, for a damaged
// pointer): the key is there, its value is not. fn may
// then return a new value, or return an error and Delete the key, neither
// of which reads the old value's chunks; an error it returns (unreadable
// itself, say) leaves the transaction usable. A chunk lost past the first
// n bytes is not read at all. n must not be negative; errors otherwise as
// Update's. (Reading only the chunks of a prefix is PostgreSQL's
// toast_fetch_datum_slice, which substr() of a TOASTed value uses.)
func (t *Txn) UpdatePrefix(key []byte, n int, fn func(prefix []byte, length int, found bool, unreadable error) ([]byte, error)) error {
	if n < 0 {
		return fmt.Errorf("mvkv: UpdatePrefix of %d bytes", n)
	}
	if fn == nil {
		return fmt.Errorf("%w given to Txn.UpdatePrefix", ErrNilFunction)
	}
	return t.write(key, writeOp{fn: func(o oldValue) ([]byte, error) { return fn(o.val, o.length, o.found, o.unreadable) }, read: n, tolerate: true})
}

// How much of the current value a write reads (writeOp.read), besides a
// prefix length of zero or more.
const (
	readAll  = -1 // the whole value (Update)
	readNone = -2 // none of it (Put, Delete): not even the version's inline copy
)

// writeOp is what a write does with a key: Put, Delete, Update and
// UpdatePrefix, and DeleteRange's deletes.
type writeOp struct {
	// fn computes the new value from the current one; nil deletes.
	fn func(oldValue) ([]byte, error)
	// read is how much of the current value fn (or di) needs: readAll,
	// readNone, or a prefix length.
	read int
	// tolerate: a current value whose bytes cannot be read
	// (ErrCorruption) is handed on as oldValue.unreadable, not failed.
	tolerate bool
	// vlen is the new value's length when known before the row lock
	// (Put), for an early ErrTooLarge.
	vlen int
	// di, if not nil, learns what a delete did (DeleteRange's).
	di *deleteInfo
}

// oldValue is what a write learns of the key's current value.
type oldValue struct {
	val        []byte // the value, or as much of it as writeOp.read asked
	length     int    // the whole value's length in bytes
	found      bool   // the key has a live version
	unreadable error  // with writeOp.tolerate: why val could not be read
}

// callUnlocked runs a caller's Update function with closeMu's read side,
// which the caller holds, let go for the call. The read side is taken
// again in a defer, so that a panic in fn leaves closeMu as the caller's
// own deferred unlock expects it: the panic goes on up with the row lock
// still held, for the transaction's Rollback to release.
func (db *DB) callUnlocked(fn func(oldValue) ([]byte, error), old oldValue) ([]byte, error) {
	db.closeMu.RUnlock()
	defer db.closeMu.RLock()
	return fn(old)
}

type userError struct{ err error }

func (u userError) Error() string { return u.err.Error() }
func (u userError) Unwrap() error { return u.err }

// write is the path of Put, Delete, Update, UpdatePrefix and
// DeleteRange's deletes.
func (t *Txn) write(key []byte, op writeOp) error {
	if err := t.usable(); err != nil {
		return err
	}
	if t.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if op.vlen > MaxValueSize {
		return fmt.Errorf("%w: value of %d bytes (max %d)", ErrTooLarge, op.vlen, MaxValueSize)
	}
	t.nest++
	t.writes++
	defer t.leave()
	err := t.writeLocked(key, op)
	if err == nil {
		return nil
	}
	// Declared here, not above: errors.As makes it escape, and so
	// allocate, where it is declared, which every write would pay for.
	var ue userError
	switch {
	case errors.As(err, &ue):
		return ue.err
	case errors.Is(err, ErrTooLarge):
	default:
		t.fail(err)
	}
	return err
}

// fail records err as the error that aborted the transaction, unless an
// earlier one did. The abort itself is carried out by the outermost call
// of the Txn in progress, as it returns (leave).
func (t *Txn) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// leave ends a call counted in nest. When the outermost call returns and
// an error aborted the transaction, the abort is carried out now rather
// than at the caller's Rollback: the writes are rolled back (the CLOG
// first, so they are invisible before anyone can overwrite them), the
// transaction leaves the running table, and its row locks are released,
// waking their waiters, as PostgreSQL's AbortTransaction at the ERROR.
// A call nested in the caller's function must not do it: the outer call
// (an Update between its row lock and its version) still relies on its
// lock. The Txn stays not ended (done false), for Rollback or Commit.
func (t *Txn) leave() {
	t.nest--
	if t.nest == 0 && t.err != nil && !t.done {
		if err := t.discard(); err != nil && t.abortErr == nil {
			t.abortErr = err
		}
		// Every later call fails before it would read with the
		// snapshot, so it no longer holds vacuum's horizon back (an
		// aborted PostgreSQL backend's xmin is cleared at the ERROR too).
		t.releaseSnapshot()
	}
}

// discard rolls back what the transaction holds, if anything, and runs
// onAbort: an aborted xid (abort), or the bare row locks of a
// transaction that placed no version. It leaves the Txn holding nothing,
// so a second call does nothing. It returns abort's error.
func (t *Txn) discard() error {
	st, fn := t.st, t.onAbort
	t.st, t.onAbort = nil, nil
	if st == nil || st.xid.Load() == 0 {
		if st != nil {
			// Deferred, as in abort: fn is the caller's code and may
			// panic, and the locks must go all the same.
			defer t.db.releaseLocks(st)
		}
		if fn != nil {
			fn()
		}
		return nil
	}
	t.db.av.noteEnd(false, t.newVersions, t.obsoleted)
	return t.db.abort(st, fn)
}

// OnAbort has fn run once if the transaction rolls back: by Rollback, by
// a Commit that rolls back, or by an error that aborts it (see Txn). fn
// runs on the goroutine of the call that rolls back, after the
// transaction's writes are rolled back and before its row locks are
// released, so that it can undo, still under those locks, what the caller
// did beside the writes (the server puts back the WATCH counters it
// bumped), as a callback PostgreSQL's RegisterXactCallback registers runs
// at XACT_EVENT_ABORT, before AbortTransaction releases the locks. fn is
// not run when the transaction commits. It must not call the Txn or the
// DB: database locks are held. If fn panics, the panic goes on up through
// the call that rolled back, the rollback done and the row locks released
// all the same. A later OnAbort replaces fn, and a nil fn removes it.
// Like the Txn, OnAbort is not safe for concurrent use.
func (t *Txn) OnAbort(fn func()) { t.onAbort = fn }

// deleteInfo is what a delete tells DeleteRange: whether it deleted a
// version, and, unless the op read nothing, the value of that version (as
// much of it as the op read), read under the row lock before the delete.
type deleteInfo struct {
	done bool
	old  oldValue
}

func (t *Txn) writeLocked(key []byte, op writeOp) error {
	db := t.db
	if err := db.writable(); err != nil {
		return err
	}
	// The row lock needs an owner, not an xid. The xid is assigned only
	// when a version is about to be placed (xid below), so that a write
	// that places nothing (a delete of a missing key, an Update whose
	// function fails) leaves no xid to commit and the transaction commits
	// as a read-only one: no commit record, and no wait for a WAL flush
	// unless earlier records are not durable yet (flushBeforeNoXidAck). The
	// xid is not needed before: no tuple carries it yet, the row lock and
	// the waits-for graph go by txnState, and the snapshot checks below
	// are made against other transactions' xids. PostgreSQL likewise
	// assigns an xid at the first tuple it changes, not at a DELETE that
	// matches no row.
	if t.st == nil {
		t.st = newTxnState()
	}
	me := t.st.xid.Load()
	if err := db.rowLock(t.ctx, key, t.st); err != nil {
		return err
	}
	// The key's newest version, read below under the lock, may be an
	// early-released commit whose holder this transaction waited for, or
	// one that released the lock before: either raised visibleLSN first.
	t.noteDependency()
	// From here on no other transaction can add a version of key until
	// this one ends. The closeMu read lock keeps Close from tearing down
	// the WAL and buffer pool under us; it is not held across the wait for
	// a running bulk load, but a load that begins right after this check
	// holds ckptInterlock, which placeTuple then waits for with closeMu
	// held (so Close ends bulk loads before it takes closeMu).
	if err := db.waitBulkLoad(t.ctx); err != nil {
		return err
	}
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		return ErrClosed
	}
	if db.testWriteStep != nil {
		db.testWriteStep("lookup")
	}
	e := db.idx.getOrCreate(key)
	defer func() {
		if e.headTID().Valid() {
			return
		}
		// No version landed (a delete of a missing key, or a first write
		// that failed): drop the entry now rather than leave it to
		// vacuum, which a workload of such deletes never starts. The row
		// lock, still held, keeps every writer of the key out.
		if !t.done {
			db.idx.removeEntry(e)
			return
		}
		// Unless Update's function ended t (its Commit or Rollback),
		// which released the lock: another writer may hold it now and
		// have taken e, to place its version on it, which would then be
		// committed on an entry no longer in the index, and the key read
		// as missing. Dropped only if no one holds the lock, and e is
		// still without a version, checked while no one can take it.
		db.locks.ifUnlocked(key, func() {
			if !e.headTID().Valid() {
				db.idx.removeEntry(e)
			}
		})
	}()
	fn, del, di := op.fn, op.fn == nil, op.di
	// Put needs nothing of the current version but its place; Update
	// copies its inline value (or pointer) on the way.
	cur, found, deleted, err := db.latest(e, me, !del && op.read != readNone)
	if err != nil {
		return err
	}
	if found && t.opts.Isolation == RepeatableRead {
		last := cur.hdr.Xmin
		if deleted {
			last = cur.hdr.Xmax
		}
		// The version's hints, Frozen first, answer before the CLOG:
		// a frozen version's xmin may lie below the CLOG's truncation
		// point.
		committed := func(uint64) (bool, error) { return db.xminCommitted(&cur) }
		if deleted {
			committed = func(uint64) (bool, error) { return db.xmaxCommitted(&cur) }
		}
		snap, release := t.snapshot()
		ok, err := snap.XidVisible(last, me, committed)
		release()
		if errors.Is(err, errVanished) {
			// Its status left the CLOG and the version the page (a
			// vacuum ran meanwhile): too rare to chase; the client
			// retries.
			err, ok = nil, false
		}
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w (key %q changed by transaction %d)", ErrSerializationFailure, truncKey(key), last)
		}
	}
	live := found && !deleted
	// xid assigns the transaction's xid if it has none yet, right before
	// a version is placed. The row lock, held, keeps every other writer
	// of key out meanwhile; a snapshot taken before the assignment sees
	// the xid as in the future, so as in progress.
	xid := func() (uint64, error) {
		if me == 0 {
			x, err := db.procs.assign(t.st)
			if err != nil {
				return 0, db.fail(err)
			}
			me = x
		}
		return me, nil
	}
	if del {
		if !live {
			return nil
		}
		if di != nil && op.read != readNone {
			if di.old, err = db.oldValue(cur, e.key(), op); err != nil {
				return err
			}
		}
		x, err := xid()
		if err != nil {
			return err
		}
		_, err = db.placeTuple(x, cur.tid, nil, nil)
		if err == nil {
			t.obsoleted++
			if di != nil {
				di.done = true
			}
		}
		return err
	}
	var old oldValue
	if live && op.read != readNone {
		if old, err = db.oldValue(cur, e.key(), op); err != nil {
			return err
		}
	}
	old.found = live
	// fn is the caller's code, which may read or write other keys and
	// wait for their row locks: it runs without closeMu, never held
	// across a lock wait (a Close waiting for the write side would stop
	// the commit fn waits for from taking the read side). The row lock,
	// still held, keeps cur the key's newest version meanwhile.
	headBefore, writesBefore := e.head.Load(), t.writes
	val, err := db.callUnlocked(fn, old)
	if err != nil {
		return userError{err}
	}
	if err := t.abortedInCallback(); err != nil {
		// A call fn made in t failed, and fn went on, or fn ended t:
		// nothing more is placed (a version placed after t ended would
		// belong to an ended transaction).
		return err
	}
	if t.writes != writesBefore {
		// fn wrote in t, perhaps key itself (the row lock is t's own,
		// so it was not stopped). Only t moves the head while it holds
		// the row lock (vacuum takes it too), so a head moved, or an
		// entry with a head in place of e, is a version fn placed: one
		// placed now on cur would hide it, unreachable. Fail, aborting
		// t. A delete of key by fn placed no version: of a live key it
		// set the xmax this version sets anyway; of a key with no
		// version it dropped e from the index (its own write's
		// cleanup), and this version goes on a new entry, as it goes
		// after a deleted version vacuum has yet to remove.
		now := db.idx.get(key)
		if e.head.Load() != headBefore || (now != e && now != nil && now.headTID().Valid()) {
			return fmt.Errorf("%w: the function of an Update of %q wrote that key in the same transaction", ErrNestedWrite, truncKey(key))
		}
		if now != e {
			e = db.idx.getOrCreate(key)
		}
	}
	// A write fn made in t may have given the transaction its xid:
	// this version must carry the same one, or a second xid would be
	// assigned to t.st, the first left in the running table for ever
	// and the versions carrying it never committed.
	me = t.st.xid.Load()
	if db.closed.Load() {
		return ErrClosed
	}
	if len(val) > MaxValueSize {
		return fmt.Errorf("%w: value of %d bytes (max %d)", ErrTooLarge, len(val), MaxValueSize)
	}
	// The new version links to the newest committed version, or past a
	// version this transaction made itself to what that one links to, so
	// that the reachable chain below the head holds committed versions
	// only (chain.go).
	prev := heap.InvalidTID
	if found {
		prev = cur.tid
		if me != 0 && cur.hdr.Xmin == me {
			prev = cur.hdr.Prev
		}
	}
	x, err := xid()
	if err != nil {
		return err
	}
	scratch := getScratch()
	tup, err := db.buildTuple((*scratch)[:0], x, prev, key, val)
	if err != nil {
		return err
	}
	oldTID := heap.InvalidTID
	if live {
		oldTID = cur.tid
	}
	if db.testWriteStep != nil {
		db.testWriteStep("place")
	}
	_, err = db.placeTuple(me, oldTID, tup, e)
	putScratch(scratch, tup) // the page and the WAL have copied it
	if err != nil {
		return err
	}
	t.newVersions++
	if live {
		t.obsoleted++
	}
	return nil
}

// oldValue reads what op needs of cur, the key's newest version (live,
// and kept by the row lock the caller holds). With op.tolerate, a value
// whose bytes cannot be read (ErrCorruption from its chunks or its
// pointer) is returned as unreadable rather than failing the write: the
// version's own tuple was read, so the key is there, and neither a new
// version nor a delete needs the old chunks.
func (db *DB) oldValue(cur version, key string, op writeOp) (oldValue, error) {
	if !cur.have {
		v, err := db.readVersion(cur.tid, key, true)
		if err != nil {
			return oldValue{}, err
		}
		cur = v
	}
	val, length, err := db.valuePrefix(cur, key, op.read)
	if err != nil {
		if op.tolerate && errors.Is(err, ErrCorruption) {
			return oldValue{found: true, unreadable: err}, nil
		}
		return oldValue{}, err
	}
	return oldValue{val: val, length: length, found: true}, nil
}

// truncKey cuts a key quoted in an error message to its first 64 bytes.
func truncKey(k []byte) []byte { return clip.Prefix(k, 64) }

// Commit makes the transaction's writes durable and visible, in an order
// that reports no success a crash can undo: a synchronous commit returns
// only once its commit record is durable, and no transaction that saw or
// overwrote it returns before then. With early
// lock release off (PostgreSQL's order): the commit record is inserted into the WAL; with synchronous
// commit Commit waits until the WAL is durable past it (sharing one fsync
// with concurrent committers); then the CLOG marks the xid committed; then
// the xid leaves the running table; then the row locks are released. With
// early lock release on (Options.EarlyLockRelease), a synchronous commit
// marks the CLOG, leaves the running table and releases its row locks
// right after inserting the record, and waits for the flush last; either
// way Commit returns nil only once the record is durable. A transaction
// that placed no version (read-only, or whose writes changed nothing, such
// as deletes of missing keys) writes no commit record; it releases its row
// locks and, when synchronous, waits for a flush only if the WAL holds
// records not yet durable (asynchronous commits before it).
//
// Whatever it wrote, every transaction, read-only or not, synchronous or
// not, waits before Commit returns nil until the WAL is durable past every
// early-released commit it may have seen (in a snapshot) or overwritten
// (under a row lock): a value read in a transaction is promised durable
// once Commit has returned nil. The wait costs nothing when the WAL is
// already flushed there, which it always is with early lock release off.
// If that flush fails, Commit returns ErrWALSyncFailed.
//
// Commit returns ErrTxnManaged inside DB.Update or DB.View, whose
// transaction they end themselves, ErrTxnDone if the transaction already
// ended, ErrClosed if the database was closed while it was open (whatever
// it wrote or read; what it wrote never commits), the error that
// aborted it (after rolling back), ErrWALSyncFailed if the WAL could not be
// made durable, ErrIOFailure or ErrCorruption if the CLOG could not record
// the commit (in these cases the commit record may already be durable: the
// outcome is decided by recovery at the next Open; but when the WAL
// refused the commit record itself, having failed a write or sync since
// the transaction began, the transaction is rolled back, as an abort
// does, its row locks released, and the error is that failure), or the
// context's error if the context had ended before Commit of a transaction
// that placed a
// version (it is then rolled back; one that placed none, a read-only one
// say, has nothing to roll back, and its Commit goes on as if the context
// had not ended).
func (t *Txn) Commit() error {
	if t.managed {
		return ErrTxnManaged
	}
	st, err := t.end()
	if st == nil {
		if err != nil {
			return err
		}
		return t.db.waitDurable(t.dep)
	}
	return t.db.commit(st, t.sync, t.dep)
}

// end marks the transaction ended for Commit and CommitAsync. It returns
// the state whose commit record must be written, or nil (with the error to
// return, if any) when there is nothing to commit: a transaction that
// placed no version (its row locks are released here), one already ended,
// one aborted by an earlier error (rolled back here), or one whose context
// had ended (rolled back).
func (t *Txn) end() (*txnState, error) {
	if t.done {
		return nil, ErrTxnDone
	}
	if t.err != nil {
		err := t.err
		t.Rollback()
		return nil, wrapf(err, "transaction rolled back")
	}
	t.done = true
	t.releaseSnapshot()
	if t.st == nil || !t.hasXid() {
		// Row locks only, or not even those: nothing to make durable or
		// visible, so nothing to write, whether the context ended or
		// not.
		locked := t.st != nil
		if locked {
			t.db.releaseLocks(t.st)
			t.st = nil
		}
		if t.db.closed.Load() {
			// As Close promises every transaction still open: what it
			// read is durable (Close flushed the WAL), but the
			// database it read from is gone.
			return nil, ErrClosed
		}
		if locked && t.sync {
			return nil, t.db.flushBeforeNoXidAck()
		}
		return nil, nil
	}
	// A database that stopped taking writes (a failed write or fsync of
	// a data file, or damage found) commits nothing more: PostgreSQL
	// stops at such a failure (a PANIC), and the transactions running
	// then with it. Their writes are rolled back, as a context that
	// ended before Commit abandons the transaction.
	err := t.db.writable()
	if err == nil {
		err = t.ctx.Err()
	}
	if err == nil {
		// A running bulk load holds off every commit record; the wait
		// ends with the context, before anything of the commit is
		// written, and the transaction is rolled back as for a context
		// that ended before Commit. (In practice the wait is short: a
		// load fails with ErrBulkLoadNotEmpty as soon as it finds the
		// versions this transaction placed.)
		if err = t.db.waitBulkLoad(t.ctx); err != nil && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("mvkv: commit: %w while waiting for a bulk load to end; the transaction was rolled back", err)
		}
	}
	if err != nil {
		t.discard()
		return nil, err
	}
	if t.st != nil {
		// Counted when the commit starts (a commit that then fails
		// stops the database taking writes anyway).
		t.db.av.noteEnd(true, t.newVersions, t.obsoleted)
	}
	return t.st, nil
}

// flushBeforeNoXidAck makes the WAL durable up to its insert position, if
// it is not already, before a synchronous commit of a transaction that
// placed nothing is acknowledged. Such a transaction writes no record, but
// what it did may rest on asynchronous commits before it (a delete that
// found a key missing because one of them deleted it), and an acknowledged
// synchronous commit must leave every commit before it durable, as a
// synchronous commit with a record does by flushing past it (the crash
// ladder checks this prefix). When every commit is synchronous the WAL is
// durable already and this costs two loads.
func (db *DB) flushBeforeNoXidAck() error {
	if lsn := db.wal.InsertLSN(); db.wal.FlushedLSN() < lsn {
		return db.flushWAL(uint64(lsn))
	}
	return nil
}

// Rollback ends the transaction and discards its writes. After an error
// that aborted the transaction, whose writes and row locks are gone
// already (see Txn), it only ends it, and returns nil or the error that
// rolling back met then. It returns ErrClosed if the database was closed
// before the writes could be rolled back (recovery at the next Open finds
// them aborted), ErrIOFailure or ErrCorruption if the CLOG could not
// record the abort, ErrTxnDone if the transaction already ended, and
// ErrTxnManaged, doing nothing, inside DB.Update or DB.View (return an
// error from the function instead).
func (t *Txn) Rollback() error {
	if t.managed {
		return ErrTxnManaged
	}
	if t.done {
		return ErrTxnDone
	}
	t.done = true
	t.releaseSnapshot()
	err := t.discard()
	if err == nil {
		err = t.abortErr
	}
	t.abortErr = nil
	return err
}

// timestampPayload is the payload of a commit or abort record: the time in
// microseconds since the Unix epoch, little-endian, in b. A payload
// escapes (the WAL's checksum code keeps the compiler from proving
// otherwise), so a caller passes an array it already has on the heap
// rather than have one allocated per record; wal.Writer.Insert copies it.
func timestampPayload(b *[8]byte) []byte {
	binary.LittleEndian.PutUint64(b[:], uint64(time.Now().UnixMicro()))
	return b[:]
}

// commit writes st's commit record and completes the commit, in the order
// that early lock release selects (rule 2), then waits for the WAL to be
// durable past dep, the highest commit the transaction may have observed.
func (db *DB) commit(st *txnState, sync bool, dep wal.LSN) error {
	end, err := db.insertCommit(st)
	if err != nil {
		return err
	}
	if sync && db.elr.Load() {
		if err := db.publishEarly(st, end); err != nil {
			return err
		}
		// dep was read before the record was inserted, so it lies at
		// or below end: one flush makes both durable.
		err = db.wal.Flush(max(end, dep))
		db.committingEarly.Add(-1)
		db.closeMu.RUnlock()
		if err != nil {
			// Visible already, and perhaps seen: every transaction
			// that depends on it now fails its own wait the same way,
			// and the database takes no more writes.
			return db.fail(err)
		}
		return nil
	}
	if err := db.completeCommit(st, end, sync, !sync); err != nil {
		return err
	}
	return db.waitDurable(dep)
}

// insertCommit appends st's commit record. On success it returns with
// closeMu and ckptInterlock held shared, and completeCommit must follow
// (possibly on another goroutine) to release them. The checkpoint interlock
// is PostgreSQL's DELAY_CHKPT_START: between inserting the commit record
// and setting the CLOG, a checkpoint must not choose its redo point, or it
// could write a CLOG page without this commit while redo starts after the
// commit record.
func (db *DB) insertCommit(st *txnState) (wal.LSN, error) {
	// Txn.end waited for a bulk load with the transaction's context; one
	// that began since then fails at once (ErrBulkLoadNotEmpty: this
	// transaction placed versions), so this wait is short.
	if err := db.waitBulkLoad(context.Background()); err != nil {
		return 0, err
	}
	db.closeMu.RLock()
	if db.closed.Load() {
		db.closeMu.RUnlock()
		return 0, ErrClosed
	}
	db.ckptInterlock.RLock()
	_, end, err := db.wal.Insert(recCommit, st.xid.Load(), timestampPayload(&st.stamp))
	if err != nil {
		// Nothing was inserted: the WAL refuses every insert after a
		// write or sync of it failed (the background WAL writer's, say,
		// before anything told the database), so this transaction can
		// never commit, and recovery will find no commit record of it.
		// It ends now as an abort does, less the abort record the WAL
		// refuses (a lost abort record means the same as none): aborted
		// in the CLOG, out of the running table, its row locks
		// released. Left running, it would hold its row locks and the
		// vacuum horizon until Close, and read as in progress.
		err = db.fail(err)
		cerr := db.clog.SetStatus(st.xid.Load(), clog.StatusAborted, 0)
		db.ckptInterlock.RUnlock()
		db.closeMu.RUnlock()
		db.finish(st)
		db.stats.aborts.Add(1)
		if cerr != nil {
			db.fail(cerr) // the first failure is the one reported
		}
		return 0, err
	}
	return end, nil
}

// completeCommit is the rest of a commit whose record ends at end, in the
// order of rule 2 with early lock release off (and for asynchronous
// commits): the flush (with sync), the CLOG, the running table, the row
// locks. It releases the locks insertCommit left held.
//
// sync flushes the WAL to end first; async says the commit is
// asynchronous (synchronous_commit off), not one flushed already.
func (db *DB) completeCommit(st *txnState, end wal.LSN, sync, async bool) error {
	var err error
	if sync {
		err = db.wal.Flush(end)
	} else if async {
		// An asynchronous commit completing after a failure stopped
		// writes (its CommitAsync queued behind a commit whose flush
		// failed) stays invisible too: its record lies in a WAL that may
		// never write it, and PostgreSQL commits nothing after a failed
		// WAL write (a PANIC).
		err = db.writable()
	}
	if err != nil {
		db.ckptInterlock.RUnlock()
		db.closeMu.RUnlock()
		// The commit record may or may not be durable: the transaction
		// stays in the running table, invisible, until recovery decides.
		return db.fail(err)
	}
	err = db.clog.SetStatus(st.xid.Load(), clog.StatusCommitted, uint64(end))
	db.ckptInterlock.RUnlock()
	db.closeMu.RUnlock()
	if err != nil {
		return db.fail(err)
	}
	db.finish(st)
	db.stats.commits.Add(1) // after: see TxnStats.Commits
	return nil
}

// abort rolls back st, which has an xid, in rule 2's order: the abort
// record (not flushed: a lost abort record means the same as none), the
// CLOG, the running table, then before (if not nil), then the row locks.
// After Close, or when Close interrupts its wait for a bulk load, it
// returns ErrClosed having changed nothing but running before: recovery
// finds the xid without a commit record.
func (db *DB) abort(st *txnState, before func()) error {
	if err := db.waitBulkLoad(context.Background()); err != nil {
		if before != nil {
			before()
		}
		return err
	}
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed.Load() {
		if before != nil {
			before()
		}
		return ErrClosed
	}
	db.stats.aborts.Add(1)
	var end wal.LSN
	var err error
	db.ckptInterlock.RLock()
	if db.writable() == nil {
		// Not flushed: a lost abort record means the same as no record.
		_, end, err = db.wal.Insert(recAbort, st.xid.Load(), timestampPayload(&st.stamp))
	}
	if err == nil {
		err = db.clog.SetStatus(st.xid.Load(), clog.StatusAborted, uint64(end))
	}
	db.ckptInterlock.RUnlock()
	db.procs.remove(st)
	if err != nil {
		err = db.fail(err)
	}
	// before is the caller's code (OnAbort's function) and may panic:
	// the row locks are released in a defer, or every later writer of
	// those keys would wait for them for ever (the xid has left the
	// running table, so nothing else would ever release them).
	defer db.releaseLocks(st)
	if before != nil {
		before()
	}
	return err
}

// finish takes a transaction out of the running table and releases its row
// locks, waking the transactions waiting for it.
func (db *DB) finish(st *txnState) {
	db.procs.remove(st)
	db.releaseLocks(st)
}

// releaseLocks releases st's row locks and wakes the first transaction
// waiting for each. On its own it ends a transaction that has no xid.
func (db *DB) releaseLocks(st *txnState) {
	db.locks.releaseAll(st)
}

// Update runs fn in a REPEATABLE READ transaction and commits it. When fn or
// the commit fails with ErrSerializationFailure or ErrDeadlock, the
// transaction is rolled back and fn runs again, up to Options.MaxRetries
// times in all, after a pause that starts at 10 to 20 µs and doubles with
// each rerun up to 2 to 4 ms, drawn at random within those bounds so that
// the transactions that lost a race to the same winner do not meet again
// at once (with 4 goroutines updating the same two keys, measured here,
// this cut the failed runs per commit from 0.7 to 2.4 to 0.02 to 0.06,
// the commit rate unchanged within the noise). If ctx ends during
// that pause, Update returns an error wrapping both ctx's error and the
// last failure (errors.Is matches either); after Close, ErrClosed. If ctx
// ends while fn runs, a row-lock wait of fn's fails with ctx's error, and
// so does the commit of a transaction that wrote (Txn.Commit): Update then
// rolls back and returns that error, having committed nothing. fn may
// therefore run more than once: it must not have
// effects outside the transaction. A serialization failure tells that
// another transaction changed a key fn wrote; with early lock release
// that commit may not be durable yet, so when Update runs out of reruns
// (or ctx ends) it returns the failure only once the WAL is durable past
// every commit the last run may have observed, as Commit waits (or
// ErrWALSyncFailed if that flush fails). Any other error from fn rolls back and is
// returned. If fn panics, the transaction is rolled back (its row locks
// released) and the panic continues. fn must not itself write, in another
// transaction, a key it has written in t: the inner transaction would wait
// for t's row lock while t waits for fn, which no deadlock check sees (it
// is one goroutine); only ctx's deadline or cancellation ends that wait.
func (db *DB) Update(ctx context.Context, fn func(*Txn) error) error {
	return db.run(ctx, TxnOptions{Isolation: RepeatableRead}, fn)
}

// View runs fn in a read-only REPEATABLE READ transaction, retrying (and
// pausing between runs) as Update does. It returns, whether with nil or with fn's error, only once
// every commit fn's snapshot could see is durable (see Txn.Commit), so what
// fn read survives a crash; if that flush fails it returns
// ErrWALSyncFailed instead of fn's error. If fn panics, the transaction
// ends and the panic continues.
func (db *DB) View(ctx context.Context, fn func(*Txn) error) error {
	return db.run(ctx, TxnOptions{Isolation: RepeatableRead, ReadOnly: true}, fn)
}

// callFn calls fn(t) and rolls t back if fn panics (or calls
// runtime.Goexit) before the panic goes on up: a transaction left open
// would keep its xid in the running table, holding back the horizon, and
// its row locks, on which the next writer of those keys would wait for
// ever.
func callFn(t *Txn, fn func(*Txn) error) error {
	returned := false
	defer func() {
		t.managed = false
		if !returned && !t.done {
			t.Rollback()
		}
	}()
	t.managed = true
	err := fn(t)
	returned = true
	return err
}

func (db *DB) run(ctx context.Context, o TxnOptions, fn func(*Txn) error) error {
	if fn == nil {
		return fmt.Errorf("%w given to DB.Update or DB.View", ErrNilFunction)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var err error
	var dep wal.LSN // of the last run that failed retryably
	// held returns e, which tells of the last run's serialization
	// failure, once the WAL is durable past what that run observed: the
	// failure says that another transaction changed a key it wrote, with
	// early lock release a commit a crash could still take away, so it
	// waits as a result would.
	held := func(e error) error {
		if derr := db.waitDurable(dep); derr != nil {
			return derr
		}
		return e
	}
	for attempt := 0; attempt < db.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if werr := db.retryWait(ctx, attempt, err); werr != nil {
				return held(werr) // it wraps the last failure
			}
		}
		var t *Txn
		t, berr := db.Begin(ctx, o)
		if berr != nil {
			if attempt > 0 && ctx.Err() != nil {
				// Ended as the wait did: reported as retryWait does,
				// and so held as there.
				return held(fmt.Errorf("%w while waiting to run the function again after: %w", berr, err))
			}
			return berr
		}
		if err = callFn(t, fn); err != nil {
			t.Rollback()
			if IsRetryable(err) {
				dep = t.dep
				continue
			}
			// What fn returns may rest on what it read (ErrNotFound
			// for a key an early-released commit deleted): it is
			// returned only once that is durable too.
			if werr := db.waitDurable(t.dep); werr != nil {
				return werr
			}
			return err
		}
		if err = t.Commit(); err == nil || !IsRetryable(err) {
			return err
		}
		dep = t.dep
	}
	return held(err) // out of runs
}

// Retry backoff of DB.Update and DB.View: the wait before the nth rerun
// is drawn uniformly from [d/2, d), d = retryBackoffBase·2^(n-1) capped at
// retryBackoffMax. Rerunning at once, the losers of a race meet the same
// winners again (with 4 goroutines crossing two keys, one to two and a
// half failed runs per commit, BenchmarkUpdateCrossingKeys); a short,
// growing and jittered pause lets the winner commit and spreads the
// losers apart, as clients of PostgreSQL back off before they retry a
// serialization failure. The cap keeps a rerun within a few
// milliseconds: a commit takes about one WAL flush.
const (
	retryBackoffBase = 20 * time.Microsecond
	retryBackoffMax  = 4 * time.Millisecond
	// retrySpinBelow: shorter pauses yield the processor in a loop
	// rather than wait for a timer (retryWait).
	retrySpinBelow = time.Millisecond
)

// retryBackoff returns the wait before rerun n (from 1); r in [0, 1)
// picks it within its jitter range.
func retryBackoff(n int, r float64) time.Duration {
	d := retryBackoffMax
	if n-1 < 16 {
		d = min(retryBackoffBase<<(n-1), retryBackoffMax)
	}
	return d/2 + time.Duration(r*float64(d/2))
}

// retryWait waits out the backoff before rerun n of DB.Update's or
// DB.View's function, whose last run failed with last (a retryable
// error). It returns nil to rerun; when ctx ends first, ctx's error
// wrapped together with last (errors.Is matches both); ErrClosed when
// Close begins.
func (db *DB) retryWait(ctx context.Context, n int, last error) error {
	d := retryBackoff(n, rand.Float64())
	if db.testRetryWait != nil {
		d = db.testRetryWait(n, d)
	}
	if d < retrySpinBelow {
		// Go's timers wake an idle program up to a millisecond late
		// (measured here: a 10 µs timer took 0.45 ms on average, a 20
		// µs one 1 ms), which would make every short pause a long one:
		// yield the processor until the time has passed instead.
		for start := time.Now(); time.Since(start) < d; {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w while waiting to run the function again after: %w", ctx.Err(), last)
			case <-db.closing:
				return ErrClosed
			default:
				runtime.Gosched()
			}
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w while waiting to run the function again after: %w", ctx.Err(), last)
	case <-db.closing:
		return ErrClosed
	}
}
