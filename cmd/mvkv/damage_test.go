package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"mvkv/engine"
)

// digest maps every file under dir to a hash of its contents, leaving out
// the lock file, which Open creates before it reads anything.
func digest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "LOCK" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cloneDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if len(e.Name()) == 16 {
			out = append(out, filepath.Join(dir, "wal", e.Name()))
		}
	}
	sort.Strings(out)
	return out
}

// TestVerifyNamesDamage makes each kind of damage that used to read as
// valid data by hand, on a stopped directory (closed cleanly, or copied
// while the process was still running, as a kill -9 leaves it), and runs
// mvkv verify: exit status 1, a message naming the file, and not a byte
// changed on disk.
func TestVerifyNamesDamage(t *testing.T) {
	ctx := context.Background()
	put := func(db *engine.DB, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			err := db.Update(ctx, func(tx *engine.Txn) error {
				return tx.Put(fmt.Appendf(nil, "key-%05d", i%800), bytes.Repeat([]byte{byte('a' + i/800)}, 300))
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	opts := engine.Options{WALSegmentSize: 1 << 20, CheckpointTimeout: -1, SharedBuffers: 4 << 20}
	off := false
	opts.Autovacuum = &off

	clean := t.TempDir()
	db, err := engine.Open(clean, opts)
	if err != nil {
		t.Fatal(err)
	}
	put(db, 0, 1600)
	db.Close()

	// killed: a checkpoint, then enough WAL to fill several segments,
	// copied while the database is still open.
	live := t.TempDir()
	db, err = engine.Open(live, opts)
	if err != nil {
		t.Fatal(err)
	}
	put(db, 0, 800)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	put(db, 800, 4000)
	killed := t.TempDir()
	cloneDir(t, live, killed)
	db.Close()

	var out, errb bytes.Buffer
	for _, d := range []string{clean, killed} {
		check := t.TempDir()
		cloneDir(t, d, check)
		out.Reset()
		errb.Reset()
		if code := run([]string{"verify", check}, &out, &errb); code != 0 {
			t.Fatalf("verify before any damage: exit %d\n%s%s", code, out.String(), errb.String())
		}
	}
	segs := walFiles(t, killed)
	if len(segs) < 3 {
		t.Fatalf("want at least 3 WAL segments in the killed directory, have %v", segs)
	}
	// The newest segment holding records is the one before the prepared,
	// empty one at the end.
	newest := filepath.Base(segs[len(segs)-2])

	zero := func(p string, off, n int64) error {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteAt(make([]byte, n), off)
		return err
	}
	for _, c := range []struct {
		name, base string
		damage     func(dir string) error
		want       []string
	}{
		{"heap page zeroed", clean, func(d string) error { return zero(filepath.Join(d, "heap", "00000000"), 5*8192, 8192) },
			[]string{filepath.Join("heap", "00000000") + " at offset 40960 (block 5)", "keys lost: "}},
		{"CLOG segment zeroed after a clean shutdown", clean, func(d string) error { return zero(filepath.Join(d, "clog", "000000000000"), 0, 8192) },
			[]string{filepath.Join("clog", "000000000000") + " page at offset 0 is all zeros"}},
		{"CLOG segment removed after a crash", killed, func(d string) error { return os.Remove(filepath.Join(d, "clog", "000000000000")) },
			[]string{filepath.Join("clog", "000000000000") + " is missing"}},
		{"newest WAL segment cut short after a crash", killed, func(d string) error { return os.Truncate(filepath.Join(d, "wal", newest), 300000) },
			[]string{filepath.Join("wal", newest) + " is 300000 bytes, cut short", "is lost"}},
		{"newest WAL segment removed after a crash", killed, func(d string) error { return os.Remove(filepath.Join(d, "wal", newest)) },
			[]string{filepath.Join("wal", newest) + " is missing", "is lost"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cloneDir(t, c.base, dir)
			if err := c.damage(dir); err != nil {
				t.Fatal(err)
			}
			before := digest(t, dir)
			var out, errb bytes.Buffer
			code := run([]string{"verify", dir}, &out, &errb)
			msg := out.String() + errb.String()
			if code != 1 {
				t.Fatalf("verify: exit %d, want 1\n%s", code, msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("verify output lacks %q:\n%s", w, msg)
				}
			}
			t.Logf("%s", strings.TrimSpace(msg))
			if after := digest(t, dir); !maps.Equal(before, after) {
				t.Fatalf("verify changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}
