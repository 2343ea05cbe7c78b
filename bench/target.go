package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"mvkv/engine"
)

// ErrUnknownTarget is returned by OpenTarget for a target name it does not know.
var ErrUnknownTarget = errors.New("bench: unknown target")

// errMissingRow is returned by a client when a row the transaction must
// update does not exist: the directory was loaded with another account count
// or is damaged. It aborts the client.
var errMissingRow = errors.New("bench: row not found")

// errReadMismatch is returned when a transaction does not read back the
// balance it has just written: a read-your-own-writes bug in the target.
var errReadMismatch = errors.New("bench: read of own update returned another balance")

// KV is one row to load.
type KV struct {
	Key, Value []byte
}

// Sums are the balance totals the invariant compares.
type Sums struct {
	// Balance totals of each table; History sums the deltas.
	Accounts, Tellers, Branches, History int64
	// HistoryRows counts history rows: one per committed update
	// transaction over the directory's lifetime.
	HistoryRows int64
}

// CommitStats are group-commit counters over an interval: transactions
// committed, WAL syncs (fsyncs) that made them durable, and WAL bytes
// written.
type CommitStats struct {
	Commits, WALSyncs, WALBytes uint64
}

// Target is a store the benchmark runs against: the embedded engine,
// pebble, a PostgreSQL server or a RESP server (OpenTarget). A Target is safe for concurrent use by its Clients; LoadBatch,
// FinishLoad, DetectScale and Sums are called with no clients running.
type Target interface {
	// Name is the target's kind: "engine", "pebble", "postgres" or "resp".
	Name() string
	// DetectScale counts branches, as pgbench counts pgbench_branches; 0
	// means the directory was never loaded.
	DetectScale(ctx context.Context) (int, error)
	// LoadBatch writes rows atomically. durable asks for the batch (and all
	// batches before it) to be on stable storage when LoadBatch returns;
	// other batches may be written without a sync.
	LoadBatch(ctx context.Context, rows []KV, durable bool) error
	// FinishLoad runs after the last batch, like pgbench's vacuum step: a
	// checkpoint on the engine and on a RESP server that takes CHECKPOINT,
	// a memtable flush on pebble, vacuum analyze and the primary keys on
	// PostgreSQL.
	FinishLoad(ctx context.Context) error
	// NewClient opens one client connection.
	NewClient(ctx context.Context) (Client, error)
	// Sums reads the four balance totals from one consistent snapshot.
	Sums(ctx context.Context) (Sums, error)
	// Close releases the target.
	Close() error
}

// CommitStatser is implemented by targets that can count WAL syncs. The
// counters are cumulative; the driver subtracts two readings.
type CommitStatser interface {
	CommitStats() CommitStats
}

// TxnParams are the random values of one transaction, drawn by the driver.
type TxnParams struct {
	AID, TID, BID int64  // the account, teller and branch, 1-based as pgbench's
	Delta         int64  // the balance change, -5000..5000
	HistoryKey    []byte // the key of the transaction's pgbench_history row
	MTime         int64  // Unix microseconds
}

func (p *TxnParams) historyValue() []byte {
	return history{TID: uint32(p.TID), BID: uint32(p.BID), AID: p.AID, Delta: p.Delta, MTime: p.MTime}.encode()
}

// Client runs pgbench's builtin transactions. A Client is used by one
// goroutine at a time. Each method returns nil after a commit, or an error
// after rolling the transaction back.
type Client interface {
	// TPCB is the builtin "TPC-B (sort of)"; simple leaves out the teller
	// and branch updates ("simple update", pgbench -N).
	TPCB(ctx context.Context, p *TxnParams, simple bool) error
	// SelectOnly reads one account's balance (pgbench -S).
	SelectOnly(ctx context.Context, aid int64) error
	// Close ends the client.
	Close() error
}

