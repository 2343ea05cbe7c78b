package server

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"mvkv/engine"
)

// Stored values (docs/SERVER.md, "Expiry"). Part of the format; do not
// change:
//
//	no expiry, first byte not 0xFF:  | value ...                             |
//	no expiry, first byte 0xFF:      | 0xFF | 0x00 | value ...               |
//	with an expiry:                  | 0xFF | 0x01 | deadline | value ...    |
//	                                    1      1       8 bytes
//
// deadline is the Unix time in milliseconds at which the key expires, a
// little-endian int64.
const (
	valueMark       = 0xFF
	kindEscaped     = 0x00
	kindDeadline    = 0x01
	deadlineHdrSize = 2 + 8
)

// encodeValue returns what is stored for val with the expiry deadline
// (Unix milliseconds; 0 for none).
func encodeValue(val []byte, deadline int64) []byte {
	switch {
	case deadline != 0:
		b := make([]byte, deadlineHdrSize, deadlineHdrSize+len(val))
		b[0], b[1] = valueMark, kindDeadline
		binary.LittleEndian.PutUint64(b[2:], uint64(deadline))
		return append(b, val...)
	case len(val) > 0 && val[0] == valueMark:
		return append([]byte{valueMark, kindEscaped}, val...)
	}
	return val
}

// encode is encodeValue for a write of the command: a value with a
// deadline also tells the active expiry cycle that there are keys to
// look for.
func (x *execCtx) encode(val []byte, deadline int64) []byte {
	if deadline != 0 {
		x.c.s.expiry.noteDeadline()
		// And again once the write is visible (committed): a pass that
		// began after this note and ended before the commit found
		// nothing, and would otherwise put the cycle to rest with this
		// key stored (noteCommitted).
		x.c.deadlineWritten = true
	}
	return encodeValue(val, deadline)
}

// noteCommitted tells the expiry cycle, after a commit of the connection
// completed (or failed, in doubt), that a deadline it wrote may now be
// visible; while commits are pending it waits for them (settle).
func (c *conn) noteCommitted() {
	if c.deadlineWritten && len(c.pending) == 0 {
		c.deadlineWritten = false
		c.s.expiry.noteDeadline()
	}
}

// decodeMeta is decodeValue for a value of which only the first
// deadlineHdrSize bytes (prefix) were read, and whose stored length is
// total: the value's length and its deadline.
func decodeMeta(prefix []byte, total int) (length int, deadline int64) {
	if len(prefix) < 2 || prefix[0] != valueMark {
		return total, 0
	}
	switch prefix[1] {
	case kindEscaped:
		return total - 2, 0
	case kindDeadline:
		if len(prefix) >= deadlineHdrSize {
			if d := int64(binary.LittleEndian.Uint64(prefix[2:])); d != 0 {
				return total - deadlineHdrSize, d
			}
		}
	}
	return total, 0
}

// decodeValue splits a stored value into the value and its deadline (0 for
// none). The value shares raw's memory.
func decodeValue(raw []byte) (val []byte, deadline int64) {
	if len(raw) < 2 || raw[0] != valueMark {
		return raw, 0
	}
	switch raw[1] {
	case kindEscaped:
		return raw[2:], 0
	case kindDeadline:
		if len(raw) >= deadlineHdrSize {
			if d := int64(binary.LittleEndian.Uint64(raw[2:])); d != 0 {
				return raw[deadlineHdrSize:], d
			}
		}
	}
	return raw, 0
}

// now is the command's clock in Unix milliseconds, read once per command so
// that every key it touches is judged at the same instant (Redis's
// commandTimeSnapshot).
func (x *execCtx) now() int64 {
	if x.nowMS == 0 {
		x.nowMS = time.Now().UnixMilli()
	}
	return x.nowMS
}

// expiredAt says whether a key with deadline (Unix milliseconds, 0 for
// none) has expired at the command's time.
func (x *execCtx) expiredAt(deadline int64) bool {
	return deadline != 0 && deadline <= x.now()
}

// live decodes a stored value and says whether the key is live (present
// and not past its deadline) at the command's time.
func (x *execCtx) live(raw []byte, found bool) (val []byte, deadline int64, ok bool) {
	if !found {
		return nil, 0, false
	}
	val, deadline = decodeValue(raw)
	if x.expiredAt(deadline) {
		return nil, 0, false
	}
	if val == nil {
		val = []byte{}
	}
	return val, deadline, true
}

// rmwResult is what a read-modify-write function decides.
type rmwResult int

