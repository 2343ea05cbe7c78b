package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"mvkv/engine"
)

// Workload is one of pgbench's builtin scripts.
type Workload int

const (
	// TPCB is pgbench's default "TPC-B (sort of)".
	TPCB Workload = iota
	// SimpleUpdate is pgbench -N: TPC-B without the teller and branch updates.
	SimpleUpdate
	// SelectOnly is pgbench -S: one account read.
	SelectOnly
)

// Builtin returns pgbench's -b name of the script: "tpcb-like",
// "simple-update" or "select-only".
func (w Workload) Builtin() string {
	switch w {
	case TPCB:
		return "tpcb-like"
	case SimpleUpdate:
		return "simple-update"
	case SelectOnly:
		return "select-only"
	}
	return "unknown"
}

// String returns pgbench's description of the script, as printed in the
// report's "transaction type" line.
func (w Workload) String() string {
	switch w {
	case TPCB:
		return "<builtin: TPC-B (sort of)>"
	case SimpleUpdate:
		return "<builtin: simple update>"
	case SelectOnly:
		return "<builtin: select only>"
	}
	return "<unknown>"
}

// RunConfig describes one measured run on an already loaded target.
type RunConfig struct {
	// Workload is the transaction script.
	Workload Workload
	// Scale is the scale the target was loaded with (from DetectScale).
	Scale int
	// Accounts is the number of accounts per scale unit the target was
	// loaded with; 0 means 100,000. Only tests use other values.
	Accounts int
	// Clients is pgbench -c, at least 1.
	Clients int
	// Threads is pgbench -j: clients are split into this many workers
	// sharing statistics; clamped to [1, Clients].
	Threads int
	// Transactions is pgbench -t, per client, used when Duration is 0.
	// Failed transactions count toward it, as in pgbench 15.
	Transactions int
	// Duration is pgbench -T; when positive Transactions is ignored.
	Duration time.Duration
	// Progress is pgbench -P: when positive, a progress line is written to
	// Log at this interval.
	Progress time.Duration
	// MaxTries is pgbench 15's --max-tries: a transaction that fails with a
	// serialization failure or deadlock (IsFailure) is run again, with the
	// same random values, until it commits or has been tried MaxTries
	// times, and only then counted as failed. 1 (and the zero value) tries
	// once; math.MaxInt is pgbench's 0, unlimited, for a run with a
	// Duration. A retry does not start after Duration ended. The latency
	// of a retried transaction runs from its first try to its last.
	MaxTries int
	// Seed seeds the clients' random generators; 0 takes the clock.
	Seed uint64
	// TableUsage asks for Results.Tables: after the run the engine's
	// whole heap is read (engine.DB.StatTuple) to measure each table's
	// space. The read goes through the buffer pool and evicts what the
	// next run would find there, so sweeps leave it off.
	TableUsage bool
	// Log receives progress lines and client abort messages (pgbench's
	// stderr); nil discards them.
	Log io.Writer
}

// Results are what the report prints. Latencies are in milliseconds over
// successful transactions only.
type Results struct {
	Target        string        // the target's Name ("engine", "pebble", ...)
	Workload      Workload      // the built-in workload, or Custom for -f
	Scale         int           // the scale factor (-s): 100,000 accounts each
	Clients       int           // concurrent clients (-c)
	Threads       int           // worker threads (-j) the clients are spread over
	Transactions  int           // per client, when Duration == 0
	Duration      time.Duration // when positive, a -T run
	Processed     int64         // committed transactions
	Failed        int64         // serialization failures and deadlocks, after the last try
	MaxTries      int           // RunConfig.MaxTries, at least 1
	Retried       int64         // transactions tried more than once, committed or failed
	Retries       int64         // tries after the first, over all transactions
	Aborted       int           // clients aborted by other errors
	LatencyAvg    float64       // ms
	LatencyStddev float64       // ms
	ConnTime      float64       // ms, opening all clients
	Elapsed       time.Duration // from the first transaction to the last
	TPS           float64       // Processed / Elapsed
	// Commit holds WAL syncs over the run when the target counts them.
	Commit *CommitStats
	// Engine is the engine's statistics over the run (WAL flush rounds,
	// sync latency and commits-per-sync histograms, commit wait, CLOG,
	// vacuum, buffer pool); nil on other targets.
	Engine *engine.Stats
	// HeapBlocksBefore is the engine's heap size in 8 KiB blocks when the
	// run began (Engine.Heap.Blocks is the size at its end); 0 on other
	// targets.
	HeapBlocksBefore uint64
	// Tables is the heap space of the updated tables and of history when
	// the run ended, when RunConfig.TableUsage asked for it; nil on other
	// targets.
	Tables *TableUsage
	// Applied is what the run's committed transactions changed, as its
	// clients counted them; nil for a select-only run.
	Applied *Applied
	// Invariant is the post-run check, when it was made.
	Invariant *Invariant
	// Open is how the engine's directory was opened before the run; nil
	// on other targets and in sweeps.
	Open *OpenStats
}

