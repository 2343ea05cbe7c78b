package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvkv/clog"
	"mvkv/internal/heap"
	"mvkv/vfs"
	"mvkv/wal"
)

// A SettingError is the error for a value a setting does not take. It
// matches ErrInvalidSetting.
type SettingError struct {
	Name  string // the setting
	Value string // the value refused
	Want  string // what the setting takes, as "want 0 to 1000"
}

// Error returns "mvkv: invalid value for parameter", the setting's name, the
// value and what the setting takes, as in
// mvkv: invalid value for parameter "fillfactor": "5": want 10 to 100.
func (e *SettingError) Error() string {
	return fmt.Sprintf("%v %q: %q: %s", ErrInvalidSetting, e.Name, e.Value, e.Want)
}

// Unwrap returns ErrInvalidSetting.
func (e *SettingError) Unwrap() error { return ErrInvalidSetting }

// NoCommitSiblings set as Options.CommitSiblings asks for commit_siblings =
// 0, which the zero value cannot express.
const NoCommitSiblings = -1

// CommitDelayAuto, as Options.CommitDelay or DB.SetCommitDelay (the "auto"
// setting), selects the adaptive commit_delay: it never delays a lone
// committer and otherwise waits for the other active transactions to reach
// their commit, for at most half the recent average WAL sync latency.
const CommitDelayAuto = -1

// SynchronousCommit mirrors PostgreSQL's synchronous_commit (on and off only).
type SynchronousCommit int

const (
	// SyncCommitOn: Commit returns only after the commit record is durable.
	SyncCommitOn SynchronousCommit = iota
	// SyncCommitOff: Commit returns after the commit record is in the WAL
	// buffer; the WAL writer, which flushes once every WALWriterDelay,
	// makes it durable within about one delay and the write and fdatasync
	// that follow (PostgreSQL's writer, which sleeps longer when idle,
	// promises three delays).
	// A crash can lose the most recent such commits, never parts of them.
	SyncCommitOff
)

// String returns the setting's text, "on" or "off".
func (s SynchronousCommit) String() string {
	switch s {
	case SyncCommitOn:
		return "on"
	case SyncCommitOff:
		return "off"
	}
	return "SynchronousCommit(" + strconv.Itoa(int(s)) + ")"
}

// ParseSynchronousCommit reads synchronous_commit as PostgreSQL does: on or
// off, or another spelling of a boolean (true, yes, 1, false, no, 0), in
// any case, with no spaces around it (as Setting.Set). The error wraps
// ErrInvalidSetting.
func ParseSynchronousCommit(v string) (SynchronousCommit, error) {
	if err := untrimmed("synchronous_commit", v); err != nil {
		return 0, err
	}
	on, err := parseBool(v)
	if err != nil {
		return 0, invalid("synchronous_commit", v, err)
	}
	if on {
		return SyncCommitOn, nil
	}
	return SyncCommitOff, nil
}

// WALFlusher is the group-commit flusher policy of Options.WALFlusher, the
// wal package's FlusherPolicy.
type WALFlusher = wal.FlusherPolicy

// The values of Options.WALFlusher. See Options.WALFlusher.
const (
	WALFlusherPipelined = wal.FlusherPipelined
	WALFlusherSerial    = wal.FlusherSerial
	WALFlusherNone      = wal.FlusherNone
)

// CLOGLocking is how the CLOG's buffers are locked, the values of
// Options.CLOGLocking.
type CLOGLocking string

const (
	// CLOGLockingBank gives every bank of 16 CLOG buffers its own lock,
	// as PostgreSQL 17 (the default).
	CLOGLockingBank CLOGLocking = "bank"
	// CLOGLockingGlobal is one lock for all CLOG buffers, as before
	// PostgreSQL 17.
	CLOGLockingGlobal CLOGLocking = "global"
)

// String returns the setting's text.
func (l CLOGLocking) String() string { return string(l) }

// VisibilityMapMode is how visibility map bits are kept, the values of
// Options.VisibilityMap (VisibilityMapCrashSafe, VisibilityMapUnlogged).
type VisibilityMapMode string

// String returns the setting's text.
func (m VisibilityMapMode) String() string { return string(m) }