const (
	rmwKeep   rmwResult = iota // leave the key as it is
	rmwPut                     // store the new value and deadline
	rmwDelete                  // delete the key
)

var errRMWDelete = errors.New("server: delete")

// rmw is a read-modify-write of one key under its row lock: fn gets the
// key's live value and deadline (live false for a key that is absent or
// expired) and decides. An expired key is deleted when fn keeps it, which
// is how writes remove expired keys lazily. rmw returns nil after any
// decision; an error means the transaction failed, or comes from
// engine limits (see writeErr). It reads the whole value: one that cannot
// be read (a chunk of a large value lost to a damaged page) fails it with
// the engine's ErrCorruption; rmwMeta does not need the value.
func (x *execCtx) rmw(key []byte, fn func(val []byte, deadline int64, live bool) (rmwResult, []byte, int64)) error {
	var st rmwState
	err := x.tx.Update(key, func(raw []byte, found bool) ([]byte, error) {
		val, deadline, ok := x.live(raw, found)
		st.note(found, ok)
		res, nv, nd := fn(val, deadline, ok)
		return x.rmwApply(&st, res, nv, nd)
	})
	return x.rmwDone(key, &st, err)
}

// rmwMeta is rmw for a decision that needs only whether the key is live
// and its deadline, not its value (DEL, SET without GET, SETNX, the
// removal of expired keys): of a large value it reads only the first
// bytes, which hold the deadline (engine's UpdatePrefix), so a chunk lost
// further on is never read. A key whose first bytes cannot be read (the
// chunk holding them lost) is present but unreadable: fn gets it as live
// with no deadline, so that DEL deletes it (and counts it) and SET
// replaces it, neither of which reads the old value; with needDeadline
// (SET KEEPTTL, which would keep a deadline it cannot know) the read's
// error is returned instead, leaving the transaction usable.
func (x *execCtx) rmwMeta(key []byte, needDeadline bool, fn func(deadline int64, live bool) (rmwResult, []byte, int64)) error {
	var st rmwState
	err := x.tx.UpdatePrefix(key, deadlineHdrSize, func(prefix []byte, total int, found bool, unreadable error) ([]byte, error) {
		var deadline int64
		ok := found
		switch {
		case unreadable != nil && needDeadline:
			return nil, unreadable
		case unreadable != nil:
		case found:
			_, deadline = decodeMeta(prefix, total)
			ok = !x.expiredAt(deadline)
		}
		st.note(found, ok)
		res, nv, nd := fn(deadline, ok)
		return x.rmwApply(&st, res, nv, nd)
	})
	return x.rmwDone(key, &st, err)
}

// rmwState is what rmw and rmwMeta learned of the key, for rmwDone.
type rmwState struct {
	expired bool // stored but past its deadline
	looked  bool // the key was read (its lookup counts as a hit or miss)
	hit     bool // live
}

func (st *rmwState) note(found, live bool) {
	st.expired, st.looked, st.hit = found && !live, true, live
}

// rmwApply turns a decision into what the engine's update function
// returns: the value to store, or errRMWDelete or errNoop.
func (x *execCtx) rmwApply(st *rmwState, res rmwResult, nv []byte, nd int64) ([]byte, error) {
	switch {
	case res == rmwPut && x.expiredAt(nd):
		res = rmwDelete
	case res == rmwKeep && st.expired:
		res = rmwDelete
	}
	switch res {
	case rmwPut:
		return x.encode(nv, nd), nil
	case rmwDelete:
		return nil, errRMWDelete
	}
	return nil, errNoop
}

// rmwDone finishes rmw and rmwMeta after the engine's update: a delete
// decided is made (Delete reads none of the old value), the lookup
// counted.
func (x *execCtx) rmwDone(key []byte, st *rmwState, err error) error {
	if st.looked {
		x.lookedUp(st.hit)
	}
	switch {
	case errors.Is(err, errRMWDelete):
		if err := x.tx.Delete(key); err != nil {
			return err
		}
		if st.expired {
			x.expired()
		}
		return nil
	case errors.Is(err, errNoop):
		return nil
	}
	return err
}

// noteExpired remembers a key a read found expired, for reapExpired.
func (x *execCtx) noteExpired(k []byte) {
	if len(x.c.expired) < maxReap {
		x.c.expired = append(x.c.expired, append([]byte(nil), k...))
	}
}

// maxReap bounds how many expired keys one command removes afterwards.
const maxReap = 16

