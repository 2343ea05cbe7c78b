package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"mvkv/engine"
	"mvkv/vfs"
)

// Config configures a crash test run.
type Config struct {
	// Mode is "power", "kill" or "server".
	Mode string
	// Duration bounds the run (0: no bound); Cycles bounds the number of
	// crash cycles (0: no bound). At least one must be set.
	Duration time.Duration
	Cycles   int
	// Seed makes the workload and the crash moments reproducible (the
	// timing of concurrent clients still varies from run to run).
	Seed uint64
	// Clients is the number of concurrent clients (default 4).
	Clients int
	// Dir is where kill and server modes keep the data directory, and
	// where a failing power-mode crash copy is written; it must be missing
	// or empty (Run fails otherwise); "" makes a temporary directory.
	Dir string
	// Exe is the mvkv binary that kill and server modes start as a child
	// (default: this executable).
	Exe string
	// ShrinkTime bounds the search for a shorter failing operation list
	// (default 90 s).
	ShrinkTime time.Duration
	// Out receives a progress line per cycle and the verdict.
	Out io.Writer
}

// Result is the outcome of a run.
type Result struct {
	Pass     bool     // no check failed
	Cycles   int      // crash-and-recover cycles run
	Crashes  int      // crash points checked
	Ops      int      // operations invoked
	Problems []string // what each failed check found, one line each
	// Shortest is the shortest operation list found that still fails, in
	// invocation order, when the run failed.
	Shortest []Op
	// Reproduced says whether replaying Shortest one operation at a time
	// in process, with a crash after every sync and every answer, fails
	// too; if not, Shortest is the failing cycle's whole list.
	Reproduced bool
	// KeptDir is the data directory kept for inspection, when it failed.
	KeptDir string
}

func (c *Config) normalize() error {
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.Duration <= 0 && c.Cycles <= 0 {
		return errors.New("crashtest: set a duration or a number of cycles")
	}
	if c.ShrinkTime <= 0 {
		c.ShrinkTime = 90 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Exe == "" && c.Mode != "power" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		c.Exe = exe
	}
	return nil
}

// Run runs the crash test described by cfg and prints progress and the
// verdict to cfg.Out. The error is for failures to run the test at all;
// a failed check is a Result with Pass false.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.normalize(); err != nil {
		return Result{}, err
	}
	switch cfg.Mode {
	case "power":
		return runPower(ctx, cfg)
	case "kill":
		return runKill(ctx, cfg)
	case "server":
		return runServer(ctx, cfg)
	}
	return Result{}, fmt.Errorf("crashtest: unknown mode %q (want power, kill or server)", cfg.Mode)
}

// engineOptions are the options every mode opens the engine with: small
// segments and buffers so that a short run switches segments, evicts pages
// and truncates nothing by accident; checkpoints also come from the
// workload.
func engineOptions(fsys vfs.FS) engine.Options {
	off := false
	return engine.Options{
		FS:                fsys,
		SharedBuffers:     2 << 20,
		WALSegmentSize:    1 << 20,
		MaxWALSize:        2 << 20,
		CheckpointTimeout: -1,
		Autovacuum:        &off,
	}
}

const dbDir = "/db"

// maxHeapBytes bounds the heap of power mode's database: past it, the
// next cycle starts on a new one (see runPower).
const maxHeapBytes = 8 << 20

// heapBytes returns the size of the heap files of the database on m.
func heapBytes(m *vfs.MemFS) int64 {
	dir := path.Join(dbDir, "heap")
	names, err := m.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, name := range names {
		if sz, err := m.Stat(path.Join(dir, name)); err == nil {
			n += sz
		}
	}
	return n
}

func newMemFS() *vfs.MemFS {
	m := vfs.NewMemFS()
	m.SetLogging(false)
	_ = m.MkdirAll(dbDir)
	_ = m.SyncDir("/")
	return m
}

// crashModes are the power-loss models of vfs.MemFS.
var crashModes = []vfs.CrashMode{vfs.DropUnsynced, vfs.KeepRandom, vfs.TearLast}

