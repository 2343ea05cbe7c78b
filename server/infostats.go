package server

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cmdStats are one command's counters for INFO commandstats, as Redis's
// cmdstat_<name>: calls run, their time, calls refused before running
// (rejected) and calls answered with an error (failed).
type cmdStats struct {
	calls, usec, rejected, failed atomic.Uint64
}

// serverStats are the counters INFO reports and CONFIG RESETSTAT resets.
type serverStats struct {
	// byCmd holds a command's counters by its name, a container's
	// subcommands' by "client|list" and so on, as Redis 7 counts them;
	// fixed at New, the counters are atomic.
	byCmd map[string]*cmdStats

	rejectedCalls atomic.Uint64 // commands refused before running
	errorReplies  atomic.Uint64 // replies that were errors

	mu     sync.Mutex
	errors map[string]uint64 // by error prefix ("ERR", "WRONGPASS"); guarded by mu

	peakMem atomic.Uint64 // the largest used_memory INFO has seen
}

func newServerStats() *serverStats {
	st := &serverStats{byCmd: map[string]*cmdStats{}, errors: map[string]uint64{}}
	for _, c := range commandTable {
		st.byCmd[c.name] = &cmdStats{}
	}
	for name := range redisMeta {
		if parent, _, ok := strings.Cut(name, "|"); ok && commandTable[parent] != nil {
			st.byCmd[name] = &cmdStats{}
		}
	}
	return st
}

// of returns the counters of the command args run as c: those of its
// subcommand when c is a container (CLIENT, CONFIG, ...) and args name
// a subcommand it has; nil for a container called with an unknown one,
// which Redis counts nowhere but in rejected_calls and errorstats.
func (st *serverStats) of(c *command, args [][]byte) *cmdStats {
	if len(args) > 1 && isContainer(c.name) {
		return st.byCmd[c.name+"|"+lower(args[1])]
	}
	return st.byCmd[c.name]
}

// containers are the commands whose first argument names a subcommand.
var containers = func() map[string]bool {
	m := map[string]bool{}
	for name := range redisMeta {
		if parent, _, ok := strings.Cut(name, "|"); ok {
			m[parent] = true
		}
	}
	return m
}()

func isContainer(name string) bool { return containers[name] }

// maxErrorPrefixes bounds errorstats, as Redis's 128.
const maxErrorPrefixes = 128

// noteError counts an error reply by its first word.
func (st *serverStats) noteError(reply []byte) {
	st.errorReplies.Add(1)
	msg := reply[1:]
	end := len(msg)
	for i, b := range msg {
		if b == ' ' || b == '\r' {
			end = i
			break
		}
	}
	prefix := string(msg[:end])
	st.mu.Lock()
	if _, ok := st.errors[prefix]; ok || len(st.errors) < maxErrorPrefixes {
		st.errors[prefix]++
	}
	st.mu.Unlock()
}

func (st *serverStats) reset() {
	for _, c := range st.byCmd {
		c.calls.Store(0)
		c.usec.Store(0)
		c.rejected.Store(0)
		c.failed.Store(0)
	}
	st.rejectedCalls.Store(0)
	st.errorReplies.Store(0)
	st.mu.Lock()
	st.errors = map[string]uint64{}
	st.mu.Unlock()
}

func (st *serverStats) commandLines() []string {
	var lines []string
	for name, cs := range st.byCmd {
		calls, rej, failed := cs.calls.Load(), cs.rejected.Load(), cs.failed.Load()
		if calls == 0 && rej == 0 && failed == 0 {
			continue
		}
		usec := cs.usec.Load()
		per := 0.0
		if calls > 0 {
			per = float64(usec) / float64(calls)
		}
		lines = append(lines, fmt.Sprintf("cmdstat_%s:calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,failed_calls=%d",
			name, calls, usec, per, rej, failed))
	}
	sort.Strings(lines)
	return lines
}