// reapLockWait bounds how long removing an expired key waits for its row
// lock: a key some writer holds will be written (and so replaced) anyway.
const reapLockWait = 10 * time.Millisecond

// reapExpired deletes the expired keys reads of the last command found,
// as Redis's lazy expiry (expireIfNeeded) does. The deletes commit with
// synchronous_commit off: losing one in a crash loses nothing, since the
// key is still past its deadline after recovery. A key written since is
// left alone, and removing an already expired key does not count as a
// change for WATCH (as Redis's touchWatchedKey).
func (c *conn) reapExpired() {
	if len(c.expired) == 0 {
		return
	}
	keys := c.expired
	c.expired = c.expired[:0]
	ctx, cancel := context.WithTimeout(c.ctx, reapLockWait)
	defer cancel()
	off := engine.SyncCommitOff
	tx, err := c.s.db.Begin(ctx, engine.TxnOptions{Isolation: engine.ReadCommitted, SynchronousCommit: &off})
	if err != nil {
		return
	}
	c.s.openTxns.Add(1)
	x := &execCtx{c: c, tx: tx}
	for _, k := range keys {
		err := x.rmwMeta(k, false, func(int64, bool) (rmwResult, []byte, int64) { return rmwKeep, nil, 0 })
		if err != nil {
			c.rollback(tx)
			return
		}
	}
	c.commit(tx)
}

// expireFlags are EXPIRE's NX, XX, GT and LT.
type expireFlags struct{ nx, xx, gt, lt bool }

// cmdExpire is EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT key t [NX|XX|GT|LT],
// as Redis's expireGenericCommand: a deadline in the past deletes the key.
func cmdExpire(x *execCtx, args [][]byte) error {
	name := lower(args[0])
	var f expireFlags
	for _, a := range args[3:] {
		switch strings.ToLower(string(a)) {
		case "nx":
			f.nx = true
		case "xx":
			f.xx = true
		case "gt":
			f.gt = true
		case "lt":
			f.lt = true
		default:
			x.errorf("ERR Unsupported option %s", trunc(a, 128))
			return nil
		}
	}
	if f.nx && (f.xx || f.gt || f.lt) {
		x.errorf("ERR NX and XX, GT or LT options at the same time are not compatible")
		return nil
	}
	if f.gt && f.lt {
		x.errorf("ERR GT and LT options at the same time are not compatible")
		return nil
	}
	when, ok := parseInt(args[2])
	if !ok {
		x.notInteger()
		return nil
	}
	if name == "expire" || name == "expireat" {
		if when > math.MaxInt64/1000 || when < math.MinInt64/1000 {
			x.errorf("ERR invalid expire time in '%s' command", name)
			return nil
		}
		when *= 1000
	}
	if name == "expire" || name == "pexpire" {
		if when > math.MaxInt64-x.now() {
			x.errorf("ERR invalid expire time in '%s' command", name)
			return nil
		}
		when += x.now()
	}
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	// A deadline of 0 means none in the stored form; the earliest
	// representable one is 1 ms after the epoch, long past either way.
	if when <= 0 {
		when = 1
	}
	set := false
	err := x.rmw(key, func(val []byte, cur int64, live bool) (rmwResult, []byte, int64) {
		switch {
		case !live,
			f.nx && cur != 0,
			f.xx && cur == 0,
			f.gt && (cur == 0 || when <= cur),
			f.lt && cur != 0 && when >= cur:
			return rmwKeep, nil, 0
		}
		set = true
		return rmwPut, val, when
	})
	if err != nil {
		return x.writeErr(err)
	}
	if set {
		x.wrote(key)
		x.out = redcon.AppendInt(x.out, 1)
	} else {
		x.out = redcon.AppendInt(x.out, 0)
	}
	return nil
}

// cmdPersist removes a key's expiry: 1 if it had one, else 0.
func cmdPersist(x *execCtx, args [][]byte) error {
	key := args[1]
	if !x.checkKey(key) {
		return nil
	}
	done := false
	err := x.rmw(key, func(val []byte, cur int64, live bool) (rmwResult, []byte, int64) {
		if !live || cur == 0 {
			return rmwKeep, nil, 0
		}
		done = true
		return rmwPut, val, 0
	})
	if err != nil {
		return x.writeErr(err)
	}
	n := int64(0)
	if done {
		x.wrote(key)
		n = 1
	}
	x.out = redcon.AppendInt(x.out, n)
	return nil
}