// crashPoint is one simulated power loss: the file system a restart finds
// and the history as it stood.
type crashPoint struct {
	fs   *vfs.MemFS
	hist []Entry
	op   vfs.Op
	mode vfs.CrashMode
}

// runWorkload runs clients on t until stop is closed, recording in h.
func runWorkload(ctx context.Context, t func(client int) Target, h *History, gens []*Gen, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for c, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tgt := t(c)
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				op := g.Next()
				e := h.Invoke(op)
				n, v, ok, err := tgt.Do(ctx, op)
				h.Done(e, n, v, ok, err)
			}
		}()
	}
	wg.Wait()
}

// checkCopy opens the engine on a crash copy, reads the state and verifies
// the database; it returns the open database (for the next cycle) and the
// state read.
func checkCopy(ctx context.Context, fsys vfs.FS, clients int) (*engine.DB, State, []string) {
	db, err := engine.Open(dbDir, engineOptions(fsys))
	if err != nil {
		return nil, nil, []string{fmt.Sprintf("open after the crash: %v", err)}
	}
	st, err := readState(ctx, EngineTarget{db}, clients)
	if err != nil {
		db.Close()
		return nil, nil, []string{fmt.Sprintf("read after the crash: %v", err)}
	}
	rep, err := db.Verify()
	if err != nil {
		db.Close()
		return nil, nil, []string{fmt.Sprintf("verify after the crash: %v", err)}
	}
	if !rep.OK() {
		var p []string
		for _, s := range rep.Problems {
			p = append(p, "verify: "+s)
		}
		db.Close()
		return nil, nil, p
	}
	return db, st, nil
}

func runPower(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	if cfg.Dir != "" {
		// Checked now, not at a failure, which would write the crash
		// copy over what the directory holds.
		if _, err := newDir(cfg.Dir); err != nil {
			return res, err
		}
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b9))
	fsys := newMemFS()
	db, err := engine.Open(dbDir, engineOptions(fsys))
	if err != nil {
		return res, err
	}
	state := State{}
	const pointsPerCycle = 12
	for cycle := 1; ; cycle++ {
		if cfg.Cycles > 0 && cycle > cfg.Cycles || cfg.Duration > 0 && time.Since(start) >= cfg.Duration || ctx.Err() != nil {
			break
		}
		// The cycle's starting point, for replaying a failure: every
		// acknowledged write is durable now.
		startFS := fsys.CrashCopy(vfs.DropUnsynced, nil)
		h := &History{}
		var (
			mu      sync.Mutex
			points  []crashPoint
			targets []int64
		)
		base := fsys.OpCount()
		for range pointsPerCycle {
			targets = append(targets, base+1+rng.Int64N(1500))
		}
		slicesSort(targets)
		stop := make(chan struct{})
		var stopOnce sync.Once
		cseed := rng.Uint64()
		crng := rand.New(rand.NewPCG(cseed, 1))
		fsys.SetOpHook(func(p vfs.CrashPoint) {
			mu.Lock()
			defer mu.Unlock()
			// At or after the target: two targets may be equal.
			if len(points) >= len(targets) || p.Op.Index < targets[len(points)] {
				return
			}
			mode := crashModes[crng.IntN(len(crashModes))]
			points = append(points, crashPoint{fs: p.CrashCopy(mode, crng), hist: h.Snapshot(), op: p.Op, mode: mode})
			if len(points) == len(targets) {
				stopOnce.Do(func() { close(stop) })
			}
		})
		gens := make([]*Gen, cfg.Clients)
		for c := range gens {
			gens[c] = NewGen(cseed, fmt.Sprintf("p%d", cycle), c, true)
		}
		timer := time.AfterFunc(20*time.Second, func() { stopOnce.Do(func() { close(stop) }) })
		runWorkload(ctx, func(int) Target { return EngineTarget{db} }, h, gens, stop)
		timer.Stop()
		fsys.SetOpHook(nil)
		mu.Lock()
		got := points
		mu.Unlock()
		if len(got) == 0 {
			// The workload stopped first: crash now.
			mode := crashModes[crng.IntN(len(crashModes))]
			got = append(got, crashPoint{fs: fsys.CrashCopy(mode, crng), hist: h.Snapshot(), mode: mode})
		}
		db.Close()
		all := h.Snapshot()
		res.Ops += len(all)
		var next *engine.DB
		var nextState State
		for i, pt := range got {
			cdb, st, problems := checkCopy(ctx, pt.fs, cfg.Clients)
			if ctx.Err() != nil {
				// Interrupted: a check cut short is no verdict.
				if cdb != nil {
					cdb.Close()
				}
				res.Cycles = cycle
				return res, nil
			}
			if problems == nil {
				problems = Check(state, pt.hist, st, cfg.Clients)
			}
			res.Crashes++
			if len(problems) > 0 {
				if cdb != nil {
					cdb.Close()
				}
				res.Problems = problems
				fmt.Fprintf(cfg.Out, "cycle %d: crash after %v (%v): FAIL\n", cycle, pt.op, pt.mode)
				res.Cycles = cycle
				return failPower(ctx, cfg, res, startFS, state, pt)
			}
			if i == len(got)-1 {
				next, nextState, fsys = cdb, st, pt.fs
			} else {
				cdb.Close()
			}
		}
		db, state = next, nextState
		res.Cycles = cycle
		acked, pending := counts(got[len(got)-1].hist)
		fresh := ""
		keys := len(state) // what the crash copies recovered, before any reset
		if n := heapBytes(fsys); n > maxHeapBytes {
			// Every check reads the whole heap (verify, Open's scan for
			// pages of zeros), and large values make it grow by about
			// 1 MB a cycle: start over on a new database instead.
			if err := db.Close(); err != nil {
				return res, err
			}
			fsys = newMemFS()
			if db, err = engine.Open(dbDir, engineOptions(fsys)); err != nil {
				return res, err
			}
			state = State{}
			fresh = fmt.Sprintf("; the heap had reached %.1f MB, next cycle on a new database", float64(n)/(1<<20))
		}
		fmt.Fprintf(cfg.Out, "cycle %d: %d ops (%d acknowledged, %d in doubt at the last crash), %d crash points (last after %v, %v), %d keys, verify ok, linearizable%s; %s\n",
			cycle, len(all), acked, pending, len(got), got[len(got)-1].op, got[len(got)-1].mode, keys, fresh, time.Since(start).Round(time.Millisecond))
	}
	db.Close()
	res.Pass = true
	return res, nil
}

