package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"mvkv/engine"
	"mvkv/vfs"
)

// The kill-mode child reports each operation on its standard output, one
// line per event, written whole by one write before (I) and after (R) the
// operation, so that what the parent has read when the child dies is a
// prefix of what happened:
//
//	I <id> <op as JSON>
//	R <id> <result as JSON>
type wireResult struct {
	N     int64  `json:"n,omitempty"`
	Tag   string `json:"t,omitempty"` // the value's tag, for values Expand made
	Val   string `json:"v,omitempty"` // any other value
	Found bool   `json:"f,omitempty"`
	Err   string `json:"e,omitempty"`
}

// ChildMain is the kill-mode child: it opens the engine on dir, prints
// "ready", and runs clients clients of the workload of seed and cycle until
// it is killed, reporting every operation on out. It returns only on
// failure: Open's error (an error wrapping engine.ErrLocked when another
// process has dir open, say).
func ChildMain(dir string, seed uint64, clients, cycle int, out io.Writer) error {
	db, err := engine.Open(dir, engineOptions(nil))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	emit := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(out, line)
	}
	emit("ready\n")
	var wg sync.WaitGroup
	var ids sync.Mutex
	next := 0
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := NewGen(seed, fmt.Sprintf("k%d", cycle), c, true)
			t := EngineTarget{db}
			for {
				op := g.Next()
				ids.Lock()
				next++
				id := next
				ids.Unlock()
				b, _ := json.Marshal(op)
				emit(fmt.Sprintf("I %d %s\n", id, b))
				n, v, ok, err := t.Do(context.Background(), op)
				r := wireResult{N: n, Found: ok}
				if tag := TagOf(v); tag != "" {
					r.Tag = tag
				} else {
					r.Val = v
				}
				if err != nil {
					r.Err = err.Error()
				}
				b, _ = json.Marshal(r)
				emit(fmt.Sprintf("R %d %s\n", id, b))
			}
		}()
	}
	wg.Wait()
	return nil
}

// readEvents reads a child's event lines into h until EOF, signalling ready
// at the "ready" line.
func readEvents(r io.Reader, h *History, ready chan<- struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	entries := map[int]*Entry{}
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			close(ready)
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		idText, body, _ := strings.Cut(rest, " ")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		switch kind {
		case "I":
			var op Op
			if json.Unmarshal([]byte(body), &op) == nil {
				entries[id] = h.Invoke(op)
			}
		case "R":
			var r wireResult
			e := entries[id]
			if e == nil || json.Unmarshal([]byte(body), &r) != nil {
				continue
			}
			v := r.Val
			if r.Tag != "" {
				v = Expand(r.Tag)
			}
			var err error
			if r.Err != "" {
				err = errors.New(r.Err)
			}
			h.Done(e, r.N, v, r.Found, err)
		}
	}
}

// dataDir returns the directory kill and server modes use, which must not
// hold anything yet.
func dataDir(cfg Config) (string, error) {
	if cfg.Dir == "" {
		return os.MkdirTemp("", "mvkv-crashtest-")
	}
	missing, err := newDir(cfg.Dir)
	if err != nil {
		return "", err
	}
	if missing {
		return cfg.Dir, os.MkdirAll(cfg.Dir, 0o755)
	}
	return cfg.Dir, nil
}

// CheckNewDir returns an error unless dir is missing or empty, as Run
// requires of Config.Dir: the directory a run writes its data or a
// failing crash copy to holds nothing of anyone else's. The error names
// dir when it holds anything, or is the os package's error reading it (a
// *fs.PathError; not a directory, no permission). A caller can so refuse
// a directory before it prints anything of a run. Safe for concurrent use;
// it only reads the directory.
func CheckNewDir(dir string) error {
	_, err := newDir(dir)
	return err
}

// newDir returns an error unless dir is missing (missing true) or empty:
// the directory a run writes its data or a failing crash copy to holds
// nothing of anyone else's.
func newDir(dir string) (missing bool, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if len(ents) > 0 {
		return false, fmt.Errorf("crashtest: %s is not empty; give a new directory", dir)
	}
	return false, nil
}