// cmdTTL is TTL and PTTL: -2 for a key that does not exist, -1 for one
// without an expiry, else the time left (TTL rounds to seconds as Redis).
func cmdTTL(x *execCtx, args [][]byte) error {
	_, deadline, ok, err := x.meta(args[1])
	if err != nil {
		return err
	}
	var n int64
	switch {
	case !ok:
		n = -2
	case deadline == 0:
		n = -1
	default:
		n = max(deadline-x.now(), 0)
		if lower(args[0]) == "ttl" {
			n = (n + 500) / 1000
		}
	}
	x.out = redcon.AppendInt(x.out, n)
	return nil
}

// Active expiry, as Redis's activeExpireCycle: without it an expired key
// that nobody reads again (a session, a cache entry) would stay stored for
// ever. Redis samples its expires dictionary hz times a second (10 by
// default); mvkv has none, deadlines living in the values, so the cycle
// walks the keyspace instead, in key order, a slice of
// expireKeysPerSecond / hz keys each tick, reading of each value only its
// deadline header, and deletes the keys past their deadline as lazy expiry
// does (a transaction with synchronous_commit off, each key under its row
// lock, a key some writer holds left for later). As Redis's cycle, it goes
// on within the tick while more than a tenth of a slice had expired, up to
// a quarter of the tick: a keyspace where many keys expire at once is
// cleaned at once, one where few do costs a slice a tick. A whole pass over N keys takes about N /
// 20,000 seconds at the least at any hz (a million keys: about 50 s), so
// an expired key is removed within about that, or when it is next read.
//
// Rejected: a second key per expiring key, ordered by deadline (Redis's
// expires dictionary as an index), which would find expired keys without
// walking the others but doubles the writes of every SET EX; and sampling
// random keys, which on a keyspace where few keys expire finds almost
// none. The walk costs nothing once it knows there is nothing to find: a
// pass that met no key with a deadline, with no deadline written since it
// began, stops the cycle until a write stores one (or the server
// restarts over a keyspace that is not empty).
const (
	// expireKeysPerSecond is how many keys the walk reads a second when
	// few expire, whatever hz is: a slice a tick of this over hz keys
	// (2,000 at hz 10), so that a higher hz makes the cycle respond
	// sooner without walking more (at hz 500 a fixed slice of 2,000
	// keys a tick took 37% of a core, past the quarter of each tick).
	expireKeysPerSecond = 20000
	expireDeleteWait    = 100 * time.Millisecond
)

// rateSamplePeriod is how often the cron samples INFO's instantaneous
// rates, as Redis's serverCron does with run_with_period(100), whatever
// hz is: sampled every tick at hz 500, the rates were the mean over the
// last 32 ms, and bursts of traffic showed as rates that came and went.
const rateSamplePeriod = 100 * time.Millisecond

// rateEveryTicks is the number of cron ticks at hz between two rate
// samples, rateSamplePeriod over a tick rounded down and at least one, as
// run_with_period: one a tick when a tick lasts more than half of
// rateSamplePeriod (hz 19 or below), so that from hz 11 to 19 the samples
// are 53 to 91 ms apart, as Redis's.
func rateEveryTicks(hz int64) uint64 {
	return uint64(max(1, rateSamplePeriod/cronTick(hz)))
}

// cronTick is the cron's period at hz ticks a second; the expiry cycle
// may spend a quarter of it (Redis's ACTIVE_EXPIRE_CYCLE_SLOW_TIME_PERC,
// 25% of a tick).
func cronTick(hz int64) time.Duration { return time.Second / time.Duration(hz) }

// expiryState is the active expiry cycle's state.
type expiryState struct {
	// maybe is set while keys with a deadline may exist; gen counts the
	// writes that stored a deadline, so that a pass can tell whether one
	// came while it walked.
	maybe atomic.Bool
	gen   atomic.Uint64
	stop  chan struct{} // closed to end the cron
	done  chan struct{} // closed when it has ended
	once  sync.Once     // starts the cron
	// cpu is the time the cycle has spent, in nanoseconds (INFO's
	// expire_cycle_cpu_milliseconds).
	cpu atomic.Int64
}

func (e *expiryState) noteDeadline() {
	e.gen.Add(1)
	e.maybe.Store(true)
}

// startCron starts the server's cron (and so the active expiry cycle)
// once; shutdown ends it.
func (s *Server) startCron() {
	s.expiry.once.Do(func() {
		if s.db.Stats().Index.Keys > 0 {
			s.expiry.maybe.Store(true)
		}
		go s.cron()
	})
}

