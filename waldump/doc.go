// Package waldump prints the WAL of an mvkv data directory, one line per
// record, as PostgreSQL's pg_waldump does. It is what `mvkv waldump` runs,
// and it only reads: it can be pointed at the data directory of a running
// server, at a copy, or at a damaged directory that the engine refuses to
// open.
//
// # Output
//
// Each record is one line. The dump of a new data directory after one
// SET k v through mvkv serve, and a clean shutdown:
//
//	lsn: 0/01000020, type: CHECKPOINT, tx: 0, len: 32, desc: redo 0/01000020; next xid 3; checkpoint id 3f1aaf7345e80bde; system id 11827369558850302326
//	lsn: 0/01000060, type: HEAP_INSERT, tx: 3, len: 40, desc: new (0,0) key "k" (1 bytes) value 1 bytes prev (none) INIT_PAGE
//	lsn: 0/010000A8, type: COMMIT,     tx: 3, len: 8, desc: at 1796278939600909 µs since the epoch
//	lsn: 0/010000D0, type: CHECKPOINT, tx: 0, len: 32, desc: redo 0/010000D0; next xid 4; checkpoint id 16b56082eba630f3; system id 11827369558850302326
//	4 records; the valid log ends at 0/01000110
//
// Each line gives the LSN written as PostgreSQL writes one, the record
// type, the transaction id (0 for records no transaction wrote), the
// payload length in bytes and what the payload says: the heap blocks and tuples a heap record
// touches, a checkpoint's redo point, a full-page image's block. A payload
// that does not decode is described as "malformed" with the reason, and the
// dump goes on. After the records comes one summary line giving their count
// and where the valid log ends (with the length of any torn tail after it).
//
// # Checks
//
// A dump from the oldest record checks two things beyond what reading the
// log checks (record and segment CRCs, LSN continuity): the checkpoint
// record named by the control file must be among the records read, and it
// must carry the control file's system identifier. When it is not there, a
// segment is missing or damaged; when it is another database's, the log (or
// the control file) was copied from elsewhere, even if every record reads
// well. Either way Dump returns an error wrapping wal.ErrCorrupt that names
// the segment file, after printing the records it could read. Without a
// readable control file the dump still runs and says in a note what it
// could not check.
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
