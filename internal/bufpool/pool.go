package bufpool

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mvkv/internal/hugepage"
)

// PageSize is the size in bytes of one frame (heap.PageSize).
const PageSize = 8192

// maxUsage caps a frame's clock-sweep usage count, as PostgreSQL's
// BM_MAX_USAGE_COUNT: a page must go unused for up to this many sweeps
// before it is evicted.
const maxUsage = 5

// numShards is the number of page-table partitions (PostgreSQL's
// NUM_BUFFER_PARTITIONS), so that hits on different blocks rarely meet on
// one mutex.
const numShards = 64

var (
	// ErrNoFreeBuffer is returned by Get and Extend when every frame is
	// pinned, so no victim can be chosen, unless SetNoFreeBufferError
	// named another error.
	ErrNoFreeBuffer = errors.New("bufpool: no unpinned buffer available")
	// ErrRelationFull is returned by Extend when the block number would
	// overflow uint32.
	ErrRelationFull = errors.New("bufpool: relation has the maximum number of blocks")
	// ErrPastEnd is returned by Get for a block at or past NBlocks once
	// the relation has been cut back by DropFrom: the block no longer
	// exists, and a caller holding its number from before the cut (a
	// link to a version that vacuum removed) must treat it as gone.
	ErrPastEnd = errors.New("bufpool: block past the end of the relation")
	// ErrBlockPinned is returned by DropFrom when a block it would drop
	// stayed pinned for the whole wait.
	ErrBlockPinned = errors.New("bufpool: a block to drop stayed pinned")
)

// Storage is what the pool reads pages from and writes them to
// (*heap.Storage). Its methods must be safe for concurrent use; WriteBlock
// may modify the page it is given (it gets a private copy).
type Storage interface {
	// ReadBlock reads block into p (one page).
	ReadBlock(block uint32, p []byte) error
	// WriteBlock writes p (one page) at block, extending the relation
	// as needed; the data is durable only after Sync.
	WriteBlock(block uint32, p []byte) error
	// NBlocks returns one past the highest block on disk.
	NBlocks() uint32
	// Sync makes every WriteBlock that returned before it durable.
	Sync() error
}

// Stats counts buffer pool events since New. It is a value; Sub gives the
// difference between two snapshots.
type Stats struct {
	Hits      uint64 // Get found the block in the pool
	Misses    uint64 // Get had to load (or wait for another goroutine loading) the block
	Reads     uint64 // pages read from Storage
	Writes    uint64 // pages written to Storage (eviction and FlushAll)
	Evictions uint64 // frames taken from one block for another
}

// Sub returns s - o, field by field.
func (s Stats) Sub(o Stats) Stats {
	return Stats{
		Hits:      s.Hits - o.Hits,
		Misses:    s.Misses - o.Misses,
		Reads:     s.Reads - o.Reads,
		Writes:    s.Writes - o.Writes,
		Evictions: s.Evictions - o.Evictions,
	}
}

// ioState is one read in progress into a frame. Goroutines that find the
// frame in the page table while io is set wait on done and then read err.
type ioState struct {
	done chan struct{}
	err  error // written before done is closed
}

// Buffer is one frame of the pool and the handle callers use while it is
// pinned (PostgreSQL's BufferDesc plus its block). A Buffer is valid from
// Get or Extend until the matching Release; after that it may hold another
// block.
type Buffer struct {
	pool *Pool
	id   int32  // index in pool.frames; immutable
	page []byte // PageSize bytes of the pool's arena; immutable slice

	// content is the page content lock (PostgreSQL's content_lock).
	content sync.RWMutex
	// writeMu is held while a copy of the page is taken and written, so
	// that two writers of the same frame (eviction and FlushAll) cannot
	// reach the disk out of order.
	writeMu sync.Mutex

	pins  atomic.Int32  // pin count (refcount)
	usage atomic.Uint32 // clock-sweep usage count, at most maxUsage
	// state holds bufDirty and bufJustDirtied. Both are set by MarkDirty
	// under content.Lock; a write clears bufJustDirtied when it copies the
	// page and clears bufDirty only once the copy is in the file, and only
	// if no change came meanwhile (see write).
	state atomic.Uint32

	// block and tagged say which block the frame holds. They are written
	// only by a goroutine that holds the frame's sole pin while the frame
	// is absent from the page table, and read by pinners.
	block  uint32
	tagged bool
	// io is the read in progress into the frame; guarded by the mutex of
	// the shard of block.
	io *ioState
}