func counts(hist []Entry) (acked, doubt int) {
	for _, e := range hist {
		if e.Status == Acked {
			acked++
		} else {
			doubt++
		}
	}
	return
}

func slicesSort(s []int64) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// failPower shrinks a power-mode failure and keeps the crash copy on disk.
func failPower(ctx context.Context, cfg Config, res Result, startFS *vfs.MemFS, initial State, pt crashPoint) (Result, error) {
	dir := cfg.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "mvkv-crashtest-"); err != nil {
			return res, err
		}
	}
	if err := ExportMemFS(pt.fs, dbDir, dir); err != nil {
		return res, err
	}
	res.KeptDir = dir
	res.Shortest, res.Reproduced = Shrink(ctx, Ops(pt.hist), cfg.ShrinkTime, func(ctx context.Context, ops []Op) bool {
		return len(replay(ctx, startFS, initial, ops, engineReplayTarget, cfg.Clients)) > 0
	})
	return res, nil
}

// ExportMemFS copies the directory tree dir of m into the real directory
// dst, so that a crash copy can be inspected with mvkv verify and waldump.
// dst and its parents are created as needed; files already there are
// overwritten. Errors are those of reading m or writing dst, as they are.
func ExportMemFS(m *vfs.MemFS, dir, dst string) error {
	names, err := m.ReadDir(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		if _, err := m.ReadDir(p); err == nil {
			if err := ExportMemFS(m, p, filepath.Join(dst, n)); err != nil {
				return err
			}
			continue
		}
		f, err := m.OpenReadOnly(p)
		if err != nil {
			return err
		}
		size, _ := f.Size()
		b := make([]byte, size)
		if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return err
		}
		f.Close()
		if err := os.WriteFile(filepath.Join(dst, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