// A Setting is one knob of Options as text interfaces take it: command-line
// flags, a server's CONFIG GET and SET, DB.SetConfig and DB.CurrentSetting.
// Its fields follow PostgreSQL's pg_settings view. The table Settings
// returns is the one definition of every knob's name, type, unit, range,
// default, parser and help text: Options.EnsureDefaults and
// Options.Validate read their defaults and ranges from it, so a knob added
// to it appears in all of them with the same default.
type Setting struct {
	// Name is PostgreSQL's name for the knob where PostgreSQL has it
	// (commit_delay), and in its style where it does not (wal_flusher).
	Name string
	// Aliases are other names LookupSetting, the command-line flags and
	// CONFIG take for the knob: names it had before it took PostgreSQL's
	// (clog_buffers for transaction_buffers).
	Aliases []string
	// Type is pg_settings.vartype: bool, integer, real or enum.
	Type string
	// Unit is the unit of a bare number: "8kB", "MB", "B", "us", "ms", "s",
	// "%" (fillfactor), or "" (pg_settings.unit). A size also takes a unit suffix B, kB, MB,
	// GB or TB (1024-based), a time a Go duration such as 90s.
	Unit string
	// Min and Max bound a number, as text (a size with its unit, others
	// in Unit); both are empty for bool and enum, Max for a size with no
	// upper bound (shared_buffers, max_wal_size).
	Min, Max string
	// Values lists what an enum or a bool takes (on, off), and the words a
	// number takes besides numbers (commit_delay's auto).
	Values []string
	// Syntax names the value on a command line: NUM, NUM|auto, on|off,
	// SIZE, MS, SEC, SEC|DURATION, or an enum's values.
	Syntax string
	// Default is the value of an Options field left at its zero value,
	// as Show prints it; transaction_buffers' 0 stands for a number derived from
	// shared_buffers, which Show prints instead.
	Default string
	// Description says what the knob does, without its default.
	Description string
	// Runtime says DB.SetConfig can change the knob on an open database;
	// the others are fixed at Open (pg_settings.context "postmaster").
	Runtime bool

	parse  func(o *Options, v string) error // text into o, range checked
	show   func(o *Options) string          // o's value as text, o defaulted
	ensure func(o *Options)                 // the zero value to the default
	check  func(o *Options) error           // o's value in range, o defaulted
	get    func(db *DB) string              // Runtime: the current value
	set    func(db *DB, v string) error     // Runtime: parse and apply
}

// Set parses v as the setting's text and stores it in o, in the form
// Options takes (the setting's 0 for commit_siblings, for example, as
// NoCommitSiblings). The error wraps ErrInvalidSetting and says what the
// setting takes. v is taken as it is: spaces (any Unicode white space)
// before or after it are refused, as PostgreSQL's SET refuses ' on' for a
// boolean; a caller reading values from a file or a command line where
// such spaces are noise trims them itself.
// On error o is left as it was.
func (s Setting) Set(o *Options, v string) error {
	if err := untrimmed(s.Name, v); err != nil {
		return err
	}
	c := *o
	if err := s.parse(&c, v); err != nil {
		return err
	}
	*o = c
	return nil
}

// Show returns o's value of the setting as text, the default for a field
// left at its zero value; Set takes it back, unless it lies outside the
// range Set takes (an autovacuum_naptime below PostgreSQL's 1 s, which
// Options allows for tests).
func (s Setting) Show(o Options) string {
	o.EnsureDefaults()
	return s.show(&o)
}

// Settings returns the engine's knobs, one Setting each, in the order a
// help text lists them. The slice is a copy.
func Settings() []Setting { return slices.Clone(settings) }

// LookupSetting returns the setting called name, or with name among its
// Aliases (case-insensitive).
func LookupSetting(name string) (Setting, bool) {
	name = strings.ToLower(name)
	for _, s := range settings {
		if s.Name == name || slices.Contains(s.Aliases, name) {
			return s, true
		}
	}
	return Setting{}, false
}

// SetConfig changes a Runtime setting of the open database, as
// PostgreSQL's set_config: the value is parsed as Setting.Set parses it,
// so spaces around it are refused.
// Errors wrap ErrUnknownSetting, ErrSettingFixed, ErrInvalidSetting or
// ErrClosed. Safe to call concurrently.
func (db *DB) SetConfig(name, value string) error {
	s, ok := LookupSetting(name)
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownSetting, name)
	}
	if !s.Runtime {
		return fmt.Errorf("%w: %s", ErrSettingFixed, s.Name)
	}
	if err := untrimmed(s.Name, value); err != nil {
		return err
	}
	return s.set(db, value)
}

// untrimmed refuses a value of the setting name with spaces (any Unicode white space)
// before or after it. Trimming them instead would let CONFIG SET
// zero_damaged_pages " on" succeed where Redis and PostgreSQL refuse
// it, and no setting's value begins or ends with a space.
func untrimmed(name, v string) error {
	if strings.TrimSpace(v) == v {
		return nil
	}
	return &SettingError{Name: name, Value: v, Want: fmt.Sprintf("want no spaces around the value %q", v)}
}

// CurrentSetting returns the database's value of a setting as text, as
// PostgreSQL's current_setting: for a Runtime setting the value now, for
// the others the one Open took (with defaults filled in, and sizes as
// Open rounded them). The error wraps ErrUnknownSetting. Safe to call
// concurrently.
func (db *DB) CurrentSetting(name string) (string, error) {
	s, ok := LookupSetting(name)
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownSetting, name)
	}
	if s.Runtime {
		return s.get(db), nil
	}
	return s.show(&db.opts), nil
}

