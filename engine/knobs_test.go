package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// TestEnsureDefaults: the zero Options take the defaults they always had,
// a second call changes nothing, and the stand-ins for a setting's 0 are
// kept.
func TestEnsureDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	switch {
	case o.SharedBuffers != 128<<20, o.FillFactor != 100, o.SynchronousCommit != SyncCommitOn,
		o.EarlyLockRelease == nil || !*o.EarlyLockRelease, o.CommitDelay != 0, o.CommitSiblings != 5,
		o.WALWriterDelay != 200*time.Millisecond, o.WALFlusher != WALFlusherPipelined, o.WALSegmentSize != 16<<20,
		o.CLOGBuffers != 32, o.CLOGLocking != CLOGLockingBank, o.CLOGGroupUpdate == nil || !*o.CLOGGroupUpdate,
		o.CheckpointTimeout != 5*time.Minute, o.MaxWALSize != 1<<30, o.LockTimeout != 0, o.MaxRetries != 10,
		o.Autovacuum == nil || !*o.Autovacuum, o.AutovacuumVacuumThreshold != 50, o.AutovacuumVacuumScaleFactor != 0.2,
		o.AutovacuumNaptime != time.Minute, o.VacuumFreezeMinAge != 50_000_000, o.VacuumFreezeTableAge != 150_000_000,
		o.AutovacuumFreezeMaxAge != 200_000_000, o.VisibilityMap != VisibilityMapCrashSafe, o.FS == nil, o.Logger == nil:
		t.Fatalf("defaults: %+v", o)
	}
	s := Options{CommitSiblings: NoCommitSiblings, CommitDelay: CommitDelayAuto, VacuumFreezeMinAge: -1,
		AutovacuumVacuumScaleFactor: -1, CheckpointTimeout: -1, MaxRetries: -1}
	s.EnsureDefaults().EnsureDefaults()
	if s.CommitSiblings != NoCommitSiblings || s.CommitDelay != CommitDelayAuto || s.VacuumFreezeMinAge != -1 ||
		s.AutovacuumVacuumScaleFactor != -1 || s.CheckpointTimeout != -1 || s.MaxRetries != 10 {
		t.Fatalf("stand-ins: %+v", s)
	}
	r, err := s.withDefaults()
	if err != nil || r.CommitSiblings != 0 || r.VacuumFreezeMinAge != 0 {
		t.Fatalf("resolved: %+v, %v", r, err)
	}
	if wal.DefaultFlusher != o.WALFlusher {
		t.Fatalf("the wal package's default flusher %q is not the engine's %q", wal.DefaultFlusher, o.WALFlusher)
	}
}