// stopCron ends the cron and waits for it, if it was started.
func (s *Server) stopCron() {
	started := true
	s.expiry.once.Do(func() { started = false })
	close(s.expiry.stop)
	if started {
		<-s.expiry.done
	}
}

// cron is the server's periodic work, as Redis's serverCron, hz times a
// second: it runs the active expiry cycle, and every rateSamplePeriod
// samples the rates INFO reports (trackInstantaneousMetric).
func (s *Server) cron() {
	defer close(s.expiry.done)
	// A timer set for the last tick plus the period, not a ticker
	// restarted at each change of hz: CONFIG SET hz sent more often than
	// a tick would push the next tick off at each SET, and the cron
	// would not tick while they came. Timed from the last tick, the next
	// comes within a second (hz 1) of it whatever is set meanwhile.
	hz := s.hz.Load()
	period := cronTick(hz)
	last := time.Now()
	t := time.NewTimer(period)
	defer t.Stop()
	s.cronPeriod.Store(int64(period))
	var from []byte // where the expiry pass resumes; nil at its start
	var passDeadlines int64
	passGen := s.expiry.gen.Load()
	for {
		var now time.Time
		select {
		case <-s.expiry.stop:
			return
		case <-s.hzChanged:
			hz = s.hz.Load()
			if p := cronTick(hz); p != period {
				period = p
				t.Reset(time.Until(last.Add(period)))
				s.cronPeriod.Store(int64(period))
			}
			continue
		case now = <-t.C:
		}
		// The next tick a period after this one's time, or a period
		// from now if the cron fell behind by more than one (as a
		// ticker drops the ticks it could not deliver).
		if last = last.Add(period); now.Sub(last) >= period {
			last = now
		}
		t.Reset(time.Until(last.Add(period)))
		if loops := s.cronLoops.Add(1); loops%rateEveryTicks(hz) == 0 {
			s.opsRate.sample(now, s.commands.Load())
			s.inRate.sample(now, s.netIn.Load())
			s.outRate.sample(now, s.netOut.Load())
		}
		if !s.expiry.maybe.Load() {
			continue
		}
		start := time.Now()
		for {
			if from == nil {
				passGen, passDeadlines = s.expiry.gen.Load(), 0
			}
			next, scanned, deadlines, expired, err := s.expireSlice(from, expireSliceKeys(hz))
			if errors.Is(err, engine.ErrClosed) {
				return // closed without a shutdown of the server
			}
			if err != nil {
				// Shutting down, a failed engine, or damage a reader
				// will report; the next tick starts the pass again.
				from = nil
				break
			}
			from, passDeadlines = next, passDeadlines+deadlines
			if from == nil && passDeadlines == 0 {
				// Nothing to find: sleep until a deadline is
				// written, unless one was while the pass walked.
				s.expiry.maybe.Store(false)
				if s.expiry.gen.Load() != passGen {
					s.expiry.maybe.Store(true)
				}
			}
			if from == nil || expired*10 <= scanned || time.Since(start) >= cronTick(hz)/4 {
				break
			}
		}
		s.expiry.cpu.Add(int64(time.Since(start)))
	}
}

// expireSliceKeys is the keys a tick's slice reads at hz.
func expireSliceKeys(hz int64) int64 { return max(expireKeysPerSecond/hz, 1) }

// expireSlice reads the deadlines of up to n keys from from (nil: the
// first key) and deletes those past theirs. It returns the key the next
// slice starts from, nil when the walk reached the end.
func (s *Server) expireSlice(from []byte, n int64) (next []byte, scanned, deadlines, expired int64, err error) {
	tx, err := s.db.Begin(s.baseCtx, engine.TxnOptions{Isolation: engine.ReadCommitted, ReadOnly: true})
	if err != nil {
		return nil, 0, 0, 0, err
	}
	now := time.Now().UnixMilli()
	var keys [][]byte
	err = tx.ScanPrefix(from, nil, deadlineHdrSize, func(k, prefix []byte, total int) bool {
		if scanned == n {
			next = append([]byte(nil), k...)
			return false
		}
		scanned++
		if _, d := decodeMeta(prefix, total); d != 0 {
			deadlines++
			if d <= now {
				keys = append(keys, append([]byte(nil), k...))
			}
		}
		return true
	})
	tx.Rollback() // read only, and nothing it read is reported
	if err != nil || len(keys) == 0 {
		return next, scanned, deadlines, 0, err
	}
	ctx, cancel := context.WithTimeout(s.baseCtx, expireDeleteWait)
	defer cancel()
	off := engine.SyncCommitOff
	wtx, err := s.db.Begin(ctx, engine.TxnOptions{Isolation: engine.ReadCommitted, SynchronousCommit: &off})
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if err := s.reapKeys(ctx, wtx, keys, now); err == nil {
		return next, scanned, deadlines, int64(len(keys)), nil
	}
	// A key whose row lock a writer holds (that write replaces or deletes
	// it anyway) failed the batch: the others, each on its own, each
	// waiting for its lock no longer than a lazy reap does.
	for _, k := range keys {
		kctx, kcancel := context.WithTimeout(s.baseCtx, reapLockWait)
		tx, err := s.db.Begin(kctx, engine.TxnOptions{Isolation: engine.ReadCommitted, SynchronousCommit: &off})
		if err == nil {
			s.reapKeys(kctx, tx, [][]byte{k}, now)
		}
		kcancel()
		if s.baseCtx.Err() != nil {
			break
		}
	}
	return next, scanned, deadlines, int64(len(keys)), nil
}