// EnsureDefaults sets every field of o left at its zero value to its
// default, and returns o. It is Open's first step; calling it again
// changes nothing. The convention is the same for every field: the zero
// value means the default (nil for a *bool, "" for a mode); where the
// setting's own zero differs from its default, a negative value stands for
// it (NoCommitSiblings, CheckpointTimeout, AutovacuumVacuumThreshold,
// AutovacuumVacuumScaleFactor, VacuumFreezeMinAge, VacuumFreezeTableAge),
// and EnsureDefaults keeps it.
// CLOGBuffers' default is derived from SharedBuffers.
func (o *Options) EnsureDefaults() *Options {
	if o.FS == nil {
		o.FS = vfs.OS{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// Zero or, as before, negative.
	if o.MaxRetries <= 0 {
		o.MaxRetries = 10
	}
	for _, s := range settings {
		s.ensure(o)
	}
	return o
}

// Validate reports the first field of o outside its range, with a
// *SettingError naming the setting (matching ErrInvalidSetting), as Open
// does (a SharedBuffers beyond the machine's memory included); fields left
// at their zero value pass
// (they mean the defaults). Options set programmatically may take values
// the text interfaces refuse where a Setting says so (intervals shorter
// than PostgreSQL allows, for tests).
func (o Options) Validate() error {
	o.EnsureDefaults()
	for _, s := range settings {
		if err := s.check(&o); err != nil {
			return err
		}
	}
	if o.MaxWALSize < 2*o.WALSegmentSize {
		return &SettingError{Name: "max_wal_size", Value: formatSize(o.MaxWALSize), Want: "want at least two WAL segments of " + formatSize(o.WALSegmentSize)}
	}
	if mem := physicalMemory(); mem > 0 && o.SharedBuffers > mem {
		// The pool is allocated at once; asking for more than the machine
		// has would only end in the runtime's fatal out-of-memory error.
		return &SettingError{Name: "shared_buffers", Value: formatSize(o.SharedBuffers), Want: fmt.Sprintf("want at most the machine's %s of memory", formatSize(mem))}
	}
	return nil
}

// withDefaults is Open's view of opts: defaults filled in, checked, and
// the stand-ins for a setting's 0 resolved to it.
func (o Options) withDefaults() (Options, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return o, err
	}
	if o.CommitSiblings == NoCommitSiblings {
		o.CommitSiblings = 0
	}
	o.VacuumFreezeMinAge = max(o.VacuumFreezeMinAge, 0)
	o.VacuumFreezeTableAge = max(o.VacuumFreezeTableAge, 0)
	// Whole pages, as the pool allocates them, so that CurrentSetting
	// shows the size in use.
	o.SharedBuffers = max(o.SharedBuffers, minSharedBuffers) / heap.PageSize * heap.PageSize
	return o, nil
}

// minSharedBuffers is PostgreSQL's minimum shared_buffers, 16 buffers.
const minSharedBuffers = 16 * heap.PageSize

// settings is the table of knobs; see Setting.
var settings = []Setting{
	Setting{
		Name: "synchronous_commit", Type: "enum", Values: []string{"on", "off"}, Syntax: "on|off", Default: "on",
		Description: "on: a commit returns (a write is replied to, and shown to others in replies) only once its commit record is durable; off: it returns without waiting, and a crash may lose the last ones",
		parse: func(o *Options, v string) (err error) {
			o.SynchronousCommit, err = ParseSynchronousCommit(v)
			return err
		},
		show:   func(o *Options) string { return o.SynchronousCommit.String() },
		ensure: func(*Options) {},
		check: func(o *Options) error {
			return checkSynchronousCommit(o.SynchronousCommit)
		},
	}.runtime(
		func(db *DB) string { return db.SynchronousCommit().String() },
		func(db *DB, v string) error {
			sc, err := ParseSynchronousCommit(v)
			if err == nil {
				return db.SetSynchronousCommit(sc)
			}
			return err
		}),
	{
		Name: "commit_delay", Type: "integer", Unit: "us", Min: "0", Max: strconv.Itoa(wal.MaxCommitDelay),
		Values: []string{"auto"}, Syntax: "NUM|auto", Default: "0", Runtime: true,
		Description: "commit_delay in microseconds: how long the group-commit leader waits for other commits to join its WAL flush, when at least commit_siblings other transactions are active; auto: a delay that adapts to the WAL sync latency and never delays a lone committer",
		parse: func(o *Options, v string) (err error) {
			o.CommitDelay, err = parseCommitDelay(v)
			return err
		},
		show:   func(o *Options) string { return showCommitDelay(o.CommitDelay) },
		ensure: func(*Options) {},
		check:  func(o *Options) error { return checkCommitDelay(o.CommitDelay) },
		get:    func(db *DB) string { return showCommitDelay(db.CommitDelay()) },
		set: func(db *DB, v string) error {
			us, err := parseCommitDelay(v)
			if err != nil {
				return err
			}
			return db.SetCommitDelay(us)
		},
	},
	{
		Name: "commit_siblings", Type: "integer", Min: "0", Max: strconv.Itoa(wal.MaxCommitSiblings),
		Syntax: "NUM", Default: "5", Runtime: true,
		Description: "commit_siblings: the fewest other active transactions for which commit_delay waits",
		parse: func(o *Options, v string) error {
			n, err := parseInt("commit_siblings", v, 0, wal.MaxCommitSiblings, "")
			o.CommitSiblings = int(n)
			if n == 0 {
				o.CommitSiblings = NoCommitSiblings
			}
			return err
		},
		show:   func(o *Options) string { return strconv.Itoa(max(o.CommitSiblings, 0)) },
		ensure: func(o *Options) { o.CommitSiblings = cmp0(o.CommitSiblings, 5) },
		check: func(o *Options) error {
			if o.CommitSiblings == NoCommitSiblings {
				return nil
			}
			return checkCommitSiblings(o.CommitSiblings)
		},
		get: func(db *DB) string { return strconv.Itoa(db.CommitSiblings()) },
		set: func(db *DB, v string) error {
			n, err := parseInt("commit_siblings", v, 0, wal.MaxCommitSiblings, "")
			if err != nil {
				return err
			}
			return db.SetCommitSiblings(int(n))
		},
	},
	sizeSetting("shared_buffers", "8kB",
		"shared_buffers: the heap buffer pool, allocated at once, at most the machine's memory; a bare number counts 8kB pages",
		minSharedBuffers, 1<<62, 128<<20, func(o *Options) *int64 { return &o.SharedBuffers }),
	enumSetting("wal_flusher",
		"group-commit flusher policy: pipelined overlaps WAL syncs only while that commits faster than one sync at a time; serial is PostgreSQL's one sync at a time; none gives every commit its own sync",
		[]WALFlusher{WALFlusherSerial, WALFlusherPipelined, WALFlusherNone}, wal.DefaultFlusher,
		func(o *Options) *WALFlusher { return &o.WALFlusher }),
	durationSetting("wal_writer_delay", time.Millisecond,
		"wal_writer_delay: how often the WAL writer flushes asynchronous commits",
		time.Millisecond, 10*time.Second, 200*time.Millisecond, false, func(o *Options) *time.Duration { return &o.WALWriterDelay }),
	{
		Name: "wal_segment_size", Type: "integer", Unit: "B", Min: "1MB", Max: "1GB", Syntax: "SIZE",
		Default:     formatSize(wal.DefaultSegmentSize),
		Description: "WAL segment size for a new data directory (an existing one keeps its own), a power of two; a bare number counts bytes, as PostgreSQL 11's",
		parse: func(o *Options, v string) (err error) {
			o.WALSegmentSize, err = parseSize(v, 1)
			if err == nil && !validSegmentSize(o.WALSegmentSize) {
				err = errors.New("want a power of two from 1MB to 1GB")
			}
			return wrapInvalid("wal_segment_size", v, err)
		},
		show:   func(o *Options) string { return formatSize(o.WALSegmentSize) },
		ensure: func(o *Options) { o.WALSegmentSize = cmp0(o.WALSegmentSize, wal.DefaultSegmentSize) },
		check: func(o *Options) error {
			if !validSegmentSize(o.WALSegmentSize) {
				return &SettingError{Name: "wal_segment_size", Value: strconv.FormatInt(o.WALSegmentSize, 10), Want: "want a power of two from 1MB to 1GB"}
			}
			return nil
		},
	},
	durationSetting("checkpoint_timeout", time.Second,
		"checkpoint_timeout: the longest time between checkpoints; 0 turns time-driven checkpoints off",
		0, 24*time.Hour, 5*time.Minute, true, func(o *Options) *time.Duration { return &o.CheckpointTimeout }),
	sizeSetting("max_wal_size", "MB",
		"max_wal_size: the WAL written since the last checkpoint that starts one, at least two WAL segments; a bare number counts MB",
		2<<20, 1<<62, 1<<30, func(o *Options) *int64 { return &o.MaxWALSize }),
	durationSetting("lock_timeout", time.Millisecond,
		"lock_timeout: the longest wait for a row lock; 0 waits as long as the caller allows",
		0, math.MaxInt32*time.Millisecond, 0, false, func(o *Options) *time.Duration { return &o.LockTimeout }),
	{
		Name: "transaction_buffers", Aliases: []string{"clog_buffers"}, Type: "integer", Min: "0", Max: strconv.Itoa(1 << 17), Syntax: "NUM", Default: "0",
		Description: "CLOG pages cached, in banks of 16 (PostgreSQL 17's transaction_buffers); 0: shared_buffers/512, from 16 to 1024",
		parse: func(o *Options, v string) error {
			n, err := parseInt("transaction_buffers", v, 0, 1<<17, "")
			if err == nil && n != 0 && n < clog.MinBuffers {
				err = invalid("transaction_buffers", v, fmt.Errorf("want 0 or %d to %d", clog.MinBuffers, 1<<17))
			}
			o.CLOGBuffers = int(n)
			return err
		},
		show: func(o *Options) string { return strconv.Itoa(o.CLOGBuffers) },
		ensure: func(o *Options) {
			if o.CLOGBuffers == 0 {
				o.CLOGBuffers = clog.AutotuneBuffers(int(max(o.SharedBuffers, minSharedBuffers) / heap.PageSize))
			}
		},
		check: func(o *Options) error {
			if o.CLOGBuffers < 0 || o.CLOGBuffers > 1<<17 || o.CLOGBuffers > 0 && o.CLOGBuffers < clog.MinBuffers {
				return &SettingError{Name: "transaction_buffers", Value: strconv.Itoa(o.CLOGBuffers), Want: fmt.Sprintf("want 0 or %d to %d", clog.MinBuffers, 1<<17)}
			}
			return nil
		},
	},
	enumSetting("clog_locking",
		"CLOG locking: one lock per bank of 16 buffers (PostgreSQL 17), or one for all (before 17)",
		[]CLOGLocking{CLOGLockingBank, CLOGLockingGlobal}, CLOGLockingBank,
		func(o *Options) *CLOGLocking { return &o.CLOGLocking }),
	boolSetting("clog_group_update",
		"CLOG group update of transaction statuses (PostgreSQL 11's)",
		func(o *Options) **bool { return &o.CLOGGroupUpdate }),
	boolSetting("early_lock_release",
		"on: a synchronous commit becomes visible and releases its row locks once its commit record is in the WAL, and returns once it is durable; whoever read it also waits until then, so many commits to one row share a WAL flush. off: PostgreSQL's order, visible only once durable",
		func(o *Options) **bool { return &o.EarlyLockRelease }).runtimeBool((*DB).EarlyLockRelease, (*DB).SetEarlyLockRelease),
	boolSetting("autovacuum",
		"autovacuum: a background worker that vacuums when enough dead tuples have piled up or the frozen horizon lags autovacuum_freeze_max_age",
		func(o *Options) **bool { return &o.Autovacuum }),
	{
		Name: "autovacuum_naptime", Type: "integer", Unit: "s", Min: "1", Max: "2147483", Syntax: "SEC|DURATION", Default: "60",
		Description: "autovacuum_naptime: how often autovacuum checks the dead-tuple count; a bare number counts seconds, as PostgreSQL's, or a duration such as 90s or 5m",
		parse: func(o *Options, v string) (err error) {
			o.AutovacuumNaptime, err = parseNaptime(v)
			return wrapInvalid("autovacuum_naptime", v, err)
		},
		show:   func(o *Options) string { return showDuration(o.AutovacuumNaptime, time.Second) },
		ensure: func(o *Options) { o.AutovacuumNaptime = cmp0(o.AutovacuumNaptime, time.Minute) },
		check: func(o *Options) error {
			// Shorter than PostgreSQL's 1 s minimum is taken from
			// Options (tests run autovacuum every few milliseconds),
			// but not below 1 ms: a bare number there counts
			// nanoseconds, and 60 meant as seconds would run autovacuum
			// continuously.
			if d := o.AutovacuumNaptime; d < time.Millisecond {
				return &SettingError{Name: "autovacuum_naptime", Value: d.String(), Want: "want at least 1ms (a time.Duration: 60 is 60ns, 60*time.Second a minute)"}
			}
			return nil
		},
	},
	intSetting("autovacuum_vacuum_threshold", "",
		"autovacuum_vacuum_threshold: autovacuum runs vacuum once the dead tuples exceed this plus the scale factor times the live tuples",
		0, math.MaxInt32, 50, true, func(o *Options) *int { return &o.AutovacuumVacuumThreshold }),
	{
		Name: "autovacuum_vacuum_scale_factor", Type: "real", Min: "0", Max: "100", Syntax: "NUM", Default: "0.2",
		Description: "autovacuum_vacuum_scale_factor: the fraction of the live tuples added to the threshold; 0: the threshold alone",
		parse: func(o *Options, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 100) {
				return invalid("autovacuum_vacuum_scale_factor", v, errors.New("want a number from 0 to 100"))
			}
			o.AutovacuumVacuumScaleFactor = f
			if f == 0 {
				o.AutovacuumVacuumScaleFactor = -1
			}
			return nil
		},
		show: func(o *Options) string {
			return strconv.FormatFloat(max(o.AutovacuumVacuumScaleFactor, 0), 'g', -1, 64)
		},
		ensure: func(o *Options) { o.AutovacuumVacuumScaleFactor = cmp0(o.AutovacuumVacuumScaleFactor, 0.2) },
		check: func(o *Options) error {
			// Negative: the stand-in for 0.
			if f := o.AutovacuumVacuumScaleFactor; math.IsNaN(f) || math.IsInf(f, 0) || f > 100 {
				return &SettingError{Name: "autovacuum_vacuum_scale_factor", Value: fmt.Sprint(f), Want: "want a number from 0 to 100"}
			}
			return nil
		},
	},
	intSetting("autovacuum_freeze_max_age", "",
		"autovacuum_freeze_max_age in transactions: autovacuum runs an aggressive vacuum, whatever the dead tuples, once the frozen horizon lags the vacuum horizon this far, so that the CLOG can be truncated",
		100_000, 2_000_000_000, 200_000_000, false, func(o *Options) *int64 { return &o.AutovacuumFreezeMaxAge }),
	intSetting("fillfactor", "%",
		"fillfactor: the percentage of a page new keys may fill, leaving the rest free for their updates",
		10, 100, 100, false, func(o *Options) *int { return &o.FillFactor }),
	intSetting("vacuum_freeze_min_age", "",
		"vacuum_freeze_min_age in transactions: vacuum freezes a tuple this much older than its horizon; 0 freezes every tuple it can",
		0, 1_000_000_000, 50_000_000, true, func(o *Options) *int64 { return &o.VacuumFreezeMinAge }),
	intSetting("vacuum_freeze_table_age", "",
		"vacuum_freeze_table_age in transactions: a vacuum reads every page not all-frozen once the frozen horizon lags this far; 0 makes every vacuum aggressive",
		0, 2_000_000_000, 150_000_000, true, func(o *Options) *int64 { return &o.VacuumFreezeTableAge }),
	boolSetting("vacuum_truncate",
		"vacuum_truncate: vacuum cuts the empty pages at the end of the heap off its files, holding writers off for that moment",
		func(o *Options) **bool { return &o.VacuumTruncate }),
	offSetting("zero_damaged_pages",
		"zero_damaged_pages: a heap page that fails its checks when read is taken as an empty page, with a warning, instead of failing the read; its versions are lost. For getting past a damaged page",
		func(o *Options) *bool { return &o.ZeroDamagedPages }).runtimeBool((*DB).ZeroDamagedPages, (*DB).SetZeroDamagedPages),
	enumSetting("visibility_map",
		"crash-safe: WAL-logged visibility map bits, as PostgreSQL since 9.2; unlogged: bits set without WAL, as before 9.2, UNSAFE after a crash, for experiments only",
		[]VisibilityMapMode{VisibilityMapCrashSafe, VisibilityMapUnlogged}, VisibilityMapCrashSafe,
		func(o *Options) *VisibilityMapMode { return &o.VisibilityMap }),
}