// TestSettingsTable: every setting shows its default for the zero Options,
// takes its own text back, and refuses a value outside its range.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Settings() {
		if seen[s.Name] || s.Name != strings.ToLower(s.Name) || s.Description == "" || s.Syntax == "" {
			t.Errorf("%s: duplicate, or no description or syntax", s.Name)
		}
		seen[s.Name] = true
		// transaction_buffers' default, 0, is derived from shared_buffers.
		if got := s.Show(Options{}); got != s.Default && s.Name != "transaction_buffers" {
			t.Errorf("%s: zero Options show %q, Default is %q", s.Name, got, s.Default)
		}
		var o Options
		if err := s.Set(&o, s.Default); err != nil {
			t.Errorf("%s: Set(Default %q): %v", s.Name, s.Default, err)
		}
		if got := s.Show(o); got != s.Default && s.Name != "transaction_buffers" {
			t.Errorf("%s: Set(%q) shows %q", s.Name, s.Default, got)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("%s: Set(Default) does not validate: %v", s.Name, err)
		}
		if err := s.Set(&o, "bogus"); !errors.Is(err, ErrInvalidSetting) {
			t.Errorf("%s: Set(bogus) = %v, want ErrInvalidSetting", s.Name, err)
		}
		// Spaces around a good value are refused, not trimmed away.
		for _, v := range []string{" " + s.Default, s.Default + " ", "\t" + s.Default + "\n"} {
			before := s.Show(o)
			err := s.Set(&o, v)
			if want := fmt.Sprintf("want no spaces around the value %q", v); !errors.Is(err, ErrInvalidSetting) || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("%s: Set(%q) = %v, want ErrInvalidSetting ending %q", s.Name, v, err, want)
			}
			if s.Show(o) != before {
				t.Errorf("%s: a refused Set(%q) changed the value to %q", s.Name, v, s.Show(o))
			}
		}
		if got, ok := LookupSetting(strings.ToUpper(s.Name)); !ok || got.Name != s.Name {
			t.Errorf("LookupSetting(%s) = %v, %v", strings.ToUpper(s.Name), got.Name, ok)
		}
	}
	for _, c := range []struct{ name, in, show string }{
		{"commit_delay", "auto", "auto"}, {"commit_delay", "100000", "100000"}, {"commit_delay", "-1", ""},
		{"commit_delay", "100001", ""}, {"commit_siblings", "0", "0"}, {"commit_siblings", "1001", ""},
		{"checkpoint_timeout", "0", "0"}, {"checkpoint_timeout", "86401", ""}, {"checkpoint_timeout", "90s", "90"},
		{"vacuum_freeze_min_age", "0", "0"}, {"vacuum_freeze_table_age", "3000000000", ""},
		{"autovacuum_vacuum_scale_factor", "0", "0"}, {"autovacuum_vacuum_scale_factor", "NaN", ""},
		{"autovacuum_vacuum_threshold", "0", "0"}, {"fillfactor", "9", ""}, {"shared_buffers", "64", "512kB"},
		{"shared_buffers", "8kB", ""}, {"max_wal_size", "64", "64MB"}, {"max_wal_size", "1MB", ""},
		{"wal_segment_size", "3MB", ""}, {"wal_segment_size", "4MB", "4MB"},
		{"wal_segment_size", "16777216", "16MB"}, {"wal_segment_size", "2048", ""}, {"wal_writer_delay", "0", ""},
		{"synchronous_commit", "OFF", "off"}, {"synchronous_commit", "yes", "on"}, {"wal_flusher", "Serial", "serial"},
		{"transaction_buffers", "8", ""}, {"transaction_buffers", "64", "64"}, {"visibility_map", "sometimes", ""},
	} {
		s, _ := LookupSetting(c.name)
		var o Options
		err := s.Set(&o, c.in)
		if c.show == "" {
			if !errors.Is(err, ErrInvalidSetting) {
				t.Errorf("%s=%s: %v, want ErrInvalidSetting", c.name, c.in, err)
			}
			continue
		}
		if got := s.Show(o); err != nil || got != c.show {
			t.Errorf("%s=%s shows %q (%v), want %q", c.name, c.in, got, err, c.show)
		}
	}
	// The negative stand-ins for a setting's 0 pass.
	if o := (Options{AutovacuumVacuumScaleFactor: -1, VacuumFreezeMinAge: -1, VacuumFreezeTableAge: -1, AutovacuumVacuumThreshold: -1}); o.Validate() != nil {
		t.Errorf("the stand-ins for 0: %v", o.Validate())
	}
	if o := (Options{MaxWALSize: 16 << 20}); !errors.Is(o.Validate(), ErrInvalidSetting) {
		t.Errorf("a max_wal_size of one segment: %v, want ErrInvalidSetting", o.Validate())
	}
	// A refused value leaves Options as they were.
	for _, c := range [][2]string{{"wal_segment_size", "3MB"}, {"max_wal_size", "1MB"}, {"transaction_buffers", "8"}, {"fillfactor", "9"}} {
		s, _ := LookupSetting(c[0])
		o := Options{FillFactor: 70, MaxWALSize: 64 << 20, CLOGBuffers: 64, WALSegmentSize: 4 << 20}
		before := s.Show(o)
		if err := s.Set(&o, c[1]); err == nil || s.Show(o) != before {
			t.Errorf("%s=%s: %v, then shows %q, want an error and %q", c[0], c[1], err, s.Show(o), before)
		}
	}
	// Every range check of Open and the run-time setters matches
	// ErrInvalidSetting and names the setting.
	for _, c := range []struct {
		o    Options
		name string
	}{
		{Options{FillFactor: 5}, "fillfactor"}, {Options{CommitDelay: 200000}, "commit_delay"},
		{Options{CommitSiblings: 5000}, "commit_siblings"}, {Options{WALSegmentSize: 3 << 20}, "wal_segment_size"},
		{Options{CLOGBuffers: -3}, "transaction_buffers"}, {Options{VisibilityMap: "sometimes"}, "visibility_map"},
		{Options{WALWriterDelay: -time.Second}, "wal_writer_delay"}, {Options{SynchronousCommit: 7}, "synchronous_commit"},
		// Settings whose 0 has a negative stand-in are range-checked
		// above 0 all the same (Show printed what Set then refused).
		{Options{AutovacuumVacuumScaleFactor: 1e9}, "autovacuum_vacuum_scale_factor"},
		{Options{VacuumFreezeMinAge: 1 << 62}, "vacuum_freeze_min_age"},
		{Options{VacuumFreezeTableAge: 1 << 40}, "vacuum_freeze_table_age"},
		{Options{AutovacuumFreezeMaxAge: 99_999}, "autovacuum_freeze_max_age"},
		{Options{AutovacuumVacuumThreshold: math.MaxInt32 + 1}, "autovacuum_vacuum_threshold"},
		// Open's memory check is Validate's too, where the machine's
		// memory is known.
		{Options{SharedBuffers: 1 << 60}, "shared_buffers"},
	} {
		if c.name == "shared_buffers" && physicalMemory() == 0 {
			continue
		}
		err := c.o.Validate()
		if !errors.Is(err, ErrInvalidSetting) || !strings.Contains(err.Error(), `"`+c.name+`"`) {
			t.Errorf("Validate of a bad %s: %v, want ErrInvalidSetting naming it", c.name, err)
		}
	}
}