// expired counts a key deleted because it was past its deadline in
// expired_keys at once (INFO shows it while the transaction runs, as
// Redis's counter moves when its key goes), and in the connection's
// running transaction, which takes the count back if it rolls back. Keys
// counted before a CONFIG RESETSTAT are no longer the transaction's to
// take back: the reset took them.
func (x *execCtx) expired() {
	c := x.c
	if g := c.s.expiredResets.Load(); g != c.expiredGen {
		c.expiredN, c.expiredGen = 0, g
	}
	c.s.expiredKeys.Add(1)
	c.expiredN++
}

// uncountExpired takes the expired keys the running transaction counted
// off expired_keys: it rolled back, or its commit failed before it could
// be in doubt, so none of them was deleted. Those a CONFIG RESETSTAT took
// off since are not taken again, and the counter never goes below zero
// (a reset racing the count), where it would wrap to 2^64-n.
func (c *conn) uncountExpired() {
	n := uint64(c.expiredN)
	c.expiredN = 0
	if n == 0 || c.s.expiredResets.Load() != c.expiredGen {
		return
	}
	for {
		v := c.s.expiredKeys.Load()
		if c.s.expiredKeys.CompareAndSwap(v, v-min(v, n)) {
			return
		}
	}
}

// reapKeys deletes those of keys that are past their deadline at now
// (Unix ms) in tx, and commits it; on any failure it rolls tx back.
func (s *Server) reapKeys(ctx context.Context, tx *engine.Txn, keys [][]byte, now int64) error {
	x := &execCtx{c: &conn{s: s, ctx: ctx}, tx: tx, nowMS: now}
	for _, k := range keys {
		if err := x.rmwMeta(k, false, func(int64, bool) (rmwResult, []byte, int64) { return rmwKeep, nil, 0 }); err != nil {
			tx.Rollback()
			x.c.uncountExpired() // counted as they were deleted; none was
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		// Not deleted after all: a context that ended first aborts the
		// transaction (the caller then reaps the keys one by one, which
		// counts them again), and any other failure stops writes.
		x.c.uncountExpired()
		return err
	}
	return nil
}

// rateSampler turns a growing total into a rate, as Redis's
// trackInstantaneousMetric: the mean of the rates over the last
// rateSamples intervals between samples.
type rateSampler struct {
	mu      sync.Mutex
	lastT   time.Time // guarded by mu; zero before the first sample
	lastN   uint64    // guarded by mu
	rates   [rateSamples]float64
	next, n int    // guarded by mu
	taken   uint64 // samples taken; guarded by mu
}

const rateSamples = 16 // Redis's STATS_METRIC_SAMPLES

func (r *rateSampler) sample(now time.Time, total uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.taken++
	// A total below the last one was reset (CONFIG RESETSTAT): no
	// sample for that interval.
	if !r.lastT.IsZero() && total >= r.lastN {
		if d := now.Sub(r.lastT).Seconds(); d > 0 {
			r.rates[r.next] = float64(total-r.lastN) / d
			r.next = (r.next + 1) % rateSamples
			r.n = min(r.n+1, rateSamples)
		}
	}
	r.lastT, r.lastN = now, total
}

// rate is the mean rate per second over the last samples; 0 before two.
func (r *rateSampler) rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range r.rates[:r.n] {
		sum += v
	}
	return sum / float64(r.n)
}
