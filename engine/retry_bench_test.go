package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUpdateCrossingKeys runs DB.Update on 4 goroutines, each
// transaction reading and rewriting the same two keys (in opposite orders
// on alternate goroutines), and reports the runs of the function that did
// not commit per commit ("aborts/commit"): what the retry loop's backoff
// is for. The "none" case reruns at once, as the loop did without it.
func BenchmarkUpdateCrossingKeys(b *testing.B) {
	b.Run("backoff", func(b *testing.B) { benchCrossingKeys(b, false) })
	b.Run("none", func(b *testing.B) { benchCrossingKeys(b, true) })
}

func benchCrossingKeys(b *testing.B, noBackoff bool) {
	db := openTest(b, b.TempDir(), Options{MaxRetries: 1 << 20, Autovacuum: noAutovacuum})
	defer db.Close()
	if noBackoff {
		db.testRetryWait = func(int, time.Duration) time.Duration { return 0 }
	}
	mustPut(b, db, "a", "0")
	mustPut(b, db, "b", "0")
	const workers = 4
	var runs, commits atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	b.ResetTimer()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, second := []byte("a"), []byte("b")
			if w%2 == 1 {
				first, second = second, first
			}
			for next.Add(1) <= int64(b.N) {
				err := db.Update(context.Background(), func(tx *Txn) error {
					runs.Add(1)
					for _, k := range [][]byte{first, second} {
						v, err := tx.Get(k)
						if err != nil {
							return err
						}
						if err := tx.Put(k, fmt.Appendf(nil, "%s.", v[:min(len(v), 8)])); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if c := commits.Load(); c > 0 {
		b.ReportMetric(float64(runs.Load()-c)/float64(c), "aborts/commit")
	}
}