// runtime makes s a Runtime setting with the DB's getter and setter.
func (s Setting) runtime(get func(*DB) string, set func(*DB, string) error) Setting {
	s.Runtime, s.get, s.set = true, get, set
	return s
}

// runtimeBool is runtime for a boolean setting, with the DB's getter and
// setter of the value itself: the text is parsed as the setting's own
// (parseBool, an error naming it), and a closed DB refuses with ErrClosed.
func (s Setting) runtimeBool(get func(*DB) bool, set func(*DB, bool)) Setting {
	return s.runtime(
		func(db *DB) string { return showBool(get(db)) },
		func(db *DB, v string) error {
			on, err := parseBool(v)
			if err != nil {
				return invalid(s.Name, v, err)
			}
			if db.closed.Load() {
				return ErrClosed
			}
			set(db, on)
			return nil
		})
}

// cmp0 is v, or def when v is the zero value.
func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// enumSetting is a setting that takes one of values, in any case.
func enumSetting[T ~string](name, desc string, values []T, def T, field func(*Options) *T) Setting {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	return Setting{
		Name: name, Type: "enum", Values: names, Syntax: strings.Join(names, "|"), Default: string(def), Description: desc,
		parse: func(o *Options, v string) error {
			if !slices.Contains(names, strings.ToLower(v)) {
				return invalid(name, v, fmt.Errorf("want %s", orList(names)))
			}
			*field(o) = T(strings.ToLower(v))
			return nil
		},
		show:   func(o *Options) string { return string(*field(o)) },
		ensure: func(o *Options) { *field(o) = cmp0(*field(o), def) },
		check: func(o *Options) error {
			if v := string(*field(o)); !slices.Contains(names, v) {
				return &SettingError{Name: name, Value: v, Want: "want " + orList(names)}
			}
			return nil
		},
	}
}