func (st *serverStats) errorLines() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	lines := make([]string, 0, len(st.errors))
	for p, n := range st.errors {
		lines = append(lines, fmt.Sprintf("errorstat_%s:count=%d", p, n))
	}
	sort.Strings(lines)
	return lines
}

// bytesToHuman formats n as Redis's bytesToHuman: 1.03M and so on.
func bytesToHuman(n uint64) string {
	f := float64(n)
	switch {
	case n < 1024:
		return strconv.FormatUint(n, 10) + "B"
	case n < 1<<20:
		return fmt.Sprintf("%.2fK", f/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.2fM", f/(1<<20))
	case n < 1<<40:
		return fmt.Sprintf("%.2fG", f/(1<<30))
	}
	return fmt.Sprintf("%.2fT", f/(1<<40))
}

// memoryLines is INFO's memory section: used_memory is what the Go heap
// holds (the buffer pool included, allocated at Open), used_memory_rss
// the resident set from /proc (0 where there is none), the peak the
// largest used_memory an INFO saw.
func (s *Server) memoryLines() []string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	used := ms.HeapAlloc
	for {
		p := s.stats.peakMem.Load()
		if used <= p || s.stats.peakMem.CompareAndSwap(p, used) {
			break
		}
	}
	peak := s.stats.peakMem.Load()
	rss := residentBytes()
	frag := 0.0
	if used > 0 {
		frag = float64(rss) / float64(used)
	}
	return []string{
		fmt.Sprintf("used_memory:%d", used),
		"used_memory_human:" + bytesToHuman(used),
		fmt.Sprintf("used_memory_rss:%d", rss),
		"used_memory_rss_human:" + bytesToHuman(rss),
		fmt.Sprintf("used_memory_peak:%d", peak),
		"used_memory_peak_human:" + bytesToHuman(peak),
		fmt.Sprintf("used_memory_sys:%d", ms.Sys),
		fmt.Sprintf("mem_fragmentation_ratio:%.2f", frag),
		"maxmemory:" + s.param("maxmemory", "0"),
		"maxmemory_human:" + bytesToHuman(mustUint(s.param("maxmemory", "0"))),
		"maxmemory_policy:" + s.param("maxmemory-policy", "noeviction"),
		"mem_allocator:go-" + runtime.Version(),
	}
}

func mustUint(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }

// residentBytes reads the process's resident set size from
// /proc/self/statm; 0 where it cannot.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// cpuLines is INFO's cpu section from getrusage, in Redis's format.
func cpuLines() []string {
	tv := func(t syscall.Timeval) string {
		return fmt.Sprintf("%d.%06d", t.Sec, t.Usec)
	}
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	return []string{
		"used_cpu_sys:" + tv(self.Stime),
		"used_cpu_user:" + tv(self.Utime),
		"used_cpu_sys_children:" + tv(children.Stime),
		"used_cpu_user_children:" + tv(children.Utime),
	}
}

// replicationLines is INFO's replication section: a master without
// replicas. master_repl_offset is the WAL's length in bytes, the stream a
// replica would follow.
func (s *Server) replicationLines(walBytes uint64) []string {
	return []string{
		"role:master",
		"connected_slaves:0",
		"master_failover_state:no-failover",
		"master_replid:" + s.replID,
		"master_replid2:0000000000000000000000000000000000000000",
		fmt.Sprintf("master_repl_offset:%d", walBytes),
		"second_repl_offset:-1",
		"repl_backlog_active:0",
		"repl_backlog_size:1048576",
		"repl_backlog_first_byte_offset:0",
		"repl_backlog_histlen:0",
	}
}

// observeCommand counts a command that ran, for commandstats: its time,
// and whether its reply is an error.
func (st *serverStats) observeCommand(c *command, args [][]byte, took time.Duration, failed bool) {
	cs := st.of(c, args)
	if cs == nil {
		return
	}
	cs.calls.Add(1)
	cs.usec.Add(uint64(took.Microseconds()))
	if failed {
		cs.failed.Add(1)
	}
}