// TargetOptions are the knobs passed to a target at open. Fields a target
// has no use for are ignored.
type TargetOptions struct {
	// Logger receives the engine's operational messages (engine.Options
	// Logger); Main sets one that prints warnings and errors to its log
	// writer when it is nil, so that a recovery that cut a torn WAL tail
	// or accepted a torn CLOG page says so.
	Logger *slog.Logger
	// SynchronousCommit is synchronous_commit: true waits for the commit's
	// WAL sync (pebble.Sync on pebble).
	SynchronousCommit bool
	// CommitDelay is commit_delay in microseconds, or
	// engine.CommitDelayAuto for the engine's adaptive delay (engine; on
	// PostgreSQL a positive delay is set per session, which needs a
	// superuser).
	CommitDelay int
	// CommitSiblings is commit_siblings, passed as is: 0 means the delay is
	// taken whatever the number of other active transactions (the
	// command's default is PostgreSQL's 5). Engine and PostgreSQL.
	CommitSiblings int
	// Disk is the simulated disk the target's syncs pay for; the zero
	// value is the real disk. Engine and pebble (see DiskModel).
	Disk DiskModel
	// SharedBuffers is the buffer pool (engine) or block cache (pebble) size
	// in bytes; 0 means the target's default.
	SharedBuffers int64
	// RESPMode is RESPModeMulti (the default) or RESPModeWatch. RESP only.
	RESPMode string
	// RESPPassword, if not empty, is sent with AUTH on every connection,
	// for a server with requirepass (redis-benchmark's -a). RESP only.
	RESPPassword string
	// Engine holds the engine target's other knobs, as engine.Open takes
	// them (the zero value gives the engine's defaults). The fields above
	// replace its SynchronousCommit, CommitDelay, CommitSiblings,
	// SharedBuffers, FS and Logger. Engine only.
	Engine engine.Options
}

// OpenTarget opens the named target ("engine" or "pebble") on dir, creating
// the directory if needed, or "postgres=URL", a PostgreSQL server (dir is
// unused), or "resp=ADDR", a RESP server. It returns an error wrapping
// ErrUnknownTarget for any other name or an empty URL or address, or the
// target's open error.
func OpenTarget(name, dir string, o TargetOptions) (Target, error) {
	if url, ok := strings.CutPrefix(name, "postgres="); ok {
		if url == "" {
			return nil, fmt.Errorf("%w %q: postgres= needs a connection URL, e.g. postgres=postgres://localhost/bench", ErrUnknownTarget, name)
		}
		return openPostgres(url, o)
	}
	if addr, ok := strings.CutPrefix(name, "resp="); ok {
		if addr == "" {
			return nil, fmt.Errorf("%w %q: resp= needs an address, e.g. resp=127.0.0.1:7379", ErrUnknownTarget, name)
		}
		return openRESP(addr, o)
	}
	switch name {
	case "engine":
		if dir != "" && holdsPebble(dir) {
			return nil, fmt.Errorf("bench: %s holds a pebble store (its CURRENT or MANIFEST files); give the engine a directory of its own", dir)
		}
		return openEngine(dir, o)
	case "pebble":
		if dir != "" && holdsEngine(dir) {
			return nil, fmt.Errorf("bench: %s holds an mvkv data directory (its control file or WAL); give pebble a directory of its own", dir)
		}
		return openPebble(dir, o)
	}
	return nil, fmt.Errorf("%w %q (want engine, pebble, postgres=URL or resp=ADDR)", ErrUnknownTarget, name)
}

// holdsPebble and holdsEngine tell whether dir already holds the other
// store's files: each would otherwise write its own beside them (and
// both call their lock file LOCK), and a later run of either would read a
// directory it can no longer check.
func holdsPebble(dir string) bool {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); n == "CURRENT" || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "OPTIONS-") {
			return true
		}
	}
	return false
}

func holdsEngine(dir string) bool {
	for _, name := range []string{"control", "wal", "heap"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}
