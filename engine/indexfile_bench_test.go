package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"mvkv/internal/heap"
)

// syntheticIndexFile encodes an index file of n pgbench-like keys.
func syntheticIndexFile(n int) []byte {
	var body []byte
	prev := ""
	for i := range n {
		k := fmt.Sprintf("a:%010d", i)
		shared := 0
		for shared < len(prev) && prev[shared] == k[shared] {
			shared++
		}
		body = binary.AppendUvarint(body, uint64(shared))
		body = binary.AppendUvarint(body, uint64(len(k)-shared))
		body = append(body, k[shared:]...)
		body = appendTID(body, heap.TID{Block: uint32(i / 60), Slot: uint16(i % 60)})
		prev = k
	}
	head := indexFileHeader{keys: uint64(n)}.encode()
	sum := crc32.Update(crc32.Checksum(body, castagnoli), castagnoli, head)
	out := append(head, body...)
	return binary.LittleEndian.AppendUint32(out, sum)
}

// gcMetrics reads the runtime metrics the index benchmarks report.
type gcMetrics struct {
	heapObjects float64 // bytes in live and not yet swept heap objects
	gcCPU       float64 // seconds of CPU the collector used
	pauses      *metrics.Float64Histogram
}

func readGCMetrics() gcMetrics {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/sched/pauses/total/gc:seconds"},
	}
	metrics.Read(s)
	return gcMetrics{
		heapObjects: float64(s[0].Value.Uint64()),
		gcCPU:       s[1].Value.Float64(),
		pauses:      s[2].Value.Float64Histogram(),
	}
}

// maxPauseSince returns the upper bound of the largest bucket of stop-the-
// world GC pauses that gained counts between a and b.
func maxPauseSince(a, b gcMetrics) float64 {
	for i := len(b.pauses.Counts) - 1; i >= 0; i-- {
		if b.pauses.Counts[i] > a.pauses.Counts[i] {
			return b.pauses.Buckets[i+1]
		}
	}
	return 0
}

// BenchmarkLoadIndexFile decodes an index file of n keys of 12 bytes into
// an empty index: the work Open does after a clean shutdown. Besides the
// time per key it reports, from runtime/metrics, the heap bytes the
// loaded index holds per key beyond the key bytes (B/key-overhead), the
// collector's CPU per key during the loads, the longest stop-the-world
// pause during the loads, and the time of a full collection with the
// index loaded (gc-ns), to show that neither pauses nor collections grow
// much with the key count.
func BenchmarkLoadIndexFile(b *testing.B) {
	for _, n := range []int{1_000_000, 3_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			file := syntheticIndexFile(n)
			b.SetBytes(int64(len(file)))
			runtime.GC()
			before := readGCMetrics()
			b.ResetTimer()
			var ix *index
			for range b.N {
				ix = newIndex()
				if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, 0, nil, nil); err != nil {
					b.Fatal(err)
				}
				if ix.len() != n {
					b.Fatalf("%d keys", ix.len())
				}
			}
			b.StopTimer()
			after := readGCMetrics()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
			b.ReportMetric((after.gcCPU-before.gcCPU)*1e9/float64(b.N*n), "gc-cpu-ns/key")
			b.ReportMetric(maxPauseSince(before, after)*1e9, "max-pause-ns")
			// What the last index holds: the heap with it, after a full
			// collection, less the heap without it.
			runtime.GC()
			with := readGCMetrics()
			t0 := time.Now()
			runtime.GC()
			gcTook := time.Since(t0)
			runtime.KeepAlive(ix)
			runtime.GC()
			without := readGCMetrics()
			b.ReportMetric((with.heapObjects-without.heapObjects)/float64(n)-12, "B/key-overhead")
			b.ReportMetric(float64(gcTook.Nanoseconds()), "gc-ns")
		})
	}
}

// BenchmarkIndexGet looks up random keys of an index of a million keys
// loaded from a file, from parallel goroutines: the point lookup every
// read and write makes.
func BenchmarkIndexGet(b *testing.B) {
	const n = 1_000_000
	file := syntheticIndexFile(n)
	ix := newIndex()
	if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, 0, nil, nil); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "a:%010d", rand.IntN(n))
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			i = (i + 1) % len(keys)
			if ix.get(keys[i]) == nil {
				b.Fatalf("%s not found", keys[i])
			}
		}
	})
}

// BenchmarkIndexRemove removes the keys of an index of 1.26 million keys
// loaded from a file in random order, as a vacuum after a mass delete does
// one key at a time; b.N counts removals.
func BenchmarkIndexRemove(b *testing.B) {
	const n = 1_260_000
	file := syntheticIndexFile(n)
	var ix *index
	var order []int
	for i := 0; i < b.N; i++ {
		if i%n == 0 {
			b.StopTimer()
			ix = newIndex()
			if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, 0, nil, nil); err != nil {
				b.Fatal(err)
			}
			order = rand.Perm(n)
			b.StartTimer()
		}
		e := ix.get(fmt.Appendf(nil, "a:%010d", order[i%n]))
		ix.removeEntry(e)
	}
}

// BenchmarkIndexInsert adds keys in random order to an index of a million
// keys loaded from a file: the index's part of writing a new key.
func BenchmarkIndexInsert(b *testing.B) {
	const n = 1_000_000
	file := syntheticIndexFile(n)
	ix := newIndex()
	if _, err := decodeIndexFile(bytes.NewReader(file), int64(len(file)), "index", ix, 1<<30, 0, nil, nil); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, b.N)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "a:%010d.%d", rand.IntN(n), i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ix.getOrCreate(keys[i])
	}
}
