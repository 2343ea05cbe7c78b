// Package heap is the on-disk format of mvkv's heap relation: slotted 8 KiB
// pages holding tuple versions with xmin/xmax, and the storage manager that
// reads and writes those pages in 1 GiB segment files. It follows
// PostgreSQL's bufpage.h / htup_details.h / md.c, reduced to a key-value
// store. It knows nothing of transactions or the WAL: callers decide what to
// put on a page, log it, and set the page LSN.
//
// # Page layout
//
// All integers are little-endian. This layout is part of the format; do not
// change it.
//
//	offset  size  field
//	     0     8  lsn       LSN of the last WAL record that changed the page (pd_lsn)
//	     8     4  checksum  CRC-32C of the page with this field as zero, then of the
//	                        block number as 4 bytes (pd_checksum)
//	    12     2  flags     PDAllVisible 0x0001, PDHasFreeLines 0x0002,
//	                        PDHasHoles 0x0004 (pd_flags)
//	    14     2  lower     end of the line pointer array = 24 + 4*NumSlots (pd_lower)
//	    16     2  upper     start of tuple storage, multiple of 8 (pd_upper)
//	    18     2  version   page layout version, 1
//	    20     4  prune xid low 32 bits of the oldest xid that set an xmax since the
//	                        page was last pruned, 0 for none (pd_prune_xid)
//	    24   4*n  line pointers, slot 0 first
//	 lower        free space (zero bytes)
//	 upper        tuples, growing down from the end of the page, each starting
//	              at a multiple of 8 and padded with zeros to one
//	  8192        end of page
//
//	+--------+------+-----+-----+-----+---+----+-------+-----+ ... +--------+---------+
//	|  lsn   | crc  |flags|lower|upper|ver|prun| lp[0] |lp[1]| ... |  free  | tuples  |
//	+--------+------+-----+-----+-----+---+----+-------+-----+ ... +--------+---------+
//	0        8      12    14    16    18  20   24      28          lower    upper  8192
//
// A line pointer (ItemIdData) is 4 bytes:
//
//	offset  size  field
//	     0     2  off       byte offset of the tuple in the page; 0 unless state is normal
//	     2     2  bits 0-13: length of the tuple in bytes (not padded); 0 unless normal
//	              bits 14-15: state: 0 unused, 1 normal, 3 dead (2 is invalid)
//
// A page of all zeros is a new page (never initialized); it is valid on disk
// and is formatted with InitPage before use. An initialized page has
// lower >= 24, lower <= upper <= 8192, and every normal line pointer points
// inside [upper, 8192) without overlapping another; VerifyPage checks this
// together with the checksum, so code reading a verified page may trust it.
//
// # Tuple layout
//
// A tuple is a 32-byte header, the key, then the value. This layout is part
// of the format; do not change it.
//
//	offset  size  field
//	     0     8  xmin       inserting transaction id (0 invalid)
//	     8     8  xmax       deleting or updating transaction id (0 invalid)
//	    16     4  prev.block older version of the same key: block...
//	    20     2  prev.slot  ...and slot; 0xFFFFFFFF/0xFFFF (InvalidTID) for none
//	    22     2  infomask   XminCommitted 0x01, XminInvalid 0x02, XmaxCommitted 0x04,
//	                         XmaxInvalid 0x08, Frozen 0x10, External 0x20, Chunk 0x40,
//	                         Updated 0x80
//	    24     2  keylen     key length in bytes
//	    26     2  reserved   zero
//	    28     4  vallen     value length in bytes
//	    32  keylen  key
//	     .  vallen  value (for External: the engine's pointer to the Chunk tuples)
//
// The tuple's line pointer length is exactly 32+keylen+vallen; DecodeTuple
// rejects anything else. xmax, infomask and prev are updated in place
// (SetTupleXmax, SetTupleInfomask, SetTuplePrev) under the page's exclusive
// content lock; nothing else in a stored tuple changes.
//
// # Invariants and redo
//
// Slot numbers are stable for the life of a tuple: Prune compacts storage
// but keeps slots, because TIDs (index entries, Prev chains) name slots, not
// offsets. A dead slot is never reused; an unused one is, lowest first.
// AddTuple's choice of slot and of storage offset depends only on the
// page's bytes, so replaying an insert with PutTupleAt at the logged slot on
// the same page produces the same bytes, and Prune with the logged slot lists
// likewise; redo of a page is therefore deterministic (DESIGN rule 8).
//
// The checksum is not maintained in memory: the buffer pool writes a copy of
// the page and Storage.WriteBlock stamps the copy. It includes the block
// number, so a page written to the wrong place is detected on read.
//
// # Storage and crash contract
//
// Block b lives in segment file fmt.Sprintf("%08d", b/131072) at byte offset
// (b%131072)*8192, as PostgreSQL's md.c splits a relation into 1 GiB files.
// A block not yet written reads as zeros; a block the file held when it was
// opened, or that was written since, is an error if the file no longer
// holds it (cut short while open), and so, once the engine has replaced the
// pages of zeros a crash can leave (SetNoZeros), is any page of zeros
// inside a file. A write past the end fills the
// blocks it skips, so a segment before the last one holding data is 1 GiB;
// only a crash can leave one shorter (the operating system kept a write
// into a later segment and lost the earlier one's last, unsynced pages),
// and Layout reports it for the engine to judge at open: lost data if the
// last checkpoint wrote a block in the missing part, another copy's file
// after a clean shutdown, filled with empty pages (FillSegment) after a
// crash. WriteBlock makes no promise until Sync; creating a segment file
// fsyncs the directory at once.
// The caller (the buffer pool) guarantees the WAL up to the page LSN is
// durable before a page is written (DESIGN rule 1). A page torn by a crash
// fails its checksum and is rebuilt from the full-page image that the first
// change after each checkpoint logs (rule 4). After an fsync failure Sync
// keeps failing (rule 6).
//
// # Rejected
//
// PostgreSQL's redirect line pointers (state 2 is invalid here) and dead
// stubs left behind pruned versions (the engine prunes slots straight to
// unused): PostgreSQL's indexes point at a chain's root, the engine's
// index at a key's newest version, so nothing needs the old end of a chain
// kept reachable, and a stub would cost a slot per key until vacuum. Prev
// links running oldest to newest: every read would walk the whole chain to
// reach the newest version. Row locks in the tuple header: they live in
// the engine's memory, one per key, so xmax is only ever a deleter or
// updater. 32-bit xids: xmin and xmax are 64 bits, like PostgreSQL's
// FullTransactionId, so there is no wraparound and no emergency freezing.
package heap