// Frame state bits, PostgreSQL's BM_DIRTY and BM_JUST_DIRTIED.
const (
	// bufDirty: the frame holds changes its file does not have yet. It
	// stays set while a write of the frame is in progress, so that a
	// FlushAll that starts then finds the frame and waits for that write
	// (through writeMu) before it syncs the storage.
	bufDirty uint32 = 1 << iota
	// bufJustDirtied: the frame changed since the current write copied
	// it, so that write must leave bufDirty set.
	bufJustDirtied
)

// isDirty reports whether the frame has changes not yet written, counting
// a write still in progress as not yet written.
func (b *Buffer) isDirty() bool { return b.state.Load()&bufDirty != 0 }

type shard struct {
	mu sync.Mutex
	// table maps a block to the index of its frame; guarded by mu.
	table map[uint32]int32
	hits  atomic.Uint64
	_     [64]byte // keeps neighbouring shards' locks off one cache line
}

// Pool is a fixed set of page frames caching the blocks of one Storage,
// with PostgreSQL's clock-sweep replacement. All methods are safe for
// concurrent use. See the package documentation for the protocol.
type Pool struct {
	st       Storage
	flushWAL func(lsn uint64) error
	pageLSN  func(p []byte) uint64

	frames []Buffer
	shards [numShards]shard
	hand   atomic.Uint64 // clock hand: next frame to consider, modulo len(frames)

	// nblocks is the logical relation size in blocks.
	nblocks atomic.Uint32
	// noFree is the error returned when every frame is pinned.
	noFree error
	// extendMu serializes Extend, EnsureBlocks and DropFrom.
	extendMu sync.Mutex
	// emptyPage is the page Extend writes, zeroed again before each
	// write (Storage.WriteBlock may stamp a checksum on it). Guarded by
	// extendMu. A fresh page each time made a value of 512 MiB, stored
	// out of line a page per chunk, leave as much garbage as itself.
	emptyPage []byte
	// cut is set by the first DropFrom: from then on a read of a block at
	// or past nblocks fails with ErrPastEnd instead of loading a page of
	// zeros, so that no frame holds a block past the end. Checked under
	// the block's shard lock.
	cut atomic.Bool

	copies sync.Pool // of *[PageSize]byte, page copies being written

	misses, reads, writes, evictions atomic.Uint64
}

// New returns a pool of nframes page frames (nframes*8 KiB of memory) over
// st. flushWAL(lsn) must make the WAL durable up to lsn; the pool calls it
// before writing a page whose LSN (read with pageLSN) is lsn, which is what
// keeps DESIGN rule 1 (WAL before data). nframes below 1 is taken as 1.
func New(st Storage, nframes int, flushWAL func(lsn uint64) error, pageLSN func(p []byte) uint64) *Pool {
	nframes = max(nframes, 1)
	p := &Pool{st: st, flushWAL: flushWAL, pageLSN: pageLSN, frames: make([]Buffer, nframes), noFree: ErrNoFreeBuffer}
	arena := make([]byte, nframes*PageSize)
	// Huge pages: redo after a crash first touches every frame, a page
	// fault each with 4 KiB pages.
	hugepage.Advise(arena)
	for i := range p.frames {
		f := &p.frames[i]
		f.pool = p
		f.id = int32(i)
		f.page = arena[i*PageSize : (i+1)*PageSize : (i+1)*PageSize]
	}
	for i := range p.shards {
		p.shards[i].table = make(map[uint32]int32, nframes/numShards+1)
	}
	p.nblocks.Store(st.NBlocks())
	p.copies.New = func() any { return new([PageSize]byte) }
	return p
}

func (p *Pool) shard(block uint32) *shard {
	// Multiplicative hash so that runs of consecutive blocks spread out.
	return &p.shards[(block*2654435761)>>26%numShards]
}