// Applied is what a run's committed transactions changed, as its clients
// counted them: each TPC-B or simple-update commit adds one history row and
// its delta to an account (and, TPC-B only, to a teller and a branch).
type Applied struct {
	Commits int64 // committed transactions
	Delta   int64 // sum of their deltas
	Simple  bool  // simple-update (-N): tellers and branches unchanged
	// Exact is false when some transaction ended with an error that
	// leaves open whether it committed (a client aborted, or an
	// interrupt cut a commit short): the run's changes are then not
	// compared.
	Exact bool
}

// OpenStats is what opening the engine's directory cost: after a crash the
// redo, and in every case the key index's load, which is what a restart
// waits for.
type OpenStats struct {
	// Took is engine.Open's wall time, recovery included.
	Took time.Duration
	// Recovery is what Open found and replayed.
	Recovery engine.RecoveryInfo
}

// openStatser is a target that can say how its open went.
type openStatser interface {
	OpenStats() *OpenStats
}

// TableUsage is the engine heap's space by pgbench table at the end of a
// run, in 8 KiB pages; a page holding rows of both kinds counts for both.
type TableUsage struct {
	// UpdatedPages holds rows of accounts, tellers or branches.
	UpdatedPages uint64
	// UpdatedPagesBefore is UpdatedPages when the run began.
	UpdatedPagesBefore uint64
	// HistoryPages holds history rows.
	HistoryPages uint64
}

// stats accumulate one worker's transactions (pgbench's StatsData).
type stats struct {
	mu      sync.Mutex
	cnt     int64   // guarded by mu: committed
	failed  int64   // guarded by mu
	retried int64   // guarded by mu: transactions tried more than once
	retries int64   // guarded by mu: tries after the first
	delta   int64   // guarded by mu: sum of the committed transactions' deltas
	sum     float64 // guarded by mu: latency sum, µs
	sum2    float64 // guarded by mu: latency sum of squares, µs²
}

type snapshot struct {
	cnt, failed, delta, retried, retries int64
	sum, sum2                            float64
}

// add counts one transaction that ended after tries tries.
func (s *stats) add(lat time.Duration, failed bool, delta int64, tries int) {
	us := float64(lat) / float64(time.Microsecond)
	s.mu.Lock()
	if tries > 1 {
		s.retried++
		s.retries += int64(tries - 1)
	}
	if failed {
		s.failed++
	} else {
		s.cnt++
		s.delta += delta
		s.sum += us
		s.sum2 += us * us
	}
	s.mu.Unlock()
}

func (s *stats) read() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return snapshot{cnt: s.cnt, failed: s.failed, delta: s.delta, retried: s.retried, retries: s.retries, sum: s.sum, sum2: s.sum2}
}

func total(ws []*stats) snapshot {
	var t snapshot
	for _, w := range ws {
		s := w.read()
		t.cnt += s.cnt
		t.failed += s.failed
		t.delta += s.delta
		t.retried += s.retried
		t.retries += s.retries
		t.sum += s.sum
		t.sum2 += s.sum2
	}
	return t
}

// avgStddev returns mean and standard deviation in ms of n samples whose
// sum and sum of squares in µs are given.
func avgStddev(n int64, sum, sum2 float64) (float64, float64) {
	if n <= 0 {
		return 0, 0
	}
	avg := sum / float64(n)
	v := sum2/float64(n) - avg*avg
	if v < 0 { // rounding
		v = 0
	}
	return avg / 1000, math.Sqrt(v) / 1000
}

// engineStatser is the engine target: its full statistics, cumulative,
// and its heap space by table.
type engineStatser interface {
	EngineStats() engine.Stats
	TableUsage(ctx context.Context) (TableUsage, error)
}

// IsFailure reports whether err is a transaction failure pgbench 15 counts
// and does not abort the client for: a serialization failure or deadlock
// (on PostgreSQL, SQLSTATE 40001 or 40P01).
func IsFailure(err error) bool {
	if c := pgCode(err); c == "40001" || c == "40P01" {
		return true
	}
	return engine.IsRetryable(err)
}

