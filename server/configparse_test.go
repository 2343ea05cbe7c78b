package server

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConfigSetIntegersAsRedis: CONFIG SET of an integer knob takes the
// integer as Redis's string2ll does and a memory knob as its memtoull, so
// "+5", "-0" and, for plain integers, "05" are refused and change nothing,
// as redis-server 7 refuses them; what Redis takes still sets.
func TestConfigSetIntegersAsRedis(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	get := func(k string) string {
		r.cmd("CONFIG", "GET", k)
		return r.reply()
	}
	for _, c := range []struct {
		knob string
		bad  []string
		good string
	}{
		{"maxclients", []string{"+5", "-0", "05", " 5", "5 ", "", "0x10", "1e3", "5.0", "99999999999999999999"}, "500"},
		{"timeout", []string{"+5", "-0", "05", "-5", "abc"}, "7"},
		{"slowlog-max-len", []string{"+5", "-0", "05"}, "64"},
		{"hz", []string{"+5", "-0", "05", "-1", "abc", "2147483648"}, "50"},
		{"hash-max-listpack-entries", []string{"+5", "-0", "05"}, "100"},
		{"maxmemory", []string{"+5", "-0", "-5", "5 ", "kb", ""}, "05"},
		{"proto-max-bulk-len", []string{"+2097152", "-0", "2mb ", "1"}, "2mb"},
	} {
		for _, v := range c.bad {
			before := get(c.knob)
			r.cmd("CONFIG", "SET", c.knob, v)
			if got := r.reply(); !strings.HasPrefix(got, "-ERR CONFIG SET failed") {
				t.Errorf("CONFIG SET %s %q: %q, want Redis's refusal", c.knob, v, got)
			}
			if after := get(c.knob); after != before {
				t.Errorf("CONFIG SET %s %q was refused but changed it: %q to %q", c.knob, v, before, after)
			}
		}
		r.cmd("CONFIG", "SET", c.knob, c.good)
		if got := r.reply(); got != "+OK\r\n" {
			t.Errorf("CONFIG SET %s %q: %q, want +OK", c.knob, c.good, got)
		}
	}
}

// TestConfigHz: hz takes 0 to 2147483647 and clamps it to 1 to 500, as
// redis-server 7 does (CONFIG GET and INFO's hz and configured_hz show
// the clamped value), and the server's cron retimes its ticker to it.
func TestConfigHz(t *testing.T) {
	ts := startServer(t, Config{})
	r := ts.raw(t)
	waitPeriod := func(want time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ts.s.cronPeriod.Load() != int64(want); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("cron period %v after a minute, want %v", time.Duration(ts.s.cronPeriod.Load()), want)
			}
		}
	}
	waitPeriod(100 * time.Millisecond) // the default, hz 10
	for _, c := range []struct{ set, get string }{{"0", "1"}, {"1000", "500"}, {"2147483647", "500"}, {"1", "1"}, {"250", "250"}} {
		r.cmd("CONFIG", "SET", "hz", c.set)
		if got := r.reply(); got != "+OK\r\n" {
			t.Fatalf("CONFIG SET hz %s: %q", c.set, got)
		}
		r.cmd("CONFIG", "GET", "hz")
		if got, want := r.reply(), "*2\r\n$2\r\nhz\r\n$"+strconv.Itoa(len(c.get))+"\r\n"+c.get+"\r\n"; got != want {
			t.Errorf("CONFIG GET hz after SET %s: %q, want %q", c.set, got, want)
		}
	}
	r.cmd("INFO", "server")
	if got := r.reply(); !strings.Contains(got, "\r\nhz:250\r\n") || !strings.Contains(got, "\r\nconfigured_hz:250\r\n") {
		t.Errorf("INFO server does not show hz 250:\n%s", got)
	}
	waitPeriod(4 * time.Millisecond)
}

// TestConfigHzKeepsRateSamplesAt100ms: INFO's instantaneous rates are
// sampled every 100 ms whatever hz is, as Redis's serverCron samples them
// with run_with_period(100): at hz 500 the cron ticks 50 times between
// two samples, where a sample a tick made the rates the mean over the
// last 32 ms only.
func TestConfigHzKeepsRateSamplesAt100ms(t *testing.T) {
	ts := startServer(t, Config{Hz: 500})
	for deadline := time.Now().Add(time.Minute); ts.s.cronPeriod.Load() != int64(2*time.Millisecond); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cron period %v after a minute, want 2ms", time.Duration(ts.s.cronPeriod.Load()))
		}
	}
	samples := func() uint64 {
		ts.s.opsRate.mu.Lock()
		defer ts.s.opsRate.mu.Unlock()
		return ts.s.opsRate.taken
	}
	loops0, samples0 := ts.s.cronLoops.Load(), samples()
	for deadline := time.Now().Add(time.Minute); ts.s.cronLoops.Load()-loops0 < 200; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d cron ticks in a minute at hz 500", ts.s.cronLoops.Load()-loops0)
		}
	}
	loops, n := ts.s.cronLoops.Load()-loops0, samples()-samples0
	if n > loops/50+2 {
		t.Errorf("%d rate samples in %d cron ticks at hz 500, want one in 50", n, loops)
	}
	if n == 0 {
		t.Errorf("no rate sample in %d cron ticks at hz 500", loops)
	}
}

// TestExpireSliceKeysScaleWithHz: the active expiry walk reads the same
// keys a second at any hz, in slices of 20,000 / hz keys a tick, so that a
// higher hz does not multiply its CPU (a fixed 2,000-key slice a tick took
// 37% of a core at hz 500).
func TestExpireSliceKeysScaleWithHz(t *testing.T) {
	for hz, want := range map[int64]int64{1: 20000, 10: 2000, 100: 200, 500: 40} {
		if got := expireSliceKeys(hz); got != want || got*hz != expireKeysPerSecond {
			t.Errorf("hz %d: %d keys a slice, want %d", hz, got, want)
		}
	}
}

// TestConfigHzStormKeepsTheCronTicking: CONFIG SET hz sent faster than
// the cron ticks does not hold its ticks off; each change retimes the
// next tick from the last one, where a ticker restarted at each SET never
// fired while SETs came more often than a tick (at hz 1 or 2, one every
// 20 ms: no expiry cycle, no rate sample, for as long as they came).
func TestConfigHzStormKeepsTheCronTicking(t *testing.T) {
	ts := startServer(t, Config{Hz: 1})
	for deadline := time.Now().Add(time.Minute); ts.s.cronPeriod.Load() != int64(time.Second); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cron period %v after a minute, want 1s", time.Duration(ts.s.cronPeriod.Load()))
		}
	}
	r := ts.raw(t)
	loops0 := ts.s.cronLoops.Load()
	deadline := time.Now().Add(time.Minute)
	for i := 0; ts.s.cronLoops.Load()-loops0 < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d cron ticks in a minute of CONFIG SET hz 1 and 2 every 20 ms", ts.s.cronLoops.Load()-loops0)
		}
		r.cmd("CONFIG", "SET", "hz", strconv.Itoa(1+i%2))
		if got := r.reply(); got != "+OK\r\n" {
			t.Fatalf("CONFIG SET hz: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