// Get returns block pinned, reading it from storage on a miss (a block past
// the end of storage reads as a zero page, until the first DropFrom; after
// it, a block at or past NBlocks fails with ErrPastEnd). If another goroutine is reading
// the same block, Get waits for that read instead of issuing its own. The
// caller must call Release exactly once, and take the content lock to look
// at the page. Errors: ErrNoFreeBuffer, or the error of the read (for
// example wrapping heap.ErrCorrupt) or of writing out a dirty victim.
func (p *Pool) Get(block uint32) (*Buffer, error) {
	if f, ok, err := p.pinCached(block); ok {
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	p.misses.Add(1)
	return p.load(block, true, p.victim)
}

// pinCached pins block if the pool holds it (ok), waiting for a read of it
// in progress; err is that read's failure, and then the frame is unpinned.
func (p *Pool) pinCached(block uint32) (f *Buffer, ok bool, err error) {
	sh := p.shard(block)
	sh.mu.Lock()
	id, found := sh.table[block]
	if !found {
		sh.mu.Unlock()
		return nil, false, nil
	}
	if p.pastEnd(block) {
		sh.mu.Unlock()
		return nil, true, ErrPastEnd
	}
	f = &p.frames[id]
	f.pins.Add(1)
	io := f.io
	sh.mu.Unlock()
	sh.hits.Add(1)
	return f, true, f.hit(io)
}

func (f *Buffer) hit(io *ioState) error {
	if u := f.usage.Load(); u < maxUsage {
		f.usage.CompareAndSwap(u, u+1)
	}
	if io != nil {
		<-io.done
		if io.err != nil {
			f.unpin()
			return io.err
		}
	}
	return nil
}

// load puts block into a frame, reading it from storage if read is set or
// zero-filling it (and marking it dirty) for Extend otherwise.
func (p *Pool) load(block uint32, read bool, victim func() (*Buffer, error)) (*Buffer, error) {
	failed := 0
	for {
		f, err := victim()
		if err != nil {
			return nil, err
		}
		ok, err := p.reclaim(f)
		if err != nil {
			// The victim's page could not be written (no space left,
			// say): it stays dirty, and another frame, perhaps a clean
			// one, may serve. A few tries, then the error.
			if failed++; failed < maxWriteFailures {
				continue
			}
			return nil, err
		}
		if !ok {
			continue // someone pinned or dirtied it meanwhile; sweep on
		}
		// f is ours alone: pinned once, in no page table.
		if !read {
			clear(f.page)
			f.state.Store(bufDirty | bufJustDirtied)
		}
		sh := p.shard(block)
		sh.mu.Lock()
		if read && p.pastEnd(block) {
			sh.mu.Unlock()
			f.state.Store(0)
			f.unpin()
			return nil, ErrPastEnd
		}
		if id, ok := sh.table[block]; ok {
			// Another goroutine loaded the block while we looked for a
			// frame: use its frame and give ours back.
			g := &p.frames[id]
			g.pins.Add(1)
			io := g.io
			sh.mu.Unlock()
			f.state.Store(0)
			f.unpin()
			return g, g.hit(io)
		}
		f.block, f.tagged = block, true
		f.usage.Store(1)
		var io *ioState
		if read {
			io = &ioState{done: make(chan struct{})}
			f.io = io
		}
		sh.table[block] = f.id
		sh.mu.Unlock()
		if !read {
			return f, nil
		}

		err = p.st.ReadBlock(block, f.page)
		sh.mu.Lock()
		f.io = nil
		if err != nil {
			delete(sh.table, block)
			f.tagged = false
		}
		sh.mu.Unlock()
		io.err = err
		close(io.done)
		if err != nil {
			f.unpin()
			return nil, err
		}
		p.reads.Add(1)
		return f, nil
	}
}

// victim runs the clock sweep and returns a frame it pinned (0 -> 1): the
// first unpinned frame whose usage count is zero, decrementing the counts of
// the unpinned frames it passes (PostgreSQL's StrategyGetBuffer). After a
// full turn of pinned frames with no count to decrement it gives up.
//
// The hand is shared, so while other goroutines sweep too, one goroutine's
// turn of n looks can land on the same few frames again and again (with
// four frames and three other sweepers, on one frame n times). A turn that
// found only pinned frames is therefore confirmed by reading every frame's
// pin count in order; only when none is free, or the confirmations keep
// failing, is ErrNoFreeBuffer returned.
func (p *Pool) victim() (*Buffer, error) {
	n := uint64(len(p.frames))
	tries := uint64(0)
	confirms := 0
	for {
		f := &p.frames[p.hand.Add(1)%n]
		if f.pins.Load() == 0 {
			if u := f.usage.Load(); u > 0 {
				f.usage.CompareAndSwap(u, u-1)
				tries = 0
				continue
			}
			if f.pins.CompareAndSwap(0, 1) {
				return f, nil
			}
		}
		tries++
		if tries >= n {
			if confirms++; confirms > maxConfirms || !p.anyUnpinned() {
				return nil, p.noFree
			}
			tries = 0
		}
	}
}

// maxWriteFailures bounds how many victims whose write failed one load
// passes over before it returns the failure.
const maxWriteFailures = 8

// maxConfirms bounds how many turns of the sweep one victim call restarts
// because a frame was seen unpinned after a turn that found none, so that
// frames pinned and unpinned faster than the sweep cannot keep it going.
const maxConfirms = 64

// anyUnpinned reports whether some frame has no pin at the moment it is
// read.
func (p *Pool) anyUnpinned() bool {
	for i := range p.frames {
		if p.frames[i].pins.Load() == 0 {
			return true
		}
	}
	return false
}

// reclaim makes a frame pinned by victim free for a new block: it writes
// the page if dirty, then removes the frame from the page table if nobody
// else pinned or dirtied it meanwhile. It reports false (and unpins) when
// the frame got used again, so the sweep must go on.
func (p *Pool) reclaim(f *Buffer) (bool, error) {
	if !f.tagged {
		return true, nil
	}
	if f.isDirty() {
		if err := p.write(f); err != nil {
			f.unpin()
			return false, err
		}
	}
	sh := p.shard(f.block)
	sh.mu.Lock()
	if f.pins.Load() != 1 || f.isDirty() {
		sh.mu.Unlock()
		f.unpin()
		return false, nil
	}
	if id, ok := sh.table[f.block]; ok && id == f.id {
		delete(sh.table, f.block)
	}
	f.tagged = false
	sh.mu.Unlock()
	p.evictions.Add(1)
	return true, nil
}

// write writes f's page out if it is dirty. The caller holds a pin. The page
// is copied under the shared content lock, so writers wait only for the copy,
// not the I/O; the copy is what reaches the disk, so a page changing during
// the write cannot tear it or get a checksum that does not match. The WAL is
// flushed up to the copy's LSN first (WAL before data).
//
// The frame stays dirty until WriteBlock has returned, as PostgreSQL keeps
// BM_DIRTY set through FlushBuffer and clears it in TerminateBufferIO only
// if BM_JUST_DIRTIED is still clear. Clearing it at the copy instead would
// let a FlushAll that runs while this write waits for the WAL or the file
// pass the frame as clean and sync the storage before the page is in it:
// a checkpoint would then complete with a change below its redo point in
// no file, and a crash before the next checkpoint would lose it.
func (p *Pool) write(f *Buffer) error {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	buf := p.copies.Get().(*[PageSize]byte)
	defer p.copies.Put(buf)
	f.content.RLock()
	if !f.isDirty() {
		f.content.RUnlock()
		return nil
	}
	copy(buf[:], f.page)
	f.state.And(^bufJustDirtied)
	f.content.RUnlock()
	// From here a new change sets bufJustDirtied again, so the frame
	// stays dirty after this write and the next one (serialized by
	// writeMu) carries the change.
	if err := p.flushWAL(p.pageLSN(buf[:])); err != nil {
		return fmt.Errorf("bufpool: flush WAL before writing block %d: %w", f.block, err)
	}
	if err := p.st.WriteBlock(f.block, buf[:]); err != nil {
		return err
	}
	for {
		s := f.state.Load()
		if s&bufJustDirtied != 0 || f.state.CompareAndSwap(s, s&^bufDirty) {
			break
		}
	}
	p.writes.Add(1)
	return nil
}

// GetZeroed returns block pinned without reading it from storage: a block
// already in the pool is returned as it is, any other gets an all-zero,
// dirty frame. Redo uses it for a page it is about to overwrite whole (a
// full-page image, or a page a record initializes), so that a page torn on
// disk, whose checksum fails, is never read (PostgreSQL's RBM_ZERO_AND_LOCK).
// The caller must overwrite the whole page under Lock. Errors as Get.
func (p *Pool) GetZeroed(block uint32) (*Buffer, error) {
	// A read of the block that failed (a torn page) leaves it out of the
	// pool: a zero frame is loaded instead.
	if f, ok, err := p.pinCached(block); ok && err == nil {
		return f, nil
	}
	p.misses.Add(1)
	return p.load(block, false, p.victim)
}

// Extend adds a new all-zero page at block NBlocks() and returns it pinned
// and dirty. It first writes an empty page at that block in the Storage,
// so that the file's space for the block is taken before anything is
// placed on it, as PostgreSQL's smgrextend does: on a full disk the caller
// that needs a new page gets the error (NBlocks as it was; the file may
// keep the empty page, which the next Extend writes again), instead of a later eviction or checkpoint failing to write a page
// that already holds data; an overwrite of a block the file has needs no
// new space on the usual file systems (ext4, XFS). The page's contents
// reach the disk on eviction or FlushAll. Concurrent Extends get distinct
// blocks. Errors: ErrNoFreeBuffer, ErrRelationFull, the Storage's error
// writing the empty page, or an error writing out a dirty victim.
func (p *Pool) Extend() (*Buffer, error) {
	p.extendMu.Lock()
	defer p.extendMu.Unlock()
	n := p.nblocks.Load()
	if n == math.MaxUint32 {
		return nil, ErrRelationFull
	}
	if p.emptyPage == nil {
		p.emptyPage = make([]byte, PageSize)
	}
	clear(p.emptyPage)
	if err := p.st.WriteBlock(n, p.emptyPage); err != nil {
		return nil, err
	}
	b, err := p.load(n, false, p.victim)
	if err != nil {
		return nil, err
	}
	p.nblocks.Store(n + 1)
	return b, nil
}

// SetNoFreeBufferError makes Get and Extend return err instead of
// ErrNoFreeBuffer when every frame is pinned: a user of the pool gives its
// own callers a sentinel of its own API. Call it before the pool is used.
func (p *Pool) SetNoFreeBufferError(err error) { p.noFree = err }

// NBlocks returns the logical size of the relation in blocks: the storage
// size at New, raised by Extend and EnsureBlocks. Safe concurrently.
func (p *Pool) NBlocks() uint32 { return p.nblocks.Load() }

// EnsureBlocks raises NBlocks to at least n, for redo, which may touch a
// block that was extended but never written before the crash.
func (p *Pool) EnsureBlocks(n uint32) {
	p.extendMu.Lock()
	defer p.extendMu.Unlock()
	if n > p.nblocks.Load() {
		p.nblocks.Store(n)
	}
}

// Truncate lowers NBlocks to n, for a relation whose storage was cut back
// (recovery removing the pages of a bulk load that never committed). It
// fails if the pool holds a block at or past n; NBlocks at or below n is
// left as it is.
func (p *Pool) Truncate(n uint32) error {
	p.extendMu.Lock()
	defer p.extendMu.Unlock()
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for block := range sh.table {
			if block >= n {
				sh.mu.Unlock()
				return fmt.Errorf("bufpool: truncate to %d blocks: block %d is in the pool", n, block)
			}
		}
		sh.mu.Unlock()
	}
	if n < p.nblocks.Load() {
		p.nblocks.Store(n)
	}
	return nil
}

