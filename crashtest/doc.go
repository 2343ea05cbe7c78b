// Package crashtest is mvkv's crash-recovery test with a verdict, run by
// `mvkv crashtest`: a randomized, seeded workload against the engine or the
// RESP server, crashed at random moments, restarted and checked.
//
// # Workload
//
// Each of the clients runs its own stream of operations (Gen): single-key
// writes of small and large values (up to 100 KB, so that a value spans WAL
// pages and out-of-line chunks), counter increments (read-modify-write),
// multi-key transactions that write one value to every key of a group,
// deletes, reads, vacuums and checkpoints. Values are given by tags (Expand),
// so a value read back is checked whole and a large value travels between
// processes as a few bytes. Each client owns its single keys and groups,
// which makes the last acknowledged value of each exact; shared keys and
// counters are written by all clients and checked for linearizability.
//
// # Crashes
//
//   - power: the engine in this process on a vfs.MemFS; a file-system hook
//     takes crash copies at random operation indexes (dropping unsynced
//     writes, keeping a random subset, or tearing the last write of each
//     file at a sector), with the history as it stood at that instant: the
//     hook runs with the file system paused, so every answer recorded by
//     then came after its sync. Crash copies share file contents with the
//     running file system copy-on-write, so taking one costs little; what
//     a crash point costs is opening, reading and verifying it, which reads
//     the whole heap, so once the heap passes 8 MB (large values make it
//     grow about 1 MB a cycle) the next cycle starts on a new database.
//   - kill: a child process (the same binary) runs the workload on a real
//     directory and reports each operation on a pipe before and after it
//     runs; the parent SIGKILLs it. What the parent read is a prefix of what
//     happened, so an answer it saw was given.
//   - server: `mvkv serve` as a child, real RESP clients in this process,
//     kill -9.
//
// A killed process loses nothing it handed to the kernel, so kill and server
// modes test recovery from a process crash only: a missing or skipped sync
// passes them, and only power mode can expose it. (Planting one, every
// seventh WAL sync skipped, fails power mode in its first cycle: the next
// Open finds a damaged record below a later record's durable-LSN mark.)
//
// # Checks
//
// After each crash the state is read back and Check compares it with the
// history: an acknowledged write must be there (or a later write whose
// answer was not seen), no value may be one no write made, counters must
// equal their acknowledged increments plus at most those in doubt, a group
// must hold one value in all its keys, verify must find nothing, and the
// single-key history with the reads after the restart must be linearizable
// (porcupine, a register or counter per key; an unanswered operation may
// take effect at any time after its call, or never). The state read becomes
// the next cycle's starting state.
//
// # Shrinking
//
// A failing cycle's operations are replayed one at a time in this process
// on a copy of the cycle's starting state, through the engine or an
// in-process server, with a power loss after every file sync and every
// answer; delta debugging removes chunks while the replay still fails.
// Replaying in process makes a trial deterministic and fast, which a kill
// at a random moment is not; a failure that needs concurrency may not
// reproduce, and is then reported with the cycle's whole list.
//
// Rejected: checking only a final invariant (a sum over accounts), which
// says something was lost but not what; Jepsen-style wall-clock histories
// across processes, which need synchronized clocks (the pipe's order
// stands in for them); and snapshotting a real file system for power
// losses, which needs privileges and loses the exact crash point.
package crashtest
