// Package visibility holds snapshots and the tuple visibility rules of mvkv,
// the analog of PostgreSQL's snapmgr.c and heapam_visibility.c
// (HeapTupleSatisfiesMVCC), and the visibility map fork (visibilitymap.c).
//
// A snapshot is the triple (xmin, xmax, xip) that PostgreSQL's GetSnapshotData
// computes from the running-transaction table:
//
//   - every xid below xmin had finished when the snapshot was taken;
//   - every xid at or above xmax had not yet been assigned;
//   - xip lists the xids in [xmin, xmax) that were still running.
//
// The effects of a transaction are visible to a snapshot exactly when its xid
// is not "in progress" for the snapshot and the CLOG says it committed. That
// is safe only because of the commit order the engine keeps, PostgreSQL's:
// a committer sets its CLOG status before it leaves the running table, so
// a snapshot that does not list a finished xid always finds its final status
// in the CLOG. An xid whose CLOG status is still "in progress" but which is no
// longer running belongs to a transaction that crashed; it counts as aborted,
// as in PostgreSQL.
//
// Tuple versions of a key form a chain from newest to oldest. A reader walks
// the chain and returns the first version whose xmin is visible; that version
// is the answer unless its xmax is visible too, in which case the key was
// deleted as far as the snapshot is concerned. The walk is correct because
// versions are chained in the order their writers held the key's row lock, so
// a newer version's writer always began its write after the older version's
// writer had ended.
//
// Hint bits (the tuple infomask bits that cache a CLOG answer) and the
// visibility map fork build on these rules.
//
// # The visibility map
//
// Map is the visibility map fork, PostgreSQL's visibilitymap.c: two bits
// per heap block, AllVisible (every tuple on the page is visible to every
// snapshot, present and future) and AllFrozen (every tuple is also frozen,
// so nothing on the page needs the CLOG). Vacuum uses the bits to skip
// pages; index-only reads use AllVisible to answer "does this key exist"
// without reading the heap tuple or asking the CLOG.
//
// The fork lives in DATA/vm, in segment files of 8 KiB pages named and
// laid out as the heap's (block b of the map is at byte
// (b%131072)*8192 of file fmt.Sprintf("%08d", b/131072)). A map page is a
// heap page with no line pointers whose free space holds the bitmap, as
// PostgreSQL keeps the map in PageGetContents of an otherwise empty page.
// Part of the format; do not change:
//
//	offset  size  field
//	     0     8  lsn       end LSN of the last WAL record that set a bit on the page
//	     8     4  checksum  CRC-32C as on heap pages, block number mixed in
//	    12     2  flags     0
//	    14     2  lower     24
//	    16     2  upper     8192
//	    18     2  version   1
//	    20     4  reserved  0
//	    24  8168  bitmap    2 bits per heap block, 4 heap blocks per byte
//
//	+-----+-----+-----+-----+-----+---+----+--------------------------------+
//	| lsn | crc |flags|lower|upper|ver|rsvd| bitmap: 32672 heap blocks      |
//	+-----+-----+-----+-----+-----+---+----+--------------------------------+
//	0     8     12    14    16    18  20   24                            8192
//
// Heap block h is covered by map page h/32672; its bits are at byte
// 24+(h%32672)/4, shifted left by 2*(h%4): bit 0 AllVisible, bit 1
// AllFrozen. One map page covers about 255 MiB of heap. A map page that was
// never written reads as zeros: no bits set, which is always safe.
//
// One map file covers about 32 TiB of heap, so every heap the engine can
// hold has its map in the first two files, and a file past the pages the
// heap needs was put there by something else: nothing reads it (the map
// is asked only about heap blocks that exist), and Map.StrayFiles names
// it for verification, as a stranger in the WAL directory is named.
//
// # Crash safety
//
// The invariant, as in PostgreSQL: after any crash, a set bit still
// means all-visible. The engine keeps it with the map's help:
//
//	set (vacuum, heap page locked exclusively, every tuple checked):
//	    full-page image of the heap page if first change since redo point
//	    PD_ALL_VISIBLE on the heap page
//	    lsn := WAL insert HEAP2_VISIBLE(block, bits, cutoff xid)
//	    heap page LSN := lsn
//	    Map.Set(block, bits, lsn)      map page LSN := lsn
//
//	clear (every insert, update, delete; heap page locked exclusively):
//	    if PD_ALL_VISIBLE on the page:
//	        Map.Clear(block)           no LSN change
//	        clear PD_ALL_VISIBLE; the change's record carries a flag
//
//	redo:
//	    HEAP2_VISIBLE: PD_ALL_VISIBLE if heap page LSN < lsn;
//	                   Map.Set(block, bits, lsn), a no-op if map page LSN >= lsn
//	    heap record with the flag: Map.Clear(block) whatever the page LSNs
//
// A map page is written only after the WAL is flushed to its LSN, so a set
// bit on disk implies a durable HEAP2_VISIBLE record, which lies after the
// commit records of the tuples it vouches for; redo of that record sets
// PD_ALL_VISIBLE again, and redo of any later change clears the bit again.
// A clear needs no LSN: a clear bit is never wrong, only slower.
//
// For the same reason a map page that fails its checksum or header check
// when read into the cache (a torn write, since map pages carry no
// full-page image; or damage) is taken as a page with no bit set and
// reported, as PostgreSQL reads map pages with RBM_ZERO_ON_ERROR; redo and
// vacuum set its bits again. Rejected: failing the read, which stops every
// change to the heap the page covers, while the page holds nothing that
// cannot be rebuilt from the heap.
//
// What no crash can do, a copy can: a map file restored from an older copy
// of the directory passes every check and may say all-visible for heap
// pages that changed since. Distrust makes Test report no bits for a range
// of heap blocks while the engine compares each stored bit (TestStored)
// with its heap page's PD_ALL_VISIBLE after opening, and Trust ends it
// block by block as the comparison moves on.
//
// Rejected alternative, kept as Options.Unlogged for the experiment:
// setting bits without a WAL record and writing map pages without the
// interlock, as PostgreSQL 8.4 to 9.1 did. A map page can then reach disk
// before the commits its bit relies on, or without the heap page's
// PD_ALL_VISIBLE; and since a change clears the bit only when it sees
// PD_ALL_VISIBLE (checking the map on every change would cost a map lookup
// per write), such a bit is never cleared. Index-only scans could not be
// built on that, which is why 9.2 made the map crash-safe; the engine's
// crash tests show the unlogged map recovering with wrong bits at many
// crash points of a small workload, and the crash-safe one at none.
//
// # Concurrency
//
// Map pages are cached in a buffer pool of their own; a bit changes under the
// map page's exclusive content lock and is read under its shared one, and
// callers hold the heap page's lock around Set and Clear, so the lock
// order is always heap page, then map page. Reader lets an index-only scan
// reuse a set bit for consecutive keys on one heap page without a lookup,
// for as long as no Clear has run anywhere in the map.
package visibility
