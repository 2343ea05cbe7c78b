package wal

import (
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"
)

// HistogramBuckets is the number of buckets of a Histogram: values 0..3 get
// a bucket each, and every power of two from 4 up is split into four equal
// buckets, so a bucket's width is at most a quarter of its lower bound and
// every uint64 has a bucket.
const HistogramBuckets = 4 + 62*4

// Histogram counts non-negative integer observations (nanoseconds, commit
// counts) in fixed, logarithmic buckets (HdrHistogram's layout with two
// sub-bucket bits). It is a plain value: copy it, compare it, Sub two
// snapshots for an interval. Percentiles are exact to within a bucket
// (about 25%); Sum and Count are exact.
type Histogram struct {
	Buckets [HistogramBuckets]uint64 // observation counts, by bucket index (see HistogramBuckets)
	Count   uint64                   // observations
	Sum     uint64                   // sum of the observed values
	// Nanos marks values as nanoseconds, so that String prints durations.
	Nanos bool
}

// bucketOf returns the index of v's bucket.
func bucketOf(v uint64) int {
	if v < 4 {
		return int(v)
	}
	e := bits.Len64(v) - 1 // 2..63: v is in [2^e, 2^(e+1))
	sub := int(v>>(e-2)) & 3
	return 4 + (e-2)*4 + sub
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < 4 {
		return uint64(i), uint64(i)
	}
	e := (i-4)/4 + 2
	sub := uint64((i - 4) % 4)
	width := uint64(1) << (e - 2)
	lo = uint64(1)<<e + sub*width
	return lo, lo + width - 1
}

// Observe adds one observation of v. Not safe for concurrent use; the
// Writer records into an atomic form and hands out Histogram snapshots.
func (h *Histogram) Observe(v uint64) {
	h.Buckets[bucketOf(v)]++
	h.Count++
	h.Sum += v
}

// Sub returns h minus o, bucket by bucket: the observations made between
// snapshot o and snapshot h.
func (h Histogram) Sub(o Histogram) Histogram {
	r := Histogram{Count: h.Count - o.Count, Sum: h.Sum - o.Sum, Nanos: h.Nanos}
	for i := range h.Buckets {
		r.Buckets[i] = h.Buckets[i] - o.Buckets[i]
	}
	return r
}

// Mean returns the mean observation, 0 for an empty histogram.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Count)
}

// Quantile returns the value at quantile q (0..1; 0.99 is the 99th
// percentile): the upper bound of the bucket holding that observation, so
// it never understates. It returns 0 for an empty histogram.
func (h Histogram) Quantile(q float64) uint64 {
	if h.Count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q*float64(h.Count) + 0.5)
	rank = min(max(rank, 1), h.Count)
	var seen uint64
	for i, c := range h.Buckets {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			return hi
		}
	}
	return 0 // Buckets disagree with Count (a torn snapshot); say nothing.
}

// Max returns the upper bound of the highest non-empty bucket.
func (h Histogram) Max() uint64 {
	for i := len(h.Buckets) - 1; i >= 0; i-- {
		if h.Buckets[i] > 0 {
			_, hi := bucketBounds(i)
			return hi
		}
	}
	return 0
}

// String summarizes h on one line: count, mean, p50, p90, p99 and max, as
// durations when h.Nanos is set.
func (h Histogram) String() string {
	if h.Count == 0 {
		return "n=0"
	}
	f := func(v float64) string {
		if h.Nanos {
			return time.Duration(v).Round(time.Microsecond).String()
		}
		return fmt.Sprintf("%.4g", v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "n=%d mean=%s", h.Count, f(h.Mean()))
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
		fmt.Fprintf(&b, " %s=%s", q.name, f(float64(h.Quantile(q.q))))
	}
	fmt.Fprintf(&b, " max=%s", f(float64(h.Max())))
	return b.String()
}

// atomicHistogram is the live form of a Histogram, safe for concurrent
// Observe and snapshot (a snapshot taken during an Observe may count it in
// Count but not yet in Buckets).
type atomicHistogram struct {
	buckets    [HistogramBuckets]atomic.Uint64
	count, sum atomic.Uint64
}

func (a *atomicHistogram) observe(v uint64) {
	a.buckets[bucketOf(v)].Add(1)
	a.sum.Add(v)
	a.count.Add(1)
}

func (a *atomicHistogram) snapshot(nanos bool) Histogram {
	h := Histogram{Nanos: nanos}
	h.Count = a.count.Load()
	h.Sum = a.sum.Load()
	for i := range a.buckets {
		h.Buckets[i] = a.buckets[i].Load()
	}
	return h
}