// boolSetting is an on/off setting whose Options field is a *bool, nil
// meaning on.
func boolSetting(name, desc string, field func(*Options) **bool) Setting {
	return Setting{
		Name: name, Type: "bool", Values: []string{"on", "off"}, Syntax: "on|off", Default: "on", Description: desc,
		parse: func(o *Options, v string) error {
			on, err := parseBool(v)
			if err != nil {
				return invalid(name, v, err)
			}
			*field(o) = &on
			return nil
		},
		show: func(o *Options) string { return showBool(**field(o)) },
		ensure: func(o *Options) {
			if *field(o) == nil {
				on := true
				*field(o) = &on
			}
		},
		check: func(*Options) error { return nil },
	}
}

// offSetting is an on|off setting that is off by default, kept in a plain
// bool.
func offSetting(name, desc string, field func(*Options) *bool) Setting {
	return Setting{
		Name: name, Type: "bool", Values: []string{"on", "off"}, Syntax: "on|off", Default: "off", Description: desc,
		parse: func(o *Options, v string) error {
			on, err := parseBool(v)
			if err != nil {
				return invalid(name, v, err)
			}
			*field(o) = on
			return nil
		},
		show:   func(o *Options) string { return showBool(*field(o)) },
		ensure: func(*Options) {},
		check:  func(*Options) error { return nil },
	}
}