// pastEnd reports whether a read of block must fail with ErrPastEnd. The
// caller holds block's shard lock, which DropFrom takes after lowering
// nblocks: a frame for the block is either in the table when DropFrom
// looks (and dropped), or refused here.
func (p *Pool) pastEnd(block uint32) bool {
	return p.cut.Load() && block >= p.nblocks.Load()
}

// DropFrom lowers NBlocks to n and removes every block at or past n from
// the pool, discarding its contents whether dirty or not, for a relation
// whose tail is about to be cut off (PostgreSQL's DropRelationBuffers
// before smgrtruncate). From then on Get of a block at or past NBlocks
// fails with ErrPastEnd (before any DropFrom it reads a page of zeros),
// and no frame holds one. Pins taken before the call are waited for, up
// to wait in all: if one is still held then, NBlocks is restored, nothing
// is dropped, and ErrBlockPinned is returned. The caller makes sure no
// block at or past n holds anything it needs: the dirty pages dropped
// are never written. Extend and EnsureBlocks wait for it.
func (p *Pool) DropFrom(n uint32, wait time.Duration) error {
	p.extendMu.Lock()
	defer p.extendMu.Unlock()
	old := p.nblocks.Load()
	p.cut.Store(true)
	if n < old {
		p.nblocks.Store(n)
	}
	deadline := time.Now().Add(wait)
	for {
		// Claim every frame past n by pinning it 0 -> 1, as the clock
		// sweep does, so that no sweep takes it while the others are
		// claimed; Get cannot pin them any more (pastEnd).
		var claimed []*Buffer
		busy := false
		for i := range p.shards {
			sh := &p.shards[i]
			sh.mu.Lock()
			for block, id := range sh.table {
				if block < n {
					continue
				}
				f := &p.frames[id]
				if f.io != nil || !f.pins.CompareAndSwap(0, 1) {
					busy = true
					continue
				}
				claimed = append(claimed, f)
			}
			sh.mu.Unlock()
		}
		if !busy {
			for _, f := range claimed {
				sh := p.shard(f.block)
				sh.mu.Lock()
				if id, ok := sh.table[f.block]; ok && id == f.id {
					delete(sh.table, f.block)
				}
				f.tagged = false
				f.state.Store(0)
				sh.mu.Unlock()
				f.unpin()
			}
			return nil
		}
		for _, f := range claimed {
			f.unpin()
		}
		if time.Now().After(deadline) {
			p.nblocks.Store(old)
			return ErrBlockPinned
		}
		time.Sleep(time.Millisecond)
	}
}

