package filecopy

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"testing"

	"mvkv/vfs"
)

func TestSynced(t *testing.T) {
	m := vfs.NewMemFS()
	src := bytes.Repeat([]byte("abcdefgh"), 1000) // 8,000 bytes
	f, err := m.Create("/src")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(src, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	zeros := func(n int) []byte { return make([]byte, n) }
	for _, c := range []struct {
		name       string
		keep, size int64
		want       []byte
	}{
		{"whole", -1, 0, src},
		{"cut and zeros", 3000, 8192, append(append([]byte{}, src[:3000]...), zeros(5192)...)},
		{"cut at the end", 8000, 8000, src},
		{"cut, no zeros", 100, 50, src[:100]},
		{"short source", 9000, 9500, src},
	} {
		dst := "/dst-" + c.name
		if err := Synced(m, "/src", m, dst, c.keep, c.size, make([]byte, 777)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// The caller syncs the directory; the data must be durable.
		if err := m.SyncDir("/"); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, m.CrashCopy(vfs.DropUnsynced, nil), dst)
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: copy of %d bytes, want %d (or their contents differ)", c.name, len(got), len(c.want))
		}
	}
	if err := Synced(m, "/missing", m, "/dst-missing", -1, 0, make([]byte, 8)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing source: %v, want fs.ErrNotExist", err)
	}
	if err := Synced(m, "/src", m, "/dst-nobuf", -1, 0, nil); err == nil {
		t.Error("an empty buffer was taken")
	}
}

func readAll(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.OpenReadOnly(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []byte
	buf := make([]byte, 4096)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
