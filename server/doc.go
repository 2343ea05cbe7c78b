// Package server serves an engine.DB over the Redis protocol (RESP2), so that
// redis-cli, redis-benchmark and Redis client libraries work against mvkv
// unchanged:
//
//	db, _ := engine.Open(dir, engine.Options{})
//	srv := server.New(db, server.Config{})
//	go srv.Serve(ctx, ln)          // ln: a loopback net.Listener
//	...
//	srv.Shutdown(ctx)              // then db.Close()
//
// # Commands and transactions
//
// Values are Redis strings; every key command outside MULTI is one engine
// transaction, and a command that answers with an error rolls its
// transaction back, so a multi-key write is all or nothing. INCR/INCRBY/
// DECR/DECRBY, SET NX/XX/GET and the other commands that read a key they
// write are read-modify-writes through Txn.Update, so concurrent
// increments are never lost (the engine re-applies the function to the
// newest version after waiting for the row lock, as PostgreSQL's
// EvalPlanQual).
//
// An EXEC block is one engine transaction with one commit record and one
// durability wait. Writes take row locks held until the single commit, so
// Redis's guarantee that no other client runs in the middle of EXEC
// becomes: nobody writes a key the block wrote until it commits, nobody
// sees any of its writes before, and all its reads see one moment.
//
// # Isolation
//
// Nothing a client reads mixes two commits: every command reads from one
// snapshot, and an EXEC block is one snapshot for all its reads and
// writes. Which isolation level each runs at, and why:
//
//   - A command that reads one key only, or writes keys and reads nothing
//     but those keys under their row locks (GET, TTL, SET, INCR, APPEND,
//     SETRANGE, GETDEL, the EXPIRE family, MSET, DEL, UNLINK, FLUSHALL,
//     ...), runs at READ COMMITTED. A single read is one snapshot
//     anyway; a write reads each key it writes under the key's row lock,
//     held until commit, so what it reads is the newest committed version
//     and stays so until it commits (two-phase locking): the command is
//     as if it ran alone at its commit. READ COMMITTED is what lets a
//     write of a hot key wait for the lock and then apply to the newest
//     version instead of failing with a serialization failure.
//   - A command that reads several keys, or reads keys it does not write
//     (MGET, EXISTS, SCAN's page, DBSIZE, KEYS, RANDOMKEY, LCS, MSETNX,
//     COPY, RENAME, RENAMENX, BITOP), runs at REPEATABLE READ: all its
//     reads see one snapshot. A write among them first locks every key
//     it names, in key order, with Txn.Lock, which takes no snapshot; the
//     snapshot is taken at the first read, after the locks were granted,
//     so it holds every committed version of those keys, nobody can
//     commit a newer one until the command commits, and its writes cannot
//     fail with a serialization failure.
//   - An EXEC block runs at REPEATABLE READ the same way: it locks its
//     watched keys and every key its commands write, in key order, then
//     runs its commands, whose reads and writes all see the snapshot
//     taken after those locks (and the block's own earlier writes). So a
//     block that reads two keys another block writes together sees both
//     writes or neither, as with Redis's EXEC, which no other client
//     interleaves with. A block holding FLUSHALL or FLUSHDB also locks
//     every stored key first; a key that became visible between that
//     listing and the snapshot can still make it fail with a
//     serialization failure, which reruns it (below).
//
// What remains weaker than Redis's serial execution is snapshot
// isolation's: a block that reads keys it does not write sees them as of
// its snapshot, and another client may commit new versions of them
// before the block commits (write skew). A client that needs the keys it
// read unchanged at EXEC uses WATCH, which is exact, or writes them in
// the block, which locks them.
//
// Errors follow Redis: queue-time errors (unknown command, wrong number of
// arguments) answer EXEC with EXECABORT; run-time errors (INCR of a
// non-integer, a syntax error) become error elements of EXEC's array and
// the other commands still apply, as in Redis. Every transaction that
// holds more than one row lock takes them in key order: MSET and DEL write
// their keys sorted (MSET's last value for a repeated key is the only one
// written); an EXEC block locks its watched keys and the keys it writes,
// sorted, before its first command; and
// WATCH holds one lock at a time. So clients naming the same keys in
// different orders queue behind each other and cannot deadlock. What can
// still deadlock is an embedding program's transaction, or FLUSHALL inside
// a block, which locks every key and may meet one that became visible
// after the block took its locks. A deadlock or serialization failure
// reruns the whole block (or single command) after a short random wait, up
// to Config.MaxRetries times; nothing has been replied yet, so this is
// invisible. INFO's deadlocks field counts them. Any other engine failure
// rolls the block back and answers EXEC with the error.
//
// # WATCH
//
// EXEC fails with a null array when any transaction committed a version of
// a watched key after the WATCH, whatever the value and whoever (any
// connection, including the watcher's own) wrote it. A write that rolled
// back (a lock timeout, a deadlock, an error, a client gone) does not
// count: Redis never sees such a write. FLUSHALL and FLUSHDB count only
// for watched keys that existed, as Redis 7's touchAllWatchedKeysInDb. The engine exposes no
// per-key version, so the server keeps one, as Redis keeps
// db->watched_keys: a table of watched keys with a counter each, bumped by
// every write of the key through this server. The protocol that makes it
// exact:
//
//   - a writer bumps the counter after its write and before its commit,
//     while it holds the key's row lock; if it rolls back, it puts the
//     counter back before its locks are released;
//   - WATCH registers the key, then takes and drops the key's row lock (in
//     a transaction that is rolled back), and records the counter while
//     it holds the lock: a writer that checked for watchers before the
//     registration still holds the lock, so WATCH returns only after that
//     writer ended, and the client's reads after WATCH see its value;
//   - EXEC first takes the row locks of all watched keys (in key order),
//     inside its own transaction, and only then compares the counters:
//     no writer can be between its bump and its commit, and none can
//     start until EXEC commits.
//
// Writes made directly through the engine by an embedding program bypass
// the table and are not seen by WATCH. WATCH of a key that has never
// existed leaves an index entry for it in the engine.
//
// # Durability and pipelining
//
// With synchronous_commit on (the default), every write transaction, a
// single command or an EXEC block, commits synchronously, exactly as an
// embedding program's would (docs/DESIGN.md, rule 2). With early lock
// release on (the default; `mvkv serve --early-lock-release`, CONFIG SET
// early_lock_release), Commit appends the commit record, marks the
// transaction committed, releases its row locks and then waits until the
// WAL is durable past the record; a command that read or overwrote such a
// write (a GET, an INCR, an error reply such as "value is not an integer")
// has its reply held until the WAL is durable past that write too. So no
// reply acknowledges a write, and no reply shows a write to any client,
// before its commit record is durable; a crash loses no write anyone has
// seen. Meanwhile the row locks are free: writers of one hot key (as
// redis-benchmark without -r) each take the lock at once, and their
// commits share WAL flushes. With early lock release off, PostgreSQL's
// order: the transaction holds its row locks, invisible, until its commit
// record is durable, so writers of one hot key queue behind each other and
// that key takes about one commit per WAL flush (per fsync). A read-only
// command writes no commit record and waits only for writes it could have
// seen that are not yet durable. Writers of different keys never wait for
// each other: their commits share flushes through the engine's group
// commit, so throughput grows with the number of clients.
//
// A pipeline shares flushes too. While more requests of the connection
// are already read (buffered), a write that reads nothing but the keys it
// locks (SET, DEL, INCR/DECR and their BY forms, MSET, the EXPIRE family,
// PERSIST, and an EXEC block of only those that watches nothing) commits
// with engine.Txn.CommitAsync:
// its commit record is appended, and the rest of its commit (the flush
// wait, the CLOG, the running table, the row locks) completes on its own,
// after the connection's earlier commits, while the connection goes on to
// the next request. Its reply waits in the connection's buffer. Before
// the replies are written (when the reader must wait for the socket, or
// 64 KiB have collected, or 128 commits are pending), the connection waits
// for every pending commit, and one whose commit failed has its reply
// replaced by the error. So a
// pipeline of writes to different keys takes about one flush, not one
// each, and still no reply and no visibility precedes durability. Any
// other command (a read, WATCH, an EXEC that reads, CONFIG, ...) first
// waits for the pending commits, so it sees the connection's own writes.
// With early lock release on, a pending write has released its row locks
// already, so a pipeline of writes to one key shares one flush; with it
// off, a write of a key an earlier pending write holds waits for that
// commit (its row lock), and such a pipeline takes one flush per write.
//
// With synchronous_commit off (Config.SynchronousCommit, `mvkv serve
// --synchronous-commit off`, or CONFIG SET synchronous_commit off), writes
// commit asynchronously as the engine defines it: Commit returns, and the
// write is visible and acknowledged, once the commit record is in the WAL
// buffer; the WAL writer makes it durable within about three
// wal_writer_delay. A reply then does not mean the write is durable: a
// crash may lose the last acknowledged writes, but only whole
// transactions, never part of one, and never a write that a later
// synchronous commit's flush covered.
//
// # One goroutine per connection
//
// Each connection is served by its own goroutine, blocking in the request
// reader and in its commit's durability wait. A command that waits for a
// row lock (another client's commit, an embedding program's transaction, a
// lock timeout) holds up only its own connection.
//
// Rejected: an event loop in Redis's shape, reading every ready socket,
// running their commands with CommitAsync, waiting once for one flush and
// writing every reply. A prototype of it over the engine gained 15% at 32
// clients and used 19 µs of CPU a request against 25 (docs/BENCHMARKS.md,
// "Would another I/O structure close the 32-client gap?"). The rest of the
// cost is the loopback socket write, which costs Redis the same, and the
// durable MVCC write itself, which no loop changes. And a loop stalls every
// connection it serves while one command waits for a row lock.
//
// # Expiry
//
// SET EX/PX/EXAT/PXAT/KEEPTTL, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with
// NX, XX, GT, LT), PERSIST, TTL and PTTL work as in Redis. A key's deadline
// is stored with its value, so it is written, logged and recovered with it
// and survives a restart. Part of the format; do not change:
//
//	no expiry, first byte not 0xFF:  | value ...                             |
//	no expiry, first byte 0xFF:      | 0xFF | 0x00 | value ...               |
//	with an expiry:                  | 0xFF | 0x01 | deadline | value ...    |
//	                                    1      1       8 bytes
//
// deadline is the Unix time in milliseconds at which the key expires, a
// little-endian int64 (the absolute time PEXPIREAT takes). Values without
// an expiry, almost all of them, are stored unchanged, so INCR's counters
// and redis-benchmark's values cost nothing extra; a stored value that
// starts with 0xFF but fits neither form can only have come through the
// engine directly, and is read as plain bytes. Values are limited to
// MaxStoredValue, the engine's 1 GiB less this header, so that EXPIRE never
// fails on a value the server took; clients meet proto-max-bulk-len
// (512 MiB) first.
//
// A key past its deadline is absent to every command (GET, MGET, EXISTS,
// TYPE, TTL, SCAN, DBSIZE), and writes treat it as absent: INCR starts from
// 0 without an expiry, SET NX succeeds, SET XX and EXPIRE do nothing, DEL
// counts it as 0. It is removed lazily, as Redis's expireIfNeeded does: a
// write of the key deletes or replaces it in its own transaction, and after
// a command whose reads met expired keys, up to 16 of them are deleted in a
// transaction with synchronous_commit off (a crash may undo such a delete,
// and the key is still past its deadline then). There is no active expiry
// cycle: an expired key nobody reads stays stored until FLUSHALL, or until
// it is read. Every command judges deadlines at one instant, read from the
// wall clock when it starts (Redis's commandTimeSnapshot). INCR and the
// other counters keep the key's expiry; SET without KEEPTTL and MSET clear
// it. As Redis (since 6.0.9), a watched key that was live at WATCH and
// reaches its deadline before EXEC aborts the EXEC; removing a key that was
// already expired at WATCH does not.
//
// # Limits
//
// The request reader is our own (tidwall/redcon's reader caps neither bulk
// length, argument count nor query buffer); redcon writes the replies. Every
// declared length is checked before memory is set aside: bulk lengths
// against proto-max-bulk-len (512 MiB), argument counts against 1,048,576,
// "*N"/"$N" and inline lines against 64 KiB, and the bytes of one request
// against client-query-buffer-limit (1 GiB). An argument over
// Limits.MaxArgLen (by default what the engine can store, above
// proto-max-bulk-len) is read and discarded, not stored, and the command is
// refused with an error. Memory for a bulk argument is set aside as its
// bytes arrive, never more than what has arrived ahead of them (pieces of
// doubling size until half is in, then the one buffer of the declared
// length), so a client that declares 512 MiB and stalls after 10 bytes
// holds 64 KiB, and a large argument peaks at 1.5 times its size while it
// is read. A value is read into one buffer,
// handed to the engine as it is (a write of a large value holds no second
// copy in the engine, see the engine's "Out-of-line values"), and a GET's
// reply buffer, which holds a copy of the value while it is written, is
// dropped after the write. Per connection the server
// holds one goroutine, a 16 KiB read buffer and at most 64 KiB of replies
// (one reply may be larger: a value, or an EXEC's array, bounded by 512 MiB);
// connections are bounded by maxclients (10000) and idle ones are closed
// after timeout (default off, as Redis). Protocol errors are answered with
// Redis's text and close that connection only.
//
// # Shutdown
//
// Shutdown (also SHUTDOWN, and SIGTERM/SIGINT in `mvkv serve`) stops
// accepting, wakes idle connections, lets running commands finish,
// including their commit and durability wait, closes every connection and
// takes a checkpoint. Queued MULTI commands that were not EXEC'd are
// dropped. After the deadline, engine waits are canceled; a commit whose
// durability wait was canceled was never acknowledged and is decided by
// recovery. A SIGKILL at any point loses no acknowledged write, because
// no write is acknowledged before its commit record is durable.
//
// # Who may connect
//
// As Redis 7: with protected mode on (the default; Config.ProtectedModeOff,
// `mvkv serve --protected-mode no` or CONFIG SET protected-mode no turn it
// off) and no password, a client whose address is not a loopback one is
// answered Redis's "-DENIED Redis is running in protected mode ..." error
// and disconnected before it can send anything, so that a server started
// with --listen 0.0.0.0:PORT and no password answers only its own host.
// With RequirePass set, every client must AUTH first instead.
//
// # Not supported
//
// RESP3 (HELLO 3 answers NOPROTO, on which clients fall back to RESP2), an
// active expiry cycle (see Expiry), data types other than strings,
// databases other than 0, pub/sub, scripting, replication (WAIT answers 0),
// and values over proto-max-bulk-len (512 MiB; raising it is capped by the
// engine's 1 GiB). TLS is the listener's business:
// Serve takes any net.Listener, a crypto/tls one included (`mvkv serve
// --tls-port`). SCAN cursors index a table
// of the last 4096 cursors handed out, since keys ordered by bytes cannot be
// encoded in a number.
package server