// FlushAll writes every page that is dirty when it is reached (flushing the
// WAL to its LSN first, writing a copy taken under the shared lock, in block
// order), then calls Storage.Sync. A page that another goroutine (an
// eviction) is writing counts as dirty until that write has returned:
// FlushAll waits for it, and writes the page again if it changed since the
// copy, so that the Sync covers it. It is what a checkpoint uses; it runs
// concurrently with other users of the pool, and a page dirtied after
// FlushAll passed it is left for the next one. It stops at the first error.
func (p *Pool) FlushAll() error {
	type cand struct {
		block uint32
		id    int32
	}
	var cands []cand
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for block, id := range sh.table {
			if p.frames[id].isDirty() {
				cands = append(cands, cand{block, id})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.block, b.block) })
	for _, c := range cands {
		// Pin as a hit does, and only if the frame still holds the block.
		sh := p.shard(c.block)
		sh.mu.Lock()
		id, ok := sh.table[c.block]
		f := &p.frames[c.id]
		if !ok || id != c.id || f.io != nil {
			sh.mu.Unlock()
			continue
		}
		f.pins.Add(1)
		sh.mu.Unlock()
		err := p.write(f)
		f.unpin()
		if err != nil {
			return err
		}
	}
	return p.st.Sync()
}

// Stats returns the counters accumulated since New.
func (p *Pool) Stats() Stats {
	s := Stats{
		Misses:    p.misses.Load(),
		Reads:     p.reads.Load(),
		Writes:    p.writes.Load(),
		Evictions: p.evictions.Load(),
	}
	for i := range p.shards {
		s.Hits += p.shards[i].hits.Load()
	}
	return s
}

