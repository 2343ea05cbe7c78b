package wal

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mvkv/vfs"
)

var (
	benchRotations = flag.Float64("wal.rotations", 250, "BenchmarkGroupCommit: disk model rotations per second (0: none)")
	benchLatency   = flag.Duration("wal.fsync-latency", 0, "BenchmarkGroupCommit: disk model fixed sync latency")
	benchDepth     = flag.Int("wal.depth", 0, "BenchmarkGroupCommit: pipeline depth (0: default)")
	benchDelays    = flag.String("wal.delays", "0,-1", "BenchmarkGroupCommit: commit delays in µs (-1: auto)")
	benchClients   = flag.String("wal.clients", "1,2,4,8,16,32,48", "BenchmarkGroupCommit: committer counts")
	benchPolicies  = flag.String("wal.policies", "serial,pipelined", "BenchmarkGroupCommit: flusher policies")
	benchDir       = flag.String("wal.dir", "", "BenchmarkGroupCommit: parent directory of the log (default: the test's temporary directory; /dev/shm takes the real sync out of a model)")
	benchWork      = flag.Duration("wal.work", 0, "BenchmarkGroupCommit: CPU work (a spin) per transaction before its commit")
)

// BenchmarkGroupCommit runs N committers, each inserting a 100-byte record
// and flushing it in a loop, by default over a 250 rotations/s disk model
// (a 15k rpm disk, the 2009 thread's; see the wal.* flags), and reports
// commits per second, the percentage of the optimum (N x rotations/s),
// commits per write-and-sync round, and syncs per second. One op is one
// commit.
//
//	go test -run XXX -bench GroupCommit -benchtime 3s ./wal
//	go test -run XXX -bench GroupCommit -wal.rotations 0 ./wal   # the real disk
func BenchmarkGroupCommit(b *testing.B) {
	model := vfs.DiskModel{RotationsPerSec: *benchRotations, FsyncLatency: *benchLatency}
	for _, policy := range strings.Split(*benchPolicies, ",") {
		policy := FlusherPolicy(policy)
		for _, delay := range benchInts(b, *benchDelays) {
			for _, n := range benchInts(b, *benchClients) {
				name := fmt.Sprintf("%s/delay=%d/clients=%d", policy, delay, n)
				b.Run(name, func(b *testing.B) {
					benchGroupCommit(b, vfs.WithDiskModel(vfs.OS{}, model), policy, delay, n, model.RotationsPerSec)
				})
			}
		}
	}
}

func benchInts(b *testing.B, list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("bad list %q: %v", list, err)
		}
		out = append(out, v)
	}
	return out
}

// spin burns about d of CPU, standing in for a transaction's work.
func spin(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}

func benchGroupCommit(b *testing.B, fsys vfs.FS, policy FlusherPolicy, delay, n int, rotations float64) {
	opts := Options{Flusher: policy, CommitDelay: delay, WALWriterDelay: time.Hour, PipelineDepth: *benchDepth,
		ActiveTransactions: func() int { return n }}
	dir := b.TempDir()
	if *benchDir != "" {
		var err error
		if dir, err = os.MkdirTemp(*benchDir, "walbench"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	w, err := OpenWriter(fsys, dir, 0, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	data := make([]byte, 100)
	var next atomic.Int64
	var wg sync.WaitGroup
	before := w.Stats()
	t0 := time.Now()
	b.ResetTimer()
	for range n {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if *benchWork > 0 {
					spin(*benchWork)
				}
				_, end, err := w.Insert(16, 1, data)
				if err == nil {
					err = w.Flush(end)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	el := time.Since(t0).Seconds()
	d := w.Stats().Sub(before)
	tps := float64(b.N) / el
	b.ReportMetric(tps, "tps")
	if rotations > 0 {
		b.ReportMetric(100*tps/(float64(n)*rotations), "%opt")
	}
	if d.Flushes > 0 {
		b.ReportMetric(float64(b.N)/float64(d.Flushes), "commits/round")
	}
	b.ReportMetric(float64(d.Syncs)/el, "syncs/s")
	w.fmu.Lock()
	b.ReportMetric(w.overlap.rate[0], "one-at-a-time-commits/s")
	b.ReportMetric(w.overlap.rate[1], "overlapped-commits/s")
	w.fmu.Unlock()
}