// intSetting is an integer setting from lo to hi with default def. With
// negZero the setting's 0 is stored as -1 (any negative value reads as
// 0); otherwise Options may not be negative. Options are checked against
// lo and hi too when the setting has no negZero.
func intSetting[T ~int | ~int64](name, unit, desc string, lo, hi, def T, negZero bool, field func(*Options) *T) Setting {
	return Setting{
		Name: name, Type: "integer", Unit: unit, Min: strconv.FormatInt(int64(lo), 10), Max: strconv.FormatInt(int64(hi), 10),
		Syntax: "NUM", Default: strconv.FormatInt(int64(def), 10), Description: desc,
		parse: func(o *Options, v string) error {
			n, err := parseInt(name, v, int64(lo), int64(hi), unit)
			*field(o) = T(n)
			if negZero && n == 0 {
				*field(o) = -1
			}
			return err
		},
		show:   func(o *Options) string { return strconv.FormatInt(int64(max(*field(o), 0)), 10) },
		ensure: func(o *Options) { *field(o) = cmp0(*field(o), def) },
		check: func(o *Options) error {
			v := *field(o)
			if negZero && v < 0 {
				return nil // the stand-in for the setting's 0
			}
			if v < lo || v > hi {
				return &SettingError{Name: name, Value: strconv.FormatInt(int64(v), 10), Want: fmt.Sprintf("want %d to %d", lo, hi)}
			}
			return nil
		},
	}
}