// ImportDir returns a MemFS holding a durable copy of the real directory
// src under /db, the starting point of an in-process replay. The LOCK
// file is left out. Errors are those of reading src, as the os package
// gives them.
func ImportDir(src string) (*vfs.MemFS, error) {
	m := newMemFS()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.ToSlash(filepath.Join(dbDir, rel))
		if d.IsDir() {
			if err := m.MkdirAll(dst); err != nil {
				return err
			}
			return m.SyncDir(filepath.ToSlash(filepath.Dir(dst)))
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := m.Create(dst)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt(b, 0); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return m.SyncDir(filepath.ToSlash(filepath.Dir(dst)))
	})
	return m, err
}

// checkDir opens the engine on a real directory after a kill, verifies it
// and reads the state, then closes it.
func checkDir(ctx context.Context, dir string, clients int, read bool) (State, []string) {
	db, err := engine.Open(dir, engineOptions(nil))
	if err != nil {
		return nil, []string{fmt.Sprintf("open after the kill: %v", err)}
	}
	defer db.Close()
	var st State
	if read {
		if st, err = readState(ctx, EngineTarget{db}, clients); err != nil {
			return nil, []string{fmt.Sprintf("read after the kill: %v", err)}
		}
	}
	rep, err := db.Verify()
	if err != nil {
		return nil, []string{fmt.Sprintf("verify after the kill: %v", err)}
	}
	var p []string
	for _, s := range rep.Problems {
		p = append(p, "verify: "+s)
	}
	return st, p
}

func runKill(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	dir, err := dataDir(cfg)
	if err != nil {
		return res, err
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x51ed27))
	state := State{}
loop:
	for cycle := 1; ; cycle++ {
		if cfg.Cycles > 0 && cycle > cfg.Cycles || cfg.Duration > 0 && time.Since(start) >= cfg.Duration || ctx.Err() != nil {
			break
		}
		startFS, err := ImportDir(dir)
		if err != nil {
			return res, err
		}
		cseed := rng.Uint64()
		cmd := exec.Command(cfg.Exe, "crashtest", "--child", "--dir", dir, "--seed", strconv.FormatUint(cseed, 10),
			"--clients", strconv.Itoa(cfg.Clients), "--cycles", strconv.Itoa(cycle))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		h := &History{}
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() { readEvents(stdout, h, ready); close(done) }()
		select {
		case <-ready:
		case <-done:
			cmd.Wait()
			if ctx.Err() != nil {
				// The interrupt (Ctrl-C reaches the whole process
				// group) ended the child too.
				break loop
			}
			return res, fmt.Errorf("crashtest: the child process ended before it was ready")
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			return res, fmt.Errorf("crashtest: the child process was not ready within 60 s")
		}
		delay := 20*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		cmd.Wait()
		hist := h.Snapshot()
		res.Ops += len(hist)
		res.Crashes++
		st, problems := checkDir(ctx, dir, cfg.Clients, true)
		if ctx.Err() != nil {
			// Interrupted: what failed may have failed for that reason
			// (a read cut short), so no verdict.
			break
		}
		if problems == nil {
			problems = Check(state, hist, st, cfg.Clients)
		}
		res.Cycles = cycle
		if len(problems) > 0 {
			res.Problems = problems
			res.KeptDir = dir
			fmt.Fprintf(cfg.Out, "cycle %d: SIGKILL after %v: FAIL\n", cycle, delay.Round(time.Millisecond))
			res.Shortest, res.Reproduced = Shrink(ctx, Ops(hist), cfg.ShrinkTime, func(ctx context.Context, ops []Op) bool {
				return len(replay(ctx, startFS, state, ops, engineReplayTarget, cfg.Clients)) > 0
			})
			return res, nil
		}
		state = st
		acked, doubt := counts(hist)
		fmt.Fprintf(cfg.Out, "cycle %d: %d ops (%d acknowledged, %d in doubt), SIGKILL after %v, %d keys, verify ok, linearizable; %s\n",
			cycle, len(hist), acked, doubt, delay.Round(time.Millisecond), len(st), time.Since(start).Round(time.Millisecond))
	}
	res.Pass = true
	if cfg.Dir == "" {
		os.RemoveAll(dir)
	}
	return res, nil
}

