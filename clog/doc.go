// Package clog is the commit log: the status of every transaction, two bits
// per 64-bit xid, in 8 KiB pages cached in an SLRU buffer pool, as
// PostgreSQL's clog.c (pg_xact) over slru.c.
//
// # Statuses
//
// A status is in progress (0), committed (1), aborted (2) or sub-committed
// (3). Zero is in progress so that a page never written, a hole in a file, or
// a missing segment all mean "nobody has decided yet". When the first xid of
// a page is assigned, Extend starts the page as zeros in the buffers without
// reading the file, as PostgreSQL's ExtendCLOG, so that bytes left where no
// xid has been yet (a page appended by mistake, a stray write) are replaced
// rather than read as damage thousands of commits later. Nothing is logged
// for it (PostgreSQL logs CLOG_ZEROPAGE): with checksummed all-zero pages
// defined as valid, a page that is absent, short or zero needs no redo, and
// after a crash a damaged page whose xids all lie at or above the redo
// point's next xid is rebuilt by redo anyway (Crash contract).
// xids are 64-bit (FullTransactionId) and never wrap, so the page of an xid
// is simply xid / XidsPerPage.
//
// # On-disk format
//
// The CLOG lives in DATA/clog as segment files of 32 pages (256 KiB), with
// the truncation point in DATA/clog/oldest_xid (see Truncation). A
// segment is named by its number in 12 upper-case hex digits: segment s holds
// pages 32s .. 32s+31, page p at byte offset (p mod 32) * 8192 of file
// s = p / 32, and page p holds xids p*32704 .. p*32704+32703. Files may be
// short or absent; whatever lies beyond the end of a file reads as zeros.
//
// A page, part of the format; do not change:
//
//	 0       4                       12    13          16                       8192
//	+-------+-----------------------+-----+-----------+--------- ... ----------+
//	| CRC   | page number           | ver | reserved  | status bits            |
//	+-------+-----------------------+-----+-----------+--------- ... ----------+
//	  uint32  uint64                  = 1   zero        8176 bytes, 32704 xids
//
//	CRC          CRC-32C (Castagnoli), little-endian, of bytes 4..8191.
//	page number  little-endian; the page's own number, so a page written at
//	             the wrong offset or left over from another file is caught.
//	ver          format version, 1.
//	reserved     three zero bytes.
//	status bits  xid x of the page is byte 16 + (x mod 32704)/4, bits
//	             2*(x mod 4) and 2*(x mod 4)+1: the lowest xid of a byte takes
//	             its two lowest bits, as in PostgreSQL.
//
// A page whose 8192 bytes are all zero is valid and means every xid on it is
// in progress; every other page must match its CRC, page number, version and
// reserved bytes, or reading it fails with an error wrapping ErrCorrupt that
// names the file and byte offset.
//
// # Buffers and locking
//
// Pages are cached in Options.Buffers slots (a multiple of 16) split into
// banks of BankSize = 16 slots, as PostgreSQL 17's SLRU banks; page p lives
// only in bank p mod nbanks, so a lookup searches 16 slots and the LRU clock
// and victim choice are per bank. Under Locking "bank" each bank has its own
// lock; under "global" all banks share one, as PostgreSQL's CLogControlLock
// before version 17. No code path ever holds two bank locks, so the two
// differ only in which calls contend.
//
//	Status(xid):    bank.RLock; hit -> read bits, RUnlock
//	                miss -> RUnlock; bank.Lock; load (below); read bits
//	SetStatus(xid): bank.Lock; load if missing; set bits, dirty,
//	                group LSN = max(group LSN, lsn)
//	  GroupUpdate:  bank.TryLock; on success as above. Otherwise push a
//	                member onto the group list (CAS). Member: sleep on its channel;
//	                if the leader did not set it, take the plain path.
//	                Leader (found the list empty): bank.Lock; Swap(nil)
//	                takes the whole list; set each member resident in a
//	                bank under this same lock (its own page loaded if need
//	                be); Unlock; wake the members.
//	load(page):     if the page is in a slot being read -> wait for that read
//	                victim = empty slot, else LRU valid slot not in I/O and
//	                  not the latest page
//	                dirty victim -> write it (below), then start over
//	                claim victim as "reading" in the index, Unlock, read and
//	                  check the page, Lock, mark valid, Broadcast
//	write(slot):    mark "writing", copy the image, Unlock,
//	                FlushWAL(group LSN) unless already flushed that far,
//	                stamp header and CRC on the copy, WriteAt, Lock,
//	                clear "writing", Broadcast
//
// No lock is held across I/O or FlushWAL. A slot being read is in the index,
// so a second goroutine missing the same page waits for the first one's read
// instead of loading the page into a second slot. A slot being written stays
// readable and settable; the write carries a copy taken under the lock, so
// its CRC always matches its bits, and a change made during the write
// re-dirties the slot for the next one. The page holding the newest xids is
// never evicted, so committers do not read back the page they keep writing.
//
// # Invariants
//
//  1. WAL before data: a page image reaches its file only after FlushWAL
//     returned for an LSN at or above every lsn passed to SetStatus for the
//     bits in that image (the slot's page LSN, the largest of its group
//     LSNs).
//  2. StatusLSN returns, with a committed status, an LSN at or above the
//     commit record's of that xid, unless the page came from disk (then 0:
//     the WAL behind it was durable before the page was written). Group
//     LSNs are kept per 32 xids, as PostgreSQL's CLOG_XACTS_PER_LSN_GROUP,
//     for the hint-bit interlock of asynchronous commit.
//  3. A page is in at most one slot.
//  4. A status set by SetStatus is seen by every Status that starts after
//     SetStatus returns.
//
// # Crash contract
//
// Checkpoint makes every status set before it durable: it writes every dirty
// page, waits for writes in progress, and fsyncs every segment file written
// since the previous Checkpoint. A new segment file's directory entry is
// synced when the file is created, before any page is written into it. After
// a crash, statuses set after the last Checkpoint may be lost, and a page
// written after it may be torn; WAL redo from the checkpoint's redo point
// sets them again (after-images, so replaying twice is harmless).
//
// A checksum cannot tell a torn write from any other damage (a flipped bit,
// a stray write), and the two call for different answers: redo repairs a
// tear only in the statuses it replays, those decided after the redo point,
// while the other statuses of a damaged page are simply wrong. So a page
// failing its checksum is treated by what could have happened to it:
//
//   - A page none of whose xids wrote to the WAL after the last
//     checkpoint's redo point (every page after a clean shutdown, and
//     after a crash every page but those of the transactions since the
//     checkpoint): it was not written after the checkpoint made it
//     durable, since a status is set only after its transaction's record,
//     so it cannot be torn. The engine checks every page from the
//     truncation point up to the checkpoint's next xid with
//     CheckWritten(next, mayBeTorn) at Open, before redo, and refuses to
//     open on any such page that fails its checksum, naming the file,
//     offset, page and xids.
//   - A page holding only xids at or above the checkpoint's next xid
//     (Options.RedoXid, read after the redo point was chosen, so every such
//     xid was handed out and decided after that point): under
//     Options.Recovery it is rebuilt from nothing, its bits discarded; redo
//     sets every status the WAL decided, recovery marks the xids it saw
//     without an end as aborted, and an xid with no record at all wrote
//     nothing to the heap (WAL before data), so its "in progress" is right.
//   - Any other page, one holding an xid that wrote to the WAL after the
//     redo point: it may have been written again after the checkpoint and
//     torn by the crash, so under Options.Recovery it is accepted as torn, its
//     bits kept (each sector holds its old or new bits; redo sets the new
//     ones again), logged, and rewritten whole at the next Checkpoint.
//
// The engine then compares every status on a page taken for torn with the
// commit and abort records its WAL still holds (TornPages): a tear keeps
// every status decided before the checkpoint, so a disagreement is damage,
// and the page is refused; so is one on which an xid below the next xid
// reads sub-committed, a status no write stores and so no tear leaves,
// whether or not the WAL still holds its record. A page cut short by the
// end of its file is never a tear (CheckWritten). The gap left: other
// damage, coinciding with a crash, to statuses whose records the WAL no
// longer holds is taken for a tear (a committed xid flipped to in progress
// or aborted reads so). Rejected: refusing every such page, which turns a
// real tear of the page being filled at a checkpoint into a database that
// does not open; telling a tear from a flip by when the page was last written,
// which the page does not record. Logging an image of the pages that can
// still change (from the oldest running xid's page to the next xid's) with
// each checkpoint, as a base for redo, as PostgreSQL's full-page images do
// for heap pages, would close it; it is a WAL format change not made yet.
//
// A failed page write or fsync is not retried: the CLOG records the error,
// writes nothing more, and every later Checkpoint returns it; the engine must
// stop taking writes and redo from its last checkpoint on reopen. Status
// reads of cached pages continue.
//
// Group update (PostgreSQL 11's TransactionGroupUpdateXidStatus) gives
// exactly the statuses the plain path gives: each member's bits are set
// under the lock of the bank holding its page, as the plain path sets them;
// only the number of lock acquisitions changes. A member the leader cannot
// serve without I/O or a second lock (page not resident, or in a bank under
// another lock) is woken unserved and takes the plain path. Members are
// allocated per call and never reused, so the CAS list has no ABA problem.
//
// # Truncation
//
// Truncate(oldestXid), as PostgreSQL's TruncateCLOG over SimpleLruTruncate,
// removes every segment file entirely below the segment holding oldestXid,
// so the CLOG stays bounded however many transactions run. The caller
// (vacuum, through the engine) promises that no xid below oldestXid will be
// looked up again: every tuple carrying one is frozen or hinted. The engine
// logs and flushes a CLOG_TRUNCATE record first and redo calls Truncate
// again.
//
//	Truncate(x):  if x > oldest: write oldest_xid (temp file, fsync,
//	                rename, fsync dir); oldest = x
//	              cut = segment of x, lowered to that of the latest page
//	              each bank: Lock; wait out reads and writes of pages below
//	                the cut; empty their slots (dirty ones unwritten); Unlock
//	              close their open files; remove their files, oldest
//	                first; fsync dir
//
// From the moment the point is published, Status and SetStatus of an xid
// below it fail with ErrTruncated, and no load of a page wholly below it
// starts (checked under the bank lock, so a lookup racing Truncate cannot
// bring a doomed page back). Redo of a commit older than a completed
// truncation is skipped instead (in recovery only), as PostgreSQL's SLRU
// reads truncated pages as zeros there. The point is kept in its own file
// because the oldest segment present is not evidence of it: a segment is
// written only when a page of it is checkpointed or evicted, so a young
// database can have segment 2 on disk while segment 0's pages are still
// only in buffers.
//
// The truncation point file, DATA/clog/oldest_xid, part of the format; do
// not change:
//
//	 0       4                       12    13          16
//	+-------+-----------------------+-----+-----------+
//	| CRC   | oldest xid            | ver | reserved  |
//	+-------+-----------------------+-----+-----------+
//	  uint32  uint64                  = 1   zero
//
//	CRC         CRC-32C of bytes 4..15, little-endian.
//	oldest xid  little-endian; Status of any xid below it is ErrTruncated.
//
// A missing file means the CLOG was never truncated; a damaged one is an
// ErrCorrupt error at Open naming the file. A crash at any step of Truncate
// leaves the old point or the new one, and either no files removed or some
// of them: never a needed page gone, and repeating Truncate finishes it.
//
// # Sizing
//
// The engine sizes the pool as PostgreSQL 17 sizes transaction_buffers
// when it is 0: AutotuneBuffers gives shared_buffers/512 slots, a multiple
// of 16 from 16 to 1024 (32 for 128 MiB).
package clog