// sizeSetting is a size in bytes from lo to hi; a bare number counts
// units of unit ("8kB" or "MB"). Options may hold any non-negative size.
func sizeSetting(name, unit, desc string, lo, hi, def int64, field func(*Options) *int64) Setting {
	base := int64(heap.PageSize)
	if unit == "MB" {
		base = 1 << 20
	}
	return Setting{
		Name: name, Type: "integer", Unit: unit, Min: formatSize(lo), Syntax: "SIZE", Default: formatSize(def), Description: desc,
		parse: func(o *Options, v string) error {
			n, err := parseSize(v, base)
			if err == nil && (n < lo || n > hi) {
				err = fmt.Errorf("want a size of at least %s", formatSize(lo))
			}
			*field(o) = n
			return wrapInvalid(name, v, err)
		},
		show:   func(o *Options) string { return formatSize(*field(o)) },
		ensure: func(o *Options) { *field(o) = cmp0(*field(o), def) },
		check:  nonNegative(name, func(o *Options) float64 { return float64(*field(o)) }),
	}
}

// durationSetting is a time setting from lo to hi, a bare number counting
// units of unit. With zeroOff the setting's 0 turns it off, stored as -1
// (any negative value). Options may hold any non-negative duration, for
// tests and benchmarks.
func durationSetting(name string, unit time.Duration, desc string, lo, hi, def time.Duration, zeroOff bool, field func(*Options) *time.Duration) Setting {
	u, syntax := "ms", "MS"
	if unit == time.Second {
		u, syntax = "s", "SEC"
	}
	return Setting{
		Name: name, Type: "integer", Unit: u, Min: showDuration(lo, unit), Max: showDuration(hi, unit),
		Syntax: syntax, Default: showDuration(def, unit), Description: desc,
		parse: func(o *Options, v string) error {
			d, err := parseDuration(v, unit, lo, hi)
			if err != nil {
				return invalid(name, v, err)
			}
			*field(o) = d
			if zeroOff && d == 0 {
				*field(o) = -1
			}
			return nil
		},
		show:   func(o *Options) string { return showDuration(max(*field(o), 0), unit) },
		ensure: func(o *Options) { *field(o) = cmp0(*field(o), def) },
		check: func(o *Options) error {
			d := *field(o)
			if !zeroOff && d < 0 {
				return &SettingError{Name: name, Value: d.String(), Want: "want a duration, not negative"}
			}
			if d > 0 && d < lo {
				// A bare number in Options counts nanoseconds: 200 meant
				// as milliseconds would flush in a busy loop.
				return &SettingError{Name: name, Value: d.String(), Want: fmt.Sprintf("want %v to %v (a time.Duration: 200 is 200ns, 200*time.Millisecond a fifth of a second)", lo, hi)}
			}
			return nil
		},
	}
}

// nonNegative is a check that the field is not negative.
func nonNegative(name string, v func(*Options) float64) func(*Options) error {
	return func(o *Options) error {
		if x := v(o); x < 0 {
			return &SettingError{Name: name, Value: fmt.Sprint(x), Want: "want a number, not negative"}
		}
		return nil
	}
}

// invalid is the error for a value v a setting does not take.
func invalid(name, v string, why error) error {
	return &SettingError{Name: name, Value: v, Want: why.Error()}
}

// wrapInvalid is invalid(name, v, err), or nil for a nil err.
func wrapInvalid(name, v string, err error) error {
	if err == nil {
		return nil
	}
	return invalid(name, v, err)
}

// orList joins values as "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// boolWords are the spellings parseBool takes, in any case: PostgreSQL's
// boolean spellings, without the unique prefixes (t, f, y, n) it also
// takes. An even index is true's, the next one false's.
var boolWords = []string{"on", "off", "true", "false", "yes", "no", "1", "0"}

