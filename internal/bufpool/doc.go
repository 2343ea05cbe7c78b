// Package bufpool is mvkv's shared buffer pool: a fixed set of 8 KiB frames
// caching heap blocks, shared by every goroutine of the engine, after
// PostgreSQL's bufmgr.c and freelist.c.
//
// # Pinning and content locks
//
// A caller holds a page with two separate things, as in PostgreSQL. A pin
// (Get/Extend ... Release) keeps the frame bound to its block: a pinned
// frame is never chosen as a victim, so Page() stays the same bytes of the
// same block. The content lock (Lock/RLock) orders access to those bytes:
// readers of the page hold it shared, a modifier holds it exclusively,
// changes the page, sets the page LSN to its WAL record and calls MarkDirty
// before unlocking. Pins are cheap and may be held across waits; content
// locks are held only for the short time the bytes are used, and never
// while waiting for another transaction.
//
// # Page table and hits
//
// A block is found through a page table (block -> frame) split into 64
// mutex-guarded shards by a hash of the block number, like PostgreSQL's buffer mapping
// partitions. A hit is one short critical section on one shard (map lookup
// and an atomic pin increment) and an atomic bump of the frame's usage
// count; hits on different blocks rarely touch the same lock, which is
// what 8 to 32 goroutines on a 16384-frame pool need.
//
// # Misses, I/O state and replacement
//
// On a miss the clock sweep picks a victim (PostgreSQL's StrategyGetBuffer):
// the hand moves over the frames, skipping pinned ones and decrementing
// usage counts, and takes the first unpinned frame whose count is zero by
// pinning it with a compare-and-swap from 0 to 1. If the sweep passes every
// frame pinned, Get returns ErrNoFreeBuffer rather than wait. A dirty victim
// is written out first; then, under its shard lock, the frame is removed
// from the table only if nobody pinned or dirtied it meanwhile (otherwise
// the sweep goes on). The free frame is entered in the new block's shard
// with an I/O-in-progress record, the shard lock is dropped, and the read
// runs without any pool lock. A second goroutine wanting the same block
// finds the entry, pins the frame and waits for the read to finish instead
// of reading the block again; if the read fails, the entry is removed and
// every waiter gets the error. No goroutine ever holds two shard locks.
//
// # WAL before data
//
// A page is written only after flushWAL(pageLSN) returned, so the WAL
// describing the page's last change is durable before the page can reach
// its file (DESIGN rule 1; PostgreSQL's FlushBuffer calls XLogFlush the same
// way). A full-page image logged by the first change after a checkpoint
// makes a write torn by a crash harmless (rule 4).
//
// # Why a copy is written
//
// The page is copied under the shared content lock, and the copy is
// checksummed and written with no lock held. A modifier therefore waits
// only for a memcpy, never for the disk, and the bytes written are one consistent version of the page with a
// checksum that matches them (a page changing under a write would otherwise
// be written half old, half new, with a checksum of neither). A change made
// after the copy marks the frame just dirtied, and the dirty flag, which
// stays set until the write has returned, is then left set, so the change
// is written next time (PostgreSQL's BM_DIRTY and BM_JUST_DIRTIED). A
// per-frame write mutex keeps two writers of one frame (eviction and
// FlushAll) from reaching the disk in the wrong order, which could leave an
// older version on disk with the frame marked clean.
//
// # Crash contract
//
// The pool holds no state that must survive a crash: everything dirty in it
// is described by WAL that recovery replays. FlushAll (used by checkpoint)
// writes every page dirty when it gets there, waits for any write of a
// page already in progress (such a page is still dirty), and then syncs
// the storage; once it returns, every change whose WAL lies below the
// checkpoint's redo LSN is durable in the heap files. Write and sync errors are returned, not
// retried; a frame whose write failed stays dirty.
//
// # Rejected
//
// An LRU list, ARC or 2Q (PostgreSQL 8.0's): every hit moves its frame
// in a shared list under that list's lock, so hits on different blocks
// serialize; PostgreSQL 8.1 replaced it with the clock sweep for that
// reason, and a hit here is an atomic increment. One lock for the whole
// page table (PostgreSQL's single BufMappingLock before 8.2): the same
// serialization of hits. Leaving caching to the kernel through mmap or
// the page cache alone: the kernel writes a dirty page back whenever it
// likes, so nothing could keep a page from reaching its file before the
// WAL describing it (rule 1), and eviction could not favour the pages
// used most. Waiting for a frame when every one is pinned: a caller
// holding pins that waits for other pin holders can wait for ever, so
// Get fails instead, as PostgreSQL's "no unpinned buffers available".
package bufpool