// freePort returns a loopback address with a port free right now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServe starts `mvkv serve` on dir and waits until it answers PING.
func startServe(ctx context.Context, cfg Config, dir, addr string) (*exec.Cmd, error) {
	cmd := exec.Command(cfg.Exe, "serve", "--dir", dir, "--listen", addr, "--wal-segment-size", "1MB",
		"--shared-buffers", "4MB", "--checkpoint-timeout", "0", "--autovacuum", "off")
	var errb bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	c := NewRESPClient(addr)
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			return cmd, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("crashtest: mvkv serve on %s exited: %s", addr, strings.TrimSpace(errb.String()))
		default:
		}
		if ctx.Err() != nil {
			cmd.Process.Kill()
			<-exited
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("crashtest: mvkv serve on %s did not answer within 60 s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runServer(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	dir, err := dataDir(cfg)
	if err != nil {
		return res, err
	}
	addr, err := freePort()
	if err != nil {
		return res, err
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5e77e5))
	var (
		prevState State // the state the previous cycle started from
		prevHist  []Entry
		prevFS    *vfs.MemFS
		prevDelay time.Duration
	)
	for cycle := 1; ; cycle++ {
		last := cfg.Cycles > 0 && cycle > cfg.Cycles || cfg.Duration > 0 && time.Since(start) >= cfg.Duration || ctx.Err() != nil
		startFS, err := ImportDir(dir)
		if err != nil {
			return res, err
		}
		cmd, err := startServe(ctx, cfg, dir, addr)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return res, err
		}
		c := NewRESPClient(addr)
		st, err := readState(ctx, RESPTarget{c}, cfg.Clients)
		c.Close()
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			if ctx.Err() != nil {
				break
			}
			return res, err
		}
		if cycle > 1 {
			if problems := Check(prevState, prevHist, st, cfg.Clients); len(problems) > 0 {
				cmd.Process.Kill()
				cmd.Wait()
				res.Problems, res.KeptDir = problems, dir
				fmt.Fprintf(cfg.Out, "cycle %d: kill -9 after %v: FAIL\n", cycle-1, prevDelay.Round(time.Millisecond))
				res.Shortest, res.Reproduced = Shrink(ctx, Ops(prevHist), cfg.ShrinkTime, func(ctx context.Context, ops []Op) bool {
					return len(replay(ctx, prevFS, prevState, ops, serverReplayTarget, cfg.Clients)) > 0
				})
				return res, nil
			}
			acked, doubt := counts(prevHist)
			fmt.Fprintf(cfg.Out, "cycle %d: %d ops over RESP (%d acknowledged, %d in doubt), kill -9 after %v, %d keys, verify ok, linearizable; %s\n",
				cycle-1, len(prevHist), acked, doubt, prevDelay.Round(time.Millisecond), len(st), time.Since(start).Round(time.Millisecond))
		}
		if last {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			break
		}
		h := &History{}
		stop := make(chan struct{})
		gens := make([]*Gen, cfg.Clients)
		cseed := rng.Uint64()
		clients := make([]*redis.Client, cfg.Clients)
		for i := range gens {
			gens[i] = NewGen(cseed, fmt.Sprintf("s%d", cycle), i, true)
			clients[i] = NewRESPClient(addr)
		}
		delay := 50*time.Millisecond + time.Duration(rng.Int64N(int64(800*time.Millisecond)))
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-time.After(delay):
			case <-ctx.Done(): // interrupted: the server goes at once
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			// Answers still on the way are lost with the process; stop
			// the clients once it is gone.
			close(stop)
		}()
		runWorkload(wctx, func(i int) Target { return RESPTarget{clients[i]} }, h, gens, stop)
		cancel()
		// The server must be gone before its directory is checked (the
		// workload returns early when interrupted).
		<-stop
		if ctx.Err() != nil {
			for _, cl := range clients {
				cl.Close()
			}
			break
		}
		for _, cl := range clients {
			cl.Close()
		}
		prevHist, prevState, prevFS, prevDelay = h.Snapshot(), st, startFS, delay
		res.Ops += len(prevHist)
		res.Crashes++
		res.Cycles = cycle
		if _, problems := checkDir(ctx, dir, cfg.Clients, false); len(problems) > 0 && ctx.Err() == nil {
			res.Problems, res.KeptDir = problems, dir
			fmt.Fprintf(cfg.Out, "cycle %d: kill -9 after %v: FAIL\n", cycle, delay.Round(time.Millisecond))
			res.Shortest, res.Reproduced = Shrink(ctx, Ops(prevHist), cfg.ShrinkTime, func(ctx context.Context, ops []Op) bool {
				return len(replay(ctx, prevFS, prevState, ops, serverReplayTarget, cfg.Clients)) > 0
			})
			return res, nil
		}
	}
	res.Pass = true
	if cfg.Dir == "" {
		os.RemoveAll(dir)
	}
	return res, nil
}