func (b *Buffer) unpin() {
	if b.pins.Add(-1) < 0 {
		panic("bufpool: buffer released more often than pinned")
	}
}

// Release unpins the buffer. It must be called exactly once per Get or
// Extend, without holding the content lock; the Buffer must not be used
// afterwards.
func (b *Buffer) Release() { b.unpin() }

// Lock takes the page content lock exclusively, to modify the page.
func (b *Buffer) Lock() { b.content.Lock() }

// TryLock takes the page's content lock exclusively if no one holds it in
// either mode, and reports whether it did (PostgreSQL's
// ConditionalLockBuffer): for work that must skip a busy page rather than
// wait for it, such as opportunistic pruning.
func (b *Buffer) TryLock() bool { return b.content.TryLock() }

// Unlock releases the exclusive content lock.
func (b *Buffer) Unlock() { b.content.Unlock() }

// RLock takes the page content lock shared, to read the page.
func (b *Buffer) RLock() { b.content.RLock() }

// RUnlock releases the shared content lock.
func (b *Buffer) RUnlock() { b.content.RUnlock() }

// Page returns the frame's PageSize bytes. Valid while pinned; read under
// RLock, write under Lock.
func (b *Buffer) Page() []byte { return b.page }

// Block returns the block number the buffer holds.
func (b *Buffer) Block() uint32 { return b.block }