// rolledBack reports whether err is known to have ended its transaction
// without a commit: a lock timeout (the engine's ErrLockTimeout,
// PostgreSQL's SQLSTATE 55P03) ends it while it waits for a row lock,
// before it can reach its commit.
func rolledBack(err error) bool {
	return errors.Is(err, engine.ErrLockTimeout) || pgCode(err) == "55P03"
}

// MaxClients is the most clients a run may have. Each client is a
// goroutine with its own connection or transaction state and its own
// latency record, so a mistyped -c would otherwise exhaust memory before
// the first transaction; pgbench is bounded the same way by the number of
// connections it can open.
const MaxClients = 10000

// MaxScale is the largest scale factor: at pgbench's 100,000 accounts a
// scale unit, the most whose account ids fit the keys' 10 digits (and
// about 1.5 TB of accounts). A mistyped -s would otherwise start loading
// rows it could never finish.
const MaxScale = 99999

// Run drives cfg.Clients clients against t and returns the results. The
// target must be loaded at cfg.Scale. A client whose transaction fails with
// an error other than IsFailure stops (pgbench's "client aborted"); the run
// goes on with the others and Results.Aborted counts it. When ctx is
// canceled the clients stop after their current transaction and Run returns
// the results so far. Run returns an error only when clients cannot be
// opened.
func Run(ctx context.Context, t Target, cfg RunConfig) (*Results, error) {
	if cfg.Clients < 1 || cfg.Clients > MaxClients {
		return nil, fmt.Errorf("bench: %d clients: need 1 to %d", cfg.Clients, MaxClients)
	}
	if cfg.Scale < 1 || cfg.Scale > MaxScale {
		return nil, fmt.Errorf("bench: scale %d: need 1 to %d", cfg.Scale, MaxScale)
	}
	threads := min(max(cfg.Threads, 1), cfg.Clients)
	accounts := int64(cfg.Accounts)
	if accounts <= 0 {
		accounts = defaultAccounts
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	var before CommitStats
	cs, hasStats := t.(CommitStatser)
	if hasStats {
		before = cs.CommitStats()
	}
	var engineBefore engine.Stats
	var tablesBefore TableUsage
	es, hasEngineStats := t.(engineStatser)
	if hasEngineStats && cfg.TableUsage {
		// The updated tables' pages at the start, for the ratio: the
		// heap's size would count history left by earlier runs in the
		// same directory.
		var err error
		fmt.Fprint(log, "measuring the tables' pages before the run...")
		if tablesBefore, err = es.TableUsage(ctx); err != nil {
			fmt.Fprintln(log)
			return nil, fmt.Errorf("bench: reading the heap before the run to measure each table's pages: %w", err)
		}
		fmt.Fprintln(log, "end.")
	}
	if hasEngineStats {
		engineBefore = es.EngineStats()
	}

	connStart := time.Now()
	clients := make([]Client, cfg.Clients)
	for i := range clients {
		c, err := t.NewClient(ctx)
		if err != nil {
			for _, c := range clients[:i] {
				c.Close()
			}
			return nil, fmt.Errorf("bench: connect client %d: %w", i, err)
		}
		clients[i] = c
	}
	connTime := time.Since(connStart)

	workers := make([]*stats, threads)
	for i := range workers {
		workers[i] = new(stats)
	}
	var (
		logMu sync.Mutex // serializes writes to log
		wg    sync.WaitGroup
	)
	maxTries := max(cfg.MaxTries, 1)
	aborted := make([]bool, cfg.Clients)
	var unknown atomic.Bool // a transaction ended with an error that leaves its outcome open
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	runStart := start.UnixNano()
	for i, c := range clients {
		// Contiguous blocks of clients per worker, as pgbench assigns them.
		w := workers[i*threads/cfg.Clients]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			p := TxnParams{}
			for n := int64(0); ; n++ {
				if ctx.Err() != nil {
					return // interrupted: end quietly, like the deadline
				}
				if cfg.Duration > 0 {
					if !time.Now().Before(deadline) {
						return
					}
				} else if n >= int64(cfg.Transactions) {
					return
				}
				p.AID = 1 + rng.Int64N(accounts*int64(cfg.Scale))
				p.TID = 1 + rng.Int64N(tellersPerScale*int64(cfg.Scale))
				p.BID = 1 + rng.Int64N(int64(cfg.Scale))
				p.Delta = rng.Int64N(10001) - 5000
				t0 := time.Now()
				var err error
				tries := 0
				for {
					tries++
					switch cfg.Workload {
					case SelectOnly:
						err = c.SelectOnly(ctx, p.AID)
					default:
						p.MTime = t0.UnixMicro()
						p.HistoryKey = historyKey(runStart, i, n)
						err = c.TPCB(ctx, &p, cfg.Workload == SimpleUpdate)
					}
					// A failed try was rolled back: the next one, with
					// the same values, starts from where this one did.
					if err == nil || !IsFailure(err) || tries >= maxTries || ctx.Err() != nil ||
						(cfg.Duration > 0 && !time.Now().Before(deadline)) {
						break
					}
				}
				lat := time.Since(t0)
				if err != nil && !IsFailure(err) {
					if !rolledBack(err) {
						// Whether it committed is unknown.
						unknown.Store(true)
					}
					if ctx.Err() != nil {
						return // the transaction was cut short by the interrupt
					}
					aborted[i] = true
					logMu.Lock()
					fmt.Fprintf(log, "client %d aborted in transaction %d: %v\n", i, n, err)
					logMu.Unlock()
					return
				}
				delta := int64(0)
				if cfg.Workload != SelectOnly {
					delta = p.Delta
				}
				w.add(lat, err != nil, delta, tries)
			}
		})
	}

	done := make(chan struct{})
	var elapsed time.Duration // set before done is closed
	var pwg sync.WaitGroup
	if cfg.Progress > 0 {
		pwg.Go(func() {
			tick := time.NewTicker(cfg.Progress)
			defer tick.Stop()
			last, lastAt := snapshot{}, start
			report := func(now time.Time) {
				cur := total(workers)
				n := cur.cnt - last.cnt
				lat, sd := avgStddev(n, cur.sum-last.sum, cur.sum2-last.sum2)
				line := fmt.Sprintf("progress: %.1f s, %.1f tps, lat %.3f ms stddev %.3f, %d failed",
					now.Sub(start).Seconds(), float64(n)/now.Sub(lastAt).Seconds(), lat, sd, cur.failed-last.failed)
				if maxTries != 1 {
					// As pgbench 15 when --max-tries is not 1.
					line += fmt.Sprintf(", %d retried, %d retries", cur.retried-last.retried, cur.retries-last.retries)
				}
				logMu.Lock()
				fmt.Fprintln(log, line)
				logMu.Unlock()
				last, lastAt = cur, now
			}
			for {
				select {
				case <-done:
					// The run's end and the last tick come together,
					// and the tick often loses: report the last interval
					// anyway, so that the last minute of a -P 60 run is
					// always printed. A remainder under half an interval
					// (an interrupted run) is left out as too noisy.
					if end := start.Add(elapsed); end.Sub(lastAt) >= cfg.Progress/2 {
						report(end)
					}
					return
				case now := <-tick.C:
					report(now)
				}
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	close(done)
	pwg.Wait()
	for _, c := range clients {
		c.Close()
	}

	tot := total(workers)
	avg, sd := avgStddev(tot.cnt, tot.sum, tot.sum2)
	r := &Results{
		Target:        t.Name(),
		Workload:      cfg.Workload,
		Scale:         cfg.Scale,
		Clients:       cfg.Clients,
		Threads:       threads,
		Transactions:  cfg.Transactions,
		Duration:      cfg.Duration,
		Processed:     tot.cnt,
		Failed:        tot.failed,
		MaxTries:      maxTries,
		Retried:       tot.retried,
		Retries:       tot.retries,
		LatencyAvg:    avg,
		LatencyStddev: sd,
		ConnTime:      float64(connTime) / float64(time.Millisecond),
		Elapsed:       elapsed,
	}
	if elapsed > 0 {
		r.TPS = float64(tot.cnt) / elapsed.Seconds()
	}
	if cfg.Workload != SelectOnly {
		r.Applied = &Applied{Commits: tot.cnt, Delta: tot.delta, Simple: cfg.Workload == SimpleUpdate, Exact: !unknown.Load()}
	}
	for _, a := range aborted {
		if a {
			r.Aborted++
		}
	}
	if hasEngineStats {
		d := es.EngineStats().Sub(engineBefore)
		r.Engine = &d
		r.HeapBlocksBefore = engineBefore.Heap.Blocks
		if cfg.TableUsage {
			// An interrupted run still reports, as pgbench does.
			u, err := es.TableUsage(context.WithoutCancel(ctx))
			if err != nil {
				return r, fmt.Errorf("bench: reading the heap after the run to measure each table's pages (the report's table-usage line): %w", err)
			}
			u.UpdatedPagesBefore = tablesBefore.UpdatedPages
			r.Tables = &u
		}
	}
	if hasStats {
		d := cs.CommitStats()
		r.Commit = &CommitStats{
			Commits:  d.Commits - before.Commits,
			WALSyncs: d.WALSyncs - before.WALSyncs,
			WALBytes: d.WALBytes - before.WALBytes,
		}
	}
	return r, nil
}
