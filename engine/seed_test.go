package engine

import (
	"os"
	"strconv"
	"testing"
)

// defaultTestSeed seeds every randomized test unless MVKV_TEST_SEED is
// set: each run repeats the same workloads, so a test passes or fails
// the same way every time rather than by chance, and a failure seen once
// is seen again.
const defaultTestSeed = 1

// testSeed returns the seed of a randomized test: flag when a test flag
// gave one (-crash.seed, -stress.seed; 0 when not given), else
// MVKV_TEST_SEED when set (a soak run sets it, to a new number each
// run, for workloads the default does not reach), else defaultTestSeed.
// A test that draws several seeds takes them from this one (seed+i).
// If t fails, the seed is logged with how to reproduce it, after the
// test's own messages.
func testSeed(t testing.TB, flag uint64) uint64 {
	t.Helper()
	seed := uint64(defaultTestSeed)
	if v := os.Getenv("MVKV_TEST_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("MVKV_TEST_SEED=%q: want an unsigned decimal integer", v)
		}
		seed = n
	}
	if flag != 0 {
		seed = flag
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (MVKV_TEST_SEED=%d reproduces)", seed, seed)
		}
	})
	return seed
}

// TestTestSeed: the fixed default, MVKV_TEST_SEED over it, a test flag
// over both.
func TestTestSeed(t *testing.T) {
	t.Setenv("MVKV_TEST_SEED", "")
	if got := testSeed(t, 0); got != defaultTestSeed {
		t.Errorf("unset: seed %d, want %d", got, defaultTestSeed)
	}
	t.Setenv("MVKV_TEST_SEED", "42")
	if got := testSeed(t, 0); got != 42 {
		t.Errorf("MVKV_TEST_SEED=42: seed %d, want 42", got)
	}
	if got := testSeed(t, 7); got != 7 {
		t.Errorf("MVKV_TEST_SEED=42 and the flag 7: seed %d, want 7", got)
	}
}