// MarkDirty records that the page was changed and must be written before
// its frame is reused. The caller holds Lock and has set the page LSN to
// the WAL record describing the change (or the change needs no WAL, as a
// hint bit). Every change, hint bits included, must be made under Lock,
// never RLock: pages are copied for writing under RLock, so a change made
// under RLock could be half in the copy.
func (b *Buffer) MarkDirty() { b.state.Or(bufDirty | bufJustDirtied) }

// Ring is a buffer access strategy for one bulk reader, PostgreSQL's
// BufferAccessStrategy of type BAS_VACUUM: the blocks it reads that are not
// in the pool go into a small ring of frames it reuses, instead of taking a
// fresh victim from the clock sweep for each, so that a scan of a heap
// larger than the pool evicts at most the ring's size of other pages rather
// than the whole working set. Blocks already in the pool are used where
// they are. A ring frame is reused only if nobody pinned it and its usage
// count shows no use since the ring loaded it (PostgreSQL's
// GetBufferFromRing); otherwise the ring takes a frame from the sweep in
// its place. A dirty ring frame is written before reuse, the WAL flushed
// first, as for any eviction.
//
// A Ring is used by one goroutine at a time; the pool stays safe for
// concurrent use by everyone else.
type Ring struct {
	p    *Pool
	ids  []int32 // frames of the ring, at most size
	size int
	next int // slot of ids to try next, once the ring is full

	// Reads counts blocks Get found in no frame and read; Swept the
	// frames taken from the clock sweep (each evicting whatever the
	// frame held, if anything): at most the ring's size when every ring
	// frame could be reused.
	Reads, Swept uint64
}

// NewRing returns a ring of n frames over p (at least 1, at most an eighth
// of the pool, as PostgreSQL caps a strategy ring).
func (p *Pool) NewRing(n int) *Ring {
	n = max(1, min(n, len(p.frames)/8))
	return &Ring{p: p, size: n, ids: make([]int32, 0, n)}
}

// Get is Pool.Get through the ring: a block in the pool is pinned where it
// is; any other is read into a ring frame. Errors as Pool.Get.
func (r *Ring) Get(block uint32) (*Buffer, error) {
	p := r.p
	if f, ok, err := p.pinCached(block); ok {
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	p.misses.Add(1)
	f, err := p.load(block, true, r.victim)
	if err == nil {
		r.Reads++
	}
	return f, err
}

// victim returns a frame pinned (0 -> 1) for the ring's next read: the
// ring's oldest frame if it can be reused, else one from the clock sweep,
// which then takes that frame's place in the ring.
func (r *Ring) victim() (*Buffer, error) {
	p := r.p
	if len(r.ids) == r.size {
		slot := r.next
		r.next = (r.next + 1) % r.size
		f := &p.frames[r.ids[slot]]
		if f.usage.Load() <= 1 && f.pins.CompareAndSwap(0, 1) {
			if f.usage.Load() <= 1 {
				return f, nil
			}
			f.unpin()
		}
		g, err := p.victim()
		if err != nil {
			return nil, err
		}
		r.Swept++
		r.ids[slot] = g.id
		return g, nil
	}
	g, err := p.victim()
	if err != nil {
		return nil, err
	}
	r.Swept++
	r.ids = append(r.ids, g.id)
	return g, nil
}

// CopyBlocks hands blocks 0 to n-1, in order, to write, each copied under
// its shared content lock (so never half changed) into a buffer write may
// keep only until it returns, and read through a ring of ringFrames frames
// (see Ring) so that the copy does not evict the working set: a backup's
// read of a whole relation. A page is copied as it stands in the pool,
// changes whose WAL is not durable yet included; the caller flushes the
// WAL past them before the copy is used. It stops at the first error of
// a read or of write and returns it.
func (p *Pool) CopyBlocks(n uint32, ringFrames int, write func(block uint32, page []byte) error) error {
	r := p.NewRing(ringFrames)
	buf := make([]byte, PageSize)
	for blk := uint32(0); blk < n; blk++ {
		b, err := r.Get(blk)
		if err != nil {
			return err
		}
		b.RLock()
		copy(buf, b.page)
		b.RUnlock()
		b.Release()
		if err := write(blk, buf); err != nil {
			return err
		}
	}
	return nil
}
