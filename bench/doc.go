// Package bench is mvkv's pgbench: it loads pgbench's four tables into a
// key-value store and runs pgbench's builtin transactions against it from
// many concurrent clients, then reports in pgbench 15's words.
//
// # Why a pgbench clone
//
// The experiments mvkv re-runs (group commit, commit_delay, CLOG contention,
// the crash-safe visibility map) were all argued on pgsql-hackers with
// pgbench numbers. Reproducing their shape needs the same transaction mix,
// the same key distribution and the same report, so results can be read
// side by side with the threads. The same keys, values and transaction
// shapes are used on every target, so the embedded engine and pebble (the
// baseline) do identical logical work.
//
// # Data model
//
// pgbench's tables become key prefixes. Keys are ASCII so that a RESP client
// can read them; numbers are zero-padded to 10 digits so that key order is
// numeric order and a prefix scan visits a table in id order.
//
//	accounts   "a:" + aid (10 digits, 1-based)      100,000 per scale unit
//	tellers    "t:" + tid (10 digits, 1-based)           10 per scale unit
//	branches   "b:" + bid (10 digits, 1-based)            1 per scale unit
//	history    "h:" + run start (20 digits, Unix ns) + "-" + client (5 digits)
//	                + "-" + sequence (10 digits)
//
// The history suffix never collides across runs on one directory: the data
// directory admits one process at a time and each run has its own start time.
//
// Values (little-endian; part of the format; do not change, since loaded
// directories are reused across runs):
//
//	account, 96 bytes (pgbench_accounts: aid, bid, abalance, filler char(84))
//	+--------------------+----------+------------------------------+
//	| balance int64 (8)  | bid (4)  | filler, 84 spaces            |
//	+--------------------+----------+------------------------------+
//
//	teller, 96 bytes (pgbench_tellers: tid, bid, tbalance, filler char(84))
//	+--------------------+----------+------------------------------+
//	| balance int64 (8)  | bid (4)  | filler, 84 spaces            |
//	+--------------------+----------+------------------------------+
//
//	branch, 96 bytes (pgbench_branches: bid, bbalance, filler char(88))
//	+--------------------+-----------------------------------------+
//	| balance int64 (8)  | filler, 88 spaces                       |
//	+--------------------+-----------------------------------------+
//
//	history, 32 bytes (pgbench_history: tid, bid, aid, delta, mtime)
//	+---------+---------+-----------+-------------+----------------+
//	| tid (4) | bid (4) | aid (8)   | delta (8)   | mtime (8)      |
//	+---------+---------+-----------+-------------+----------------+
//	  mtime is Unix microseconds; bid, tid are uint32; aid, delta int64.
//
// A value whose first byte is 0xFF (a balance of 255 or -1, a teller id of
// 511) is stored behind the two bytes 0xFF 0x00, 2 bytes longer, as mvkv's
// server stores such a value itself ("no expiry" header), so that `mvkv
// serve` on a directory the bench wrote reads every row as it is instead
// of taking the value for one with an expiry. A value of the plain size
// starting 0xFF, written before this escape, is read as it is.
//
// A loaded directory's scale is found by counting branches, as pgbench
// counts pgbench_branches; no meta key is stored.
//
// # Transactions
//
// As pgbench's builtin scripts, with aid, tid, bid, delta uniform in
// [1, accounts*scale], [1, 10*scale], [1, scale], [-5000, 5000]:
//
//	TPC-B (sort of): update account += delta; read account; update teller;
//	                 update branch; insert history; commit
//	simple update:   update account; read account; insert history; commit
//	select only:     read account (a read-only transaction)
//
// On the engine each transaction runs at READ COMMITTED; an update is one
// Txn.Update read-modify-write, which re-applies itself to the newest version
// if a concurrent transaction committed first (PostgreSQL's EvalPlanQual).
// On pebble, which has no row locks, a transaction takes striped key locks in
// stripe order, reads through an indexed batch and commits the batch while
// still holding them, so its read-modify-writes are atomic the same way.
//
// Serialization failures and deadlocks are rolled back and counted as failed
// transactions, or, with --max-tries above 1 (pgbench 15's), run again with
// the same random values up to that many tries, and counted as retried;
// the latency of a retried transaction covers all its tries. Any other error
// aborts its client, as pgbench does; the run then ends with ErrAborted after
// the report is printed.
//
// # The invariant
//
// Every transaction that changes an account adds the same delta to a history
// row, and every TPC-B transaction adds it to one teller and one branch too.
// So after any mix of runs on a directory:
//
//	sum(account balances) == sum(history deltas)
//	sum(teller balances)  == sum(branch balances)
//
// and if only TPC-B runs ever touched the directory all four sums are equal.
// Those sums still agree when a commit reported to the client never
// happened, or when one lost its account and history writes together, so
// Main also reads the sums before the run and compares the run's changes
// with what its clients committed: one new history row per commit, the sum
// of the committed deltas on accounts, and the same on tellers for TPC-B
// (nothing for -N). A transaction that ended with an error leaving its
// outcome open (a client aborted, an interrupt cut a commit short) turns
// that comparison off for the run, and the report says so.
// The sums are read after the run in one REPEATABLE READ transaction (one
// pebble iterator snapshot on pebble). A mismatch means a lost or torn update,
// i.e. a bug in the target; Main then returns ErrInvariantViolated. A
// select-only run (-S) writes no balance and skips the check, which reads
// every row: at scale 100 it took nine times as long as the run's thousand
// selects.
//
// # Workers
//
// pgbench's -j threads each multiplex several connections. Here every client
// is its own goroutine (the Go scheduler already spreads them over the
// cores); -j groups clients into workers that share one statistics
// accumulator, as pgbench's threads do, so the hot path takes an uncontended
// lock per worker rather than one global lock.
//
// # Sweeps
//
// The pgsql-hackers threads argue with tables of tps against clients or against a
// knob. A sweep (Config.Sweep, `--sweep NAME=V1,V2`, repeatable for a cross
// product) runs every cell and prints one such table: the knob columns,
// tps (mean and sample standard deviation over --repeat runs), calc, the
// optimum under the disk model (one commit per sync per client: clients x
// rotations per second, or clients / fsync latency), ratio = tps / calc,
// and the WAL syncs per second and commits per sync that explain the ratio.
// Clients vary fastest, so each group of rows reads like one of their tables.
// Data is loaded once per target and every cell reopens the target on it
// with its own knobs, as pgbench runs reuse one initialized database; the
// invariant is checked once per target at the end. A run changes balances
// but not the shape of the data, so cells see the same tables.
//
// # Disk models
//
// Group commit is about what a sync costs, so the threads' results depend on
// their disks (a 7200 rpm drive in 2001, 15k rpm ones since). DiskModel
// puts a simulated disk under the target: on the engine through the vfs
// seam (vfs.WithDiskModel), on pebble through an equivalent wrapper of
// pebble's vfs. Both replace the real sync with a wait for the model's
// completion time, so the same model costs both stores the same per sync
// (and a modelled directory survives a process crash, not a power loss:
// see vfs.WithDiskModel).
// A PostgreSQL server keeps its own disk.
//
// # The PostgreSQL target
//
// "postgres=URL" sends pgbench's scripts to a server as SQL, one statement
// per round trip in the simple query protocol, as pgbench -M simple does,
// through jackc/pgx. The tables are pgbench's own (schema, fillfactor 100,
// primary keys after the load, vacuum analyze), loaded with COPY from the
// same rows Load generates for the key-value targets, so a database set up
// here can be run by the real pgbench and vice versa. -i drops and reloads
// them, as pgbench -i does. Serialization failures and deadlocks (SQLSTATE
// 40001, 40P01) count as failed transactions (or are retried, as above).
//
// # Loading the engine
//
// The engine target loads an empty directory with engine.DB.BulkLoad, the
// engine's COPY FREEZE: one pass over all rows in key order (accounts,
// branches, tellers), frozen heap pages written outside the buffer pool
// and fsynced, one commit record, then the checkpoint that writes the
// index file. A directory that is not empty is loaded in transactions of
// 10,000 rows, as pebble is.
//
// # Rejected
//
// Running the real pgbench against a PostgreSQL wire front end: the engine
// has no SQL, and a front end that parsed only pgbench's five statements
// would measure that parser as much as the store. Go benchmarks (go test
// -bench) for the experiments: they give ns/op of one loop, not tps
// against clients with a report, an invariant check and sweeps over
// knobs and targets. YCSB's workloads: the threads' figures are pgbench's,
// and TPC-B's balances give an invariant that checks every commit, which
// YCSB's reads and blind writes do not.
package bench
