package main

import (
	"bytes"
	"flag"
	"regexp"
	"strings"
	"testing"

	"mvkv/engine"
)

// helpEntries splits a help text into its options: the option (up to its
// '=') and its text, wrapped lines joined.
func helpEntries(help string) map[string]string {
	entries := map[string]string{}
	var cur string
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "  --"):
			opt, rest, _ := strings.Cut(strings.TrimPrefix(line, "  "), " ")
			cur, _, _ = strings.Cut(opt, "=")
			entries[cur] = strings.TrimSpace(rest)
		case cur != "" && strings.HasPrefix(line, strings.Repeat(" ", textColumn)):
			entries[cur] += " " + strings.TrimSpace(line)
		default:
			cur = ""
		}
	}
	return entries
}

var defaultRE = regexp.MustCompile(`\(default: ([^)]*)\)$`)

// TestEngineFlagsAgree: mvkv serve -h and mvkv bench -h list every engine
// setting, each with the same default, the engine's; and both commands
// take every setting's flag with its default as the value.
func TestEngineFlagsAgree(t *testing.T) {
	helps := map[string]map[string]string{}
	for _, cmd := range []string{"serve", "bench"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "-h"}, &out, &errb); code != 0 {
			t.Fatalf("%s -h: exit %d: %s", cmd, code, errb.String())
		}
		helps[cmd] = helpEntries(out.String())
	}
	for _, s := range engine.Settings() {
		opt := "--" + flagName(s)
		var defaults []string
		for _, cmd := range []string{"serve", "bench"} {
			text, ok := helps[cmd][opt]
			if !ok {
				t.Errorf("mvkv %s -h does not list %s", cmd, opt)
				continue
			}
			m := defaultRE.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("mvkv %s -h: %s shows no default: %q", cmd, opt, text)
				continue
			}
			defaults = append(defaults, m[1])
			var out, errb bytes.Buffer
			if code := run([]string{cmd, opt + "=" + s.Default, "-h"}, &out, &errb); code != 0 {
				t.Errorf("mvkv %s %s=%s: exit %d: %s", cmd, opt, s.Default, code, errb.String())
			}
		}
		if len(defaults) == 2 && (defaults[0] != defaults[1] || defaults[0] != s.Default) {
			t.Errorf("%s: serve's default %q, bench's %q, the engine's %q", opt, defaults[0], defaults[1], s.Default)
		}
	}
}

// TestEngineFlagErrors: a bad value is refused by the setting's own
// parser, with what the setting takes, and exit status 2.
func TestEngineFlagErrors(t *testing.T) {
	for _, cmd := range []string{"serve", "bench"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "--dir", t.TempDir(), "--commit-delay", "-1"}, &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), "want 0 to 100000 microseconds, or auto") {
			t.Errorf("%s --commit-delay -1: exit %d, stderr %q", cmd, code, errb.String())
		}
		errb.Reset()
		if code := run([]string{cmd, "--dir", t.TempDir(), "--max-wal-size", "20MB"}, &out, &errb); code != 2 ||
			!strings.Contains(errb.String(), "two WAL segments") {
			t.Errorf("%s --max-wal-size 20MB: exit %d, stderr %q", cmd, code, errb.String())
		}
	}
}

// TestEngineFlagTrimmed: a flag's value may have spaces around it (a
// script's quoting), which Setting.Set refuses: the flag drops them.
func TestEngineFlagTrimmed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var o engine.Options
	engineFlags(fs, &o)
	if err := fs.Parse([]string{"--zero-damaged-pages= on ", "--commit-siblings=\t3", "--max-wal-size", " 64MB"}); err != nil {
		t.Fatal(err)
	}
	if !o.ZeroDamagedPages || o.CommitSiblings != 3 || o.MaxWALSize != 64<<20 {
		t.Errorf("flags with spaces around their values: zero_damaged_pages %v, commit_siblings %d, max_wal_size %d; want true, 3, 64MB", o.ZeroDamagedPages, o.CommitSiblings, o.MaxWALSize)
	}
}

// TestMaxWALSizeAgainstTheDirectorysSegments: without --wal-segment-size,
// max_wal_size is checked against the segment size of the WAL already in
// the directory, which the database keeps, not against the default.
func TestMaxWALSizeAgainstTheDirectorysSegments(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o := withDiskSegmentSize(engine.Options{MaxWALSize: 2 << 20}, dir)
	if err := o.Validate(); err != nil {
		t.Fatalf("max_wal_size 2MB over a WAL of 1MB segments: %v", err)
	}
	o = withDiskSegmentSize(engine.Options{MaxWALSize: 2 << 20}, t.TempDir())
	if err := o.Validate(); err == nil {
		t.Fatal("max_wal_size 2MB for a new database with 16MB segments validated")
	}
}
