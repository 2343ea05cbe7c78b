// Package visibility holds snapshots and the tuple visibility rules of mvkv,
// the analog of PostgreSQL's snapmgr.c and heapam_visibility.c
// (HeapTupleSatisfiesMVCC).
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
// is safe only because of the commit order the engine keeps (docs/DESIGN.md rule
// 2): a committer sets its CLOG status before it leaves the running table, so
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
package visibility