// TestSetConfig: DB.SetConfig changes the run-time settings and refuses
// the others; CurrentSetting shows both.
// TestBoolSettingsSpellings: every boolean setting takes each spelling
// its refusal lists, in any case, and refuses anything else with a text
// that lists them all.
func TestBoolSettingsSpellings(t *testing.T) {
	n := 0
	for _, s := range Settings() {
		if s.Type != "bool" {
			continue
		}
		n++
		var o Options
		err := s.Set(&o, "bogus")
		var se *SettingError
		if !errors.As(err, &se) {
			t.Fatalf("%s: Set(bogus) = %v, want a *SettingError", s.Name, err)
		}
		for i, w := range []string{"on", "off", "true", "false", "yes", "no", "1", "0"} {
			if !strings.Contains(se.Want, w) {
				t.Errorf("%s: the refusal %q does not list %q", s.Name, se.Want, w)
			}
			for _, v := range []string{w, strings.ToUpper(w)} {
				if err := s.Set(&o, v); err != nil {
					t.Errorf("%s: Set(%q): %v", s.Name, v, err)
				} else if want := map[bool]string{true: "on", false: "off"}[i%2 == 0]; s.Show(o) != want {
					t.Errorf("%s: Set(%q) shows %q, want %q", s.Name, v, s.Show(o), want)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no boolean settings")
	}
}

func TestSetConfig(t *testing.T) {
	db, err := Open("/db", Options{FS: vfs.NewMemFS(), SharedBuffers: 100 << 10, CommitSiblings: NoCommitSiblings})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct{ name, want string }{
		{"shared_buffers", "128kB"}, {"commit_siblings", "0"}, {"commit_delay", "0"}, {"wal_flusher", "pipelined"},
	} {
		if got, err := db.CurrentSetting(c.name); err != nil || got != c.want {
			t.Errorf("CurrentSetting(%s) = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct{ name, value string }{
		{"commit_delay", "auto"}, {"commit_siblings", "3"}, {"synchronous_commit", "off"}, {"early_lock_release", "off"},
	} {
		if err := db.SetConfig(c.name, c.value); err != nil {
			t.Fatalf("SetConfig(%s, %s): %v", c.name, c.value, err)
		}
		if got, _ := db.CurrentSetting(c.name); got != c.value {
			t.Errorf("after SetConfig(%s, %s), CurrentSetting = %q", c.name, c.value, got)
		}
	}
	if db.CommitDelay() != CommitDelayAuto || db.CommitSiblings() != 3 || db.SynchronousCommit() != SyncCommitOff || db.EarlyLockRelease() {
		t.Errorf("getters after SetConfig: %d %d %v %v", db.CommitDelay(), db.CommitSiblings(), db.SynchronousCommit(), db.EarlyLockRelease())
	}
	if err := db.SetConfig("shared_buffers", "1GB"); !errors.Is(err, ErrSettingFixed) {
		t.Errorf("SetConfig(shared_buffers) = %v, want ErrSettingFixed", err)
	}
	if err := db.SetConfig("commit_delay", "-1"); !errors.Is(err, ErrInvalidSetting) {
		t.Errorf("SetConfig(commit_delay, -1) = %v, want ErrInvalidSetting", err)
	}
	for _, c := range []struct{ name, value string }{
		{"zero_damaged_pages", " on"}, {"synchronous_commit", "on "}, {"commit_siblings", " 5"}, {"commit_delay", "auto\t"},
	} {
		before, _ := db.CurrentSetting(c.name)
		if err := db.SetConfig(c.name, c.value); !errors.Is(err, ErrInvalidSetting) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.value)) {
			t.Errorf("SetConfig(%s, %q) = %v, want ErrInvalidSetting naming the value", c.name, c.value, err)
		}
		if got, _ := db.CurrentSetting(c.name); got != before {
			t.Errorf("after a refused SetConfig(%s, %q), CurrentSetting = %q; want %q", c.name, c.value, got, before)
		}
	}
	if _, err := db.CurrentSetting("nope"); !errors.Is(err, ErrUnknownSetting) {
		t.Errorf("CurrentSetting(nope) = %v, want ErrUnknownSetting", err)
	}
	if err := db.SetCommitDelay(200000); !errors.Is(err, ErrInvalidSetting) {
		t.Errorf("SetCommitDelay(200000) = %v, want ErrInvalidSetting", err)
	}
	if err := db.SetCommitSiblings(-5); !errors.Is(err, ErrInvalidSetting) {
		t.Errorf("SetCommitSiblings(-5) = %v, want ErrInvalidSetting", err)
	}
}

// TestCurrentSettingShowsRoundedSizes: transaction_buffers as the CLOG rounded
// it to whole banks, not as given.
func TestCurrentSettingShowsRoundedSizes(t *testing.T) {
	db, err := Open("/db", Options{FS: vfs.NewMemFS(), CLOGBuffers: 17})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, _ := db.CurrentSetting("transaction_buffers"); got != "32" {
		t.Errorf("transaction_buffers 17 shows %q, want 32 (two banks of 16)", got)
	}
}

// TestParseSize pins the sizes shared_buffers takes: PostgreSQL's units,
// 1024-based, and a bare number of 8 kB pages.
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"128MB", 128 << 20, true},
		{"8kB", 8 << 10, true},
		{"1GB", 1 << 30, true},
		{"100", 100 * 8192, true},
		{"4096B", 4096, true},
		{"MB", 0, false},
		{"12mb", 0, false},
		{"99999999999TB", 0, false},
	} {
		got, err := parseSize(tc.in, heap.PageSize)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestParseNaptime pins autovacuum_naptime's two forms, PostgreSQL's bare
// seconds and a Go duration, and PostgreSQL's range.
func TestParseNaptime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration // 0: an error
	}{
		{"60", time.Minute},
		{"1", time.Second},
		{"2147483", 2147483 * time.Second},
		{"1s", time.Second},
		{"90s", 90 * time.Second},
		{"5m", 5 * time.Minute},
		{"1500ms", 1500 * time.Millisecond},
		{"2147483s", 2147483 * time.Second},
		{"500ms", 0},
		{"0", 0},
		{"0s", 0},
		{"-1", 0},
		{"-5s", 0},
		{"2147484", 0},
		{"2147484s", 0},
		{"1e3", 0},
		{"", 0},
		{"soon", 0},
	} {
		got, err := parseNaptime(c.in)
		switch {
		case c.want == 0 && err == nil:
			t.Errorf("parseNaptime(%q) = %v, want an error", c.in, got)
		case c.want != 0 && (err != nil || got != c.want):
			t.Errorf("parseNaptime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// TestSettingAliases: a knob's older name finds it.
func TestSettingAliases(t *testing.T) {
	s, ok := LookupSetting("CLOG_BUFFERS")
	if !ok || s.Name != "transaction_buffers" {
		t.Fatalf("LookupSetting(clog_buffers) = %q, %v; want transaction_buffers", s.Name, ok)
	}
	var o Options
	if err := s.Set(&o, "64"); err != nil || o.CLOGBuffers != 64 {
		t.Fatalf("set through the alias: %v, %d", err, o.CLOGBuffers)
	}
}

// TestOptionsTimeInNanoseconds: a bare number meant as seconds or
// milliseconds in Options counts nanoseconds, and is refused rather than
// taken (autovacuum or the WAL writer in a busy loop); a time that is not
// a whole number of the setting's unit shows as a Go duration, which Set
// reads back.
func TestOptionsTimeInNanoseconds(t *testing.T) {
	for _, o := range []Options{{AutovacuumNaptime: 60}, {WALWriterDelay: 200}} {
		if err := o.Validate(); !errors.Is(err, ErrInvalidSetting) {
			t.Errorf("Validate(%+v) = %v; want ErrInvalidSetting", o, err)
		}
	}
	s, _ := LookupSetting("wal_writer_delay")
	o := Options{WALWriterDelay: 2500 * time.Microsecond}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	shown := s.Show(o)
	var back Options
	if err := s.Set(&back, shown); err != nil || back.WALWriterDelay != o.WALWriterDelay {
		t.Fatalf("Show = %q, Set of it: %v, %v; want %v", shown, back.WALWriterDelay, err, o.WALWriterDelay)
	}
}

// TestAPIEdges: values an embedder can get wrong get errors that say what
// was wrong, with the value as given.
func TestAPIEdges(t *testing.T) {
	if err := (Options{CLOGBuffers: 1 << 30}).Validate(); !errors.Is(err, ErrInvalidSetting) {
		t.Errorf("CLOGBuffers 1<<30: %v; want ErrInvalidSetting", err)
	}
	if _, err := Open("", Options{}); err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Errorf("Open(\"\"): %v", err)
	}
	db := openTest(t, t.TempDir(), Options{})
	if _, err := db.Begin(context.Background(), TxnOptions{Isolation: 7}); !errors.Is(err, ErrInvalidSetting) || !strings.Contains(err.Error(), "IsolationLevel(7)") {
		t.Errorf("Begin with isolation 7: %v", err)
	}
	db.Close()
	if err := db.SetSynchronousCommit(SyncCommitOff); !errors.Is(err, ErrClosed) {
		t.Errorf("SetSynchronousCommit after Close: %v; want ErrClosed", err)
	}
	// Every runtime setting, as SetConfig's doc promises.
	for _, s := range Settings() {
		if !s.Runtime {
			continue
		}
		if err := db.SetConfig(s.Name, s.Default); !errors.Is(err, ErrClosed) {
			t.Errorf("SetConfig(%q, %q) after Close: %v; want ErrClosed", s.Name, s.Default, err)
		}
	}
}
