// Package server serves an engine.DB over the Redis protocol (RESP2), so that
// redis-cli, redis-benchmark and Redis client libraries work against mvkv
// unchanged. `mvkv serve` is this package behind a command line; a Go
// program embeds it the same way:
//
//	db, _ := engine.Open(dir, engine.Options{})
//	srv := server.New(db, server.Config{})
//	go srv.Serve(ctx, ln)          // ln: any net.Listener, a crypto/tls one included
//	...
//	srv.Shutdown(ctx)              // then db.Close()
//
// Values are Redis strings. Every command outside MULTI is one engine
// transaction, and an EXEC block is one transaction with one commit record;
// a command that answers with an error rolls its transaction back. With
// synchronous_commit on (the default), no reply acknowledges a write, or
// shows it to any client, before its commit record is durable, so a crash
// loses no write anyone has seen. Writers of different keys share WAL
// flushes (group commit), and so do the writes of one pipeline.
//
// # Isolation
//
// Nothing a client reads mixes two commits: every command reads from one
// snapshot. A command that reads one key, or reads only the keys it writes
// under their row locks (GET, SET, INCR, MSET, DEL, ...), runs at READ
// COMMITTED, so a write of a hot key waits for the lock and applies to the
// newest version instead of failing. A command that reads several keys or
// keys it does not write (MGET, EXISTS, SCAN, RENAME, ...), and an EXEC
// block, run at REPEATABLE READ, after locking every key they write (and,
// for EXEC, every watched key) in key order. What stays weaker than Redis's
// serial execution is snapshot isolation's write skew: a block may read a
// key another client changes before the block commits; WATCH, which is
// exact, or writing the key in the block closes it. A deadlock or
// serialization failure reruns the command or block before anything is
// replied, up to Config.MaxRetries runs in all; the last run's error is
// replied only once the writes it met are durable, as a result would be.
//
// # Who may connect
//
// As Redis 7: with a password set, a client that has not authenticated
// may send requests of at most 10 arguments of 16 KiB each, so that one
// without the password cannot make the server hold more than a little
// memory; and a connection that sends POST or Host: as a command, as an
// HTTP request does, is closed before anything after it runs, so that a
// web page cannot make a browser send commands to the server hidden in an
// HTTP request (cross-protocol scripting).
//
// # Expiry and stored values
//
// Expiry works as in Redis 7: an expired key is removed when a command
// meets it, or by the active expiry cycle, which walks the keyspace in
// slices Config.Hz times a second (10 by default), 20,000 keys a second
// at any hz, while keys with a deadline may exist (Redis samples a
// dictionary of expiring keys instead; mvkv has none, and a
// second key per expiring key, ordered by deadline, would double the
// writes of every SET EX). A key's deadline is
// stored with its value, in a header before it (0xFF 0x01, then the Unix
// time in milliseconds), and a value that itself starts with 0xFF is
// stored behind 0xFF 0x00. A program that writes through the engine into
// a directory the server also serves must escape such values the same
// way, or the server reads them as shortened or expired.
//
// Not supported: RESP3 (HELLO 3 answers NOPROTO, on which clients fall
// back to RESP2), data types other than strings, databases other than 0,
// pub/sub, scripting and replication.
//
// # Rejected
//
// An event loop in Redis's shape in place of a goroutine per connection:
// one goroutine reading every ready connection through epoll, committing
// each command with CommitAsync and waiting once for the flush. Measured
// over the engine on one key, it was no faster at 32 clients and slower
// at 64 (16,116 to 17,319 SETs a second against 19,539 to 20,614), with
// the server's CPU at 34 to 36 µs a request either way: the cost is the
// engine's work per command and a commit whose completion crosses
// goroutines, which no loop removes. A loop would also stall every
// connection it serves while one command waits for a row lock.
//
// Combining the writes of one key from different connections into one
// engine transaction: at 32 clients it made 20,173 SETs a second against
// 31,319 without, because requests arrive spread out and the groups held
// 1.18 commands on average.
//
// Reading requests with tidwall/redcon's reader (redcon writes the
// replies): it caps neither bulk length, argument count nor query buffer.
// The server's own reader checks every declared length against its limits
// before it sets memory aside, so a client that declares a 512 MiB value
// and stalls after 10 bytes holds 64 KiB.
package server
