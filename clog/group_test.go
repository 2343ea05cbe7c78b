package clog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"mvkv/vfs"
)

// variant is one of the four locking configurations of the experiment.
type variant struct {
	locking string
	group   bool
}

func (v variant) String() string {
	g := "off"
	if v.group {
		g = "on"
	}
	return fmt.Sprintf("%s-group-%s", v.locking, g)
}

func (v variant) opts(buffers int) Options {
	return Options{Buffers: buffers, Locking: v.locking, GroupUpdate: v.group}
}

var variants = []variant{{"global", false}, {"bank", false}, {"global", true}, {"bank", true}}

// agreeXids returns xids spread over 40 pages (more than a 16-slot pool
// holds), in an order that hops between pages.
func agreeXids() []uint64 {
	var xs []uint64
	for p := range uint64(40) {
		for k := range uint64(50) {
			xs = append(xs, p*XidsPerPage+k*653)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
	return xs
}

// TestVariantsAgree runs hundreds of concurrent committers (and readers)
// against every locking variant with a tiny pool, so pages are evicted and
// group updates form, then checks every status, the slot table, the segment
// files (byte for byte the same across variants), and every status again
// after reopening.
func TestVariantsAgree(t *testing.T) {
	xs := agreeXids()
	const committers = 256
	for _, buffers := range []int{16, 48} {
		var ref map[string][]byte
		for _, v := range variants {
			t.Run(fmt.Sprintf("buffers=%d/%v", buffers, v), func(t *testing.T) {
				dir := testDir(t)
				wal := &fakeWAL{}
				opts := v.opts(buffers)
				opts.FlushWAL = wal.flush
				c := mustOpen(t, vfs.OS{}, dir, opts)
				if len(c.banks) != buffers/BankSize {
					t.Fatalf("%d banks, want %d", len(c.banks), buffers/BankSize)
				}
				var wg sync.WaitGroup
				for g := range committers {
					wg.Go(func() {
						for i := g; i < len(xs); i += committers {
							x := xs[i]
							if err := c.SetStatus(x, StatusSubCommitted, 0); err != nil {
								t.Error(err)
								return
							}
							if err := c.SetStatus(x, statusFor(x), lsnFor(x)); err != nil {
								t.Error(err)
								return
							}
							// A status never goes back once set.
							y := xs[(i*7)%len(xs)]
							s, err := c.Status(y)
							if err != nil || (s != StatusInProgress && s != StatusSubCommitted && s != statusFor(y)) {
								t.Errorf("Status(%d) = %v, %v", y, s, err)
								return
							}
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				checkPool(t, c)
				for _, x := range xs {
					if s, err := c.Status(x); err != nil || s != statusFor(x) {
						t.Fatalf("Status(%d) = %v, %v; want %v", x, s, err, statusFor(x))
					}
				}
				st := c.Stats()
				t.Logf("%+v", st)
				if !v.group && st.GroupUpdates != 0 {
					t.Errorf("group updates without GroupUpdate: %+v", st)
				}
				if st.GroupMembers < st.GroupUpdates {
					t.Errorf("groups smaller than one: %+v", st)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				if f, _ := wal.state(); f < maxLSN(xs) {
					t.Errorf("WAL flushed to %d, pages hold LSNs up to %d", f, maxLSN(xs))
				}
				files := readDir(t, dir)
				if ref == nil {
					ref = files
				} else if !sameFiles(ref, files) {
					t.Errorf("segment files differ from the %v variant's", variants[0])
				}

				c = mustOpen(t, vfs.OS{}, dir, opts)
				defer c.Close()
				for _, x := range xs {
					if s, err := c.Status(x); err != nil || s != statusFor(x) {
						t.Fatalf("after reopen: Status(%d) = %v, %v; want %v", x, s, err, statusFor(x))
					}
				}
			})
		}
	}
}

func maxLSN(xs []uint64) uint64 {
	var m uint64
	for _, x := range xs {
		m = max(m, lsnFor(x))
	}
	return m
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string][]byte)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// groupLen counts the calls waiting in the group-update list.
func groupLen(c *CLOG) int {
	n := 0
	for p := c.group.Load(); p != nil; p = p.next {
		n++
	}
	return n
}

func waitGroupLen(c *CLOG, n int) {
	for groupLen(c) < n {
		runtime.Gosched()
	}
}

// TestGroupUpdateForms holds the bank locks so that every SetStatus joins
// one group, then checks that one leader set the statuses of the members on
// resident pages under its lock, that a member whose page is not resident
// falls back to the plain path (a miss), and that a member in another bank
// falls back under Locking "bank" but is served under "global".
func TestGroupUpdateForms(t *testing.T) {
	for _, locking := range []string{"bank", "global"} {
		t.Run(locking, func(t *testing.T) {
			c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: 2 * BankSize, Locking: locking, GroupUpdate: true})
			defer c.Close()
			// Pages 0 and 2 are in bank 0, page 1 in bank 1; page 4 (bank
			// 0) is never loaded before the group forms.
			for _, p := range []uint64{0, 1, 2} {
				if err := c.SetStatus(p*XidsPerPage, StatusCommitted, 0); err != nil {
					t.Fatal(err)
				}
			}
			xids := []uint64{1} // the leader's, on page 0
			for k := range uint64(10) {
				xids = append(xids, 100+k) // page 0
			}
			xids = append(xids, 2*XidsPerPage+5, 4*XidsPerPage+5, XidsPerPage+5)

			b0, b1 := &c.banks[0], &c.banks[1]
			b0.mu.Lock()
			if locking == "bank" {
				b1.mu.Lock()
			}
			before := c.Stats()
			var wg sync.WaitGroup
			set := func(x uint64) {
				wg.Go(func() {
					if err := c.SetStatus(x, statusFor(x), lsnFor(x)); err != nil {
						t.Error(err)
					}
				})
			}
			set(xids[0])
			waitGroupLen(c, 1) // the first in is the leader
			for _, x := range xids[1:] {
				set(x)
			}
			waitGroupLen(c, len(xids))
			if locking == "bank" {
				b1.mu.Unlock()
			}
			b0.mu.Unlock()
			wg.Wait()

			d := c.Stats().Sub(before)
			if d.GroupUpdates != 1 || d.GroupMembers != uint64(len(xids)) {
				t.Errorf("groups %d members %d, want 1 and %d", d.GroupUpdates, d.GroupMembers, len(xids))
			}
			if d.Misses != 1 {
				t.Errorf("misses %d, want 1 (page 4 falls back and loads)", d.Misses)
			}
			if d.Lookups != uint64(len(xids)) || d.Hits != uint64(len(xids)-1) {
				t.Errorf("lookups %d hits %d, want %d and %d", d.Lookups, d.Hits, len(xids), len(xids)-1)
			}
			if d.LockWaits < uint64(len(xids)-1) || d.LockWaitNanos == 0 {
				t.Errorf("lock waits %d (%d ns), want at least %d", d.LockWaits, d.LockWaitNanos, len(xids)-1)
			}
			for _, x := range xids {
				if s, err := c.Status(x); err != nil || s != statusFor(x) {
					t.Errorf("Status(%d) = %v, %v; want %v", x, s, err, statusFor(x))
				}
			}
			checkPool(t, c)
		})
	}
}

// TestBuffersRounding: Buffers becomes a whole number of banks.
func TestBuffersRounding(t *testing.T) {
	for _, tc := range []struct{ in, banks int }{{0, DefaultBuffers / BankSize}, {1, 1}, {16, 1}, {17, 2}, {100, 7}, {1024, 64}} {
		c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: tc.in})
		if len(c.banks) != tc.banks {
			t.Errorf("Buffers %d: %d banks, want %d", tc.in, len(c.banks), tc.banks)
		}
		if tc.banks > 1 && c.banks[0].mu == c.banks[1].mu {
			t.Errorf("Buffers %d: banks share a lock under Locking bank", tc.in)
		}
		c.Close()
	}
	c := mustOpen(t, vfs.OS{}, testDir(t), Options{Buffers: 64, Locking: "global"})
	for i := range c.banks {
		if c.banks[i].mu != c.banks[0].mu {
			t.Errorf("bank %d has its own lock under Locking global", i)
		}
	}
	c.Close()
	if _, err := Open(vfs.OS{}, testDir(t), Options{Locking: "striped", FlushWAL: func(uint64) error { return nil }}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Open with Locking striped = %v", err)
	}
}

// BenchmarkSetStatus measures SetStatus of consecutive xids (as a
// transaction manager hands them out, so committers crowd onto the latest
// page) with 1, 2, 64, 128 and 256 concurrent committers under each locking
// variant, reporting lock waits and wait time per operation and the average
// group size.
func BenchmarkSetStatus(b *testing.B) {
	for _, v := range variants {
		for _, n := range []int{1, 2, 64, 128, 256} {
			b.Run(fmt.Sprintf("%v/committers=%d", v, n), func(b *testing.B) {
				c := mustOpen(b, vfs.OS{}, testDir(b), v.opts(DefaultBuffers))
				defer c.Close()
				var next atomic.Uint64
				before := c.Stats()
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range n {
					ops := b.N / n
					if g < b.N%n {
						ops++
					}
					wg.Go(func() {
						for range ops {
							x := next.Add(1)
							if err := c.SetStatus(x, StatusCommitted, x); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				d := c.Stats().Sub(before)
				b.ReportMetric(float64(d.LockWaits)/float64(b.N), "lock-waits/op")
				b.ReportMetric(float64(d.LockWaitNanos)/float64(b.N), "wait-ns/op")
				if d.GroupUpdates > 0 {
					b.ReportMetric(float64(d.GroupMembers)/float64(d.GroupUpdates), "group-size")
				}
			})
		}
	}
}