// errWantBool is parseBool's refusal, listing every spelling it takes,
// so that an error never names fewer values than are accepted.
var errWantBool = errors.New("want " + orList(boolWords) + " (in any case)")

// parseBool reads a PostgreSQL boolean: on/off, true/false, yes/no, 1/0,
// in any case.
func parseBool(v string) (bool, error) {
	v = strings.ToLower(v)
	for i, w := range boolWords {
		if v == w {
			return i%2 == 0, nil
		}
	}
	return false, errWantBool
}

func showBool(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// parseInt reads an integer from lo to hi.
func parseInt(name, v string, lo, hi int64, unit string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		if unit != "" {
			unit = " (" + unit + ")"
		}
		return 0, invalid(name, v, fmt.Errorf("want an integer from %d to %d%s", lo, hi, unit))
	}
	return n, nil
}

// checkCommitDelay checks a commit_delay in microseconds, or
// CommitDelayAuto.
func checkCommitDelay(us int) error {
	if us != CommitDelayAuto && (us < 0 || us > wal.MaxCommitDelay) {
		return &SettingError{Name: "commit_delay", Value: strconv.Itoa(us), Want: fmt.Sprintf("want 0 to %d microseconds, or auto", wal.MaxCommitDelay)}
	}
	return nil
}

// checkCommitSiblings checks a commit_siblings.
func checkCommitSiblings(n int) error {
	if n < 0 || n > wal.MaxCommitSiblings {
		return &SettingError{Name: "commit_siblings", Value: strconv.Itoa(n), Want: fmt.Sprintf("want 0 to %d", wal.MaxCommitSiblings)}
	}
	return nil
}

// parseCommitDelay reads commit_delay: microseconds from 0 to
// wal.MaxCommitDelay, or auto (CommitDelayAuto).
func parseCommitDelay(v string) (int, error) {
	if strings.EqualFold(v, "auto") {
		return CommitDelayAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || checkCommitDelay(n) != nil || n < 0 {
		return 0, invalid("commit_delay", v, fmt.Errorf("want 0 to %d microseconds, or auto", wal.MaxCommitDelay))
	}
	return n, nil
}

func showCommitDelay(us int) string {
	if us == CommitDelayAuto {
		return "auto"
	}
	return strconv.Itoa(us)
}

// parseSize reads a PostgreSQL memory setting: a number with a unit B, kB,
// MB, GB or TB (1024-based, as PostgreSQL), or a bare number of base
// bytes (the setting's unit).
func parseSize(s string, base int64) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, errors.New("want a size such as 128MB")
	}
	var mult int64
	switch strings.TrimSpace(s[i:]) {
	case "":
		mult = base
	case "B":
		mult = 1
	case "kB":
		mult = 1 << 10
	case "MB":
		mult = 1 << 20
	case "GB":
		mult = 1 << 30
	case "TB":
		mult = 1 << 40
	default:
		return 0, errors.New("want a size with a unit B, kB, MB, GB or TB")
	}
	if n > (1<<62)/mult {
		return 0, errors.New("want a smaller size")
	}
	return n * mult, nil
}

// formatSize prints n bytes in the largest unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// validSegmentSize says n is a power of two from 1 MiB to 1 GiB.
func validSegmentSize(n int64) bool {
	return n >= wal.MinSegmentSize && n <= wal.MaxSegmentSize && n&(n-1) == 0
}

// parseDuration reads a time setting: a bare integer counts units of
// unit, anything else is a Go duration (90s, 5m); the result must lie
// from lo to hi.
func parseDuration(v string, unit, lo, hi time.Duration) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < int64(lo/unit) || n > int64(hi/unit) {
			return 0, fmt.Errorf("want %d to %d%s", lo/unit, hi/unit, unitName(unit))
		}
		d = time.Duration(n) * unit
	} else {
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("want a number of %s or a duration such as 90s", unitWord(unit))
		}
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("want %v to %v", showDuration(lo, unit)+unitName(unit), showDuration(hi, unit)+unitName(unit))
	}
	return d, nil
}

// parseNaptime parses autovacuum_naptime as PostgreSQL's: a bare integer
// counts seconds; otherwise a Go duration (90s, 5m). The range is
// PostgreSQL's, 1 s to 2147483 s.
func parseNaptime(v string) (time.Duration, error) {
	return parseDuration(v, time.Second, time.Second, 2147483*time.Second)
}

// showDuration prints d as a number of units, or as a Go duration (1.5s,
// 5ms) when it is not a whole number of them, which parseDuration reads
// back.
func showDuration(d, unit time.Duration) string {
	if d%unit == 0 {
		return strconv.FormatInt(int64(d/unit), 10)
	}
	return d.String()
}

func unitName(unit time.Duration) string {
	if unit == time.Second {
		return "s"
	}
	return "ms"
}

func unitWord(unit time.Duration) string {
	if unit == time.Second {
		return "seconds"
	}
	return "milliseconds"
}
