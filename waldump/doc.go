// Package waldump prints the WAL of an mvkv data directory, one line per
// record, as PostgreSQL's pg_waldump does. It is what `mvkv waldump` runs,
// and it only reads: it can be pointed at the data directory of a running
// server, at a copy, or at a damaged directory that the engine refuses to
// open.
//
// # Output
//
// Each record is one line:
//
//	lsn: 0/01000028, type: HEAP_INSERT, tx: 5, len: 58, desc: new (0,1) key "k" (1 bytes) value 1 bytes prev (4294967295,65535)
//
// with the LSN written as PostgreSQL writes one, the record type, the
// transaction id (0 for records no transaction wrote), the payload length in
// bytes and what the payload says: the heap blocks and tuples a heap record
// touches, a checkpoint's redo point, a full-page image's block. A payload
// that does not decode is described as "malformed" with the reason, and the
// dump goes on. After the records comes one summary line giving their count
// and where the valid log ends (with the length of any torn tail after it).
//
// # Checks
//
// A dump from the oldest record checks one thing beyond what reading the
// log checks (record and segment CRCs, LSN continuity): the checkpoint
// record named by the control file must be among the records read. When it
// is not, a segment is missing or damaged, and Dump returns an error
// wrapping wal.ErrCorrupt that names the segment file, after printing the
// records it could read. Without a readable control file the dump still
// runs and says in a note what it could not check.
//
// # Design
//
// The engine alone knows its record types and payload formats; this package
// drives the reading and the checks, and asks the engine for each record's
// description through an internal table, as pg_waldump calls each resource
// manager's rm_desc routine. Rejected: keeping the dump in package engine
// (a tool in the embedded user API, whose users never need it) and decoding
// the payloads here (a second copy of every record format, free to drift
// from the one redo uses).
package waldump
