package main

import (
	"errors"
	"flag"
	"path/filepath"
	"strings"

	"mvkv/engine"
	"mvkv/vfs"
	"mvkv/wal"
)

// engineFlags defines a flag for every engine setting (engine.Settings) on
// fs, --commit-delay for commit_delay, each storing its value in o through
// the setting's own parser. A flag left out leaves its field at the zero
// value, which Open reads as the setting's default: the default lives in
// the table only.
func engineFlags(fs *flag.FlagSet, o *engine.Options) {
	for _, s := range engine.Settings() {
		fs.Func(flagName(s), s.Description, func(v string) error { return setFlag(s, o, v) })
		for _, a := range s.Aliases {
			// An older name, still taken; the help lists the new one.
			fs.Func(strings.ReplaceAll(a, "_", "-"), s.Description, func(v string) error { return setFlag(s, o, v) })
		}
	}
}

// setFlag stores v in o; its error is what the flag package prints after
// "invalid value V for flag -NAME: ". Spaces around v are dropped first
// (--zero-damaged-pages=" on" from a script's quoting), which Setting.Set, also
// CONFIG SET's parser, refuses.
func setFlag(s engine.Setting, o *engine.Options, v string) error {
	err := s.Set(o, strings.TrimSpace(v))
	var se *engine.SettingError
	if errors.As(err, &se) {
		return errors.New(se.Want)
	}
	return err
}

// flagName is the command-line name of a setting: its name with dashes.
func flagName(s engine.Setting) string { return strings.ReplaceAll(s.Name, "_", "-") }

// engineUsage is the help text of the engine flags, the same for every
// command that takes them: one entry per setting, its default last.
func engineUsage() string {
	var b strings.Builder
	for _, s := range engine.Settings() {
		writeOption(&b, "--"+flagName(s)+"="+s.Syntax, s.Description+rangeText(s)+" (default: "+s.Default+")")
	}
	return b.String()
}

// rangeText is a number's range as the help text gives it, after the
// description.
func rangeText(s engine.Setting) string {
	if s.Min == "" {
		return ""
	}
	if s.Max == "" {
		return "; at least " + s.Min
	}
	unit := map[string]string{"us": " microseconds", "ms": " ms", "s": " s", "%": " percent"}[s.Unit]
	return "; " + s.Min + " to " + s.Max + unit
}

// Help text layout: options start at column 3, their text at column 28 and
// ends by column 77.
const (
	optionIndent = "  "
	textColumn   = 27
	lineWidth    = 77
)

// writeOption writes one option of a help text: the option and its text
// wrapped beside it, or below it when the option leaves no room.
func writeOption(b *strings.Builder, option, text string) {
	line := optionIndent + option
	if len(line) > textColumn-2 {
		b.WriteString(line + "\n")
		line = ""
	}
	for _, w := range strings.Fields(text) {
		if len(line) > textColumn && len(line)+1+len(w) > lineWidth {
			b.WriteString(line + "\n")
			line = ""
		}
		if len(line) < textColumn {
			line += strings.Repeat(" ", textColumn-len(line)) + w
		} else {
			line += " " + w
		}
	}
	b.WriteString(line + "\n")
}

// withDiskSegmentSize returns o with WALSegmentSize set to the segment size
// of the WAL already in dir, when o leaves it unset and dir holds one: an
// existing database keeps the segment size its WAL was written with (Open
// uses it whatever is configured), and max_wal_size is checked against
// that one, not the default.
func withDiskSegmentSize(o engine.Options, dir string) engine.Options {
	if o.WALSegmentSize != 0 || dir == "" {
		return o
	}
	r, err := wal.NewReader(vfs.OS{}, filepath.Join(dir, "wal"), 0)
	if err != nil {
		return o
	}
	defer r.Close()
	r.Next() // reads the first segment's header
	if sz := r.SegmentSize(); sz > 0 {
		o.WALSegmentSize = sz
	}
	return o
}
