package server

import (
	"strings"
	"testing"
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
