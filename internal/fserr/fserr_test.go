package fserr

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestWrapNamesFileOnce(t *testing.T) {
	pe := &fs.PathError{Op: "read", Path: "/d/f", Err: syscall.EIO}
	le := &os.LinkError{Op: "rename", Old: "/d/f.tmp", New: "/d/f", Err: syscall.ENOSPC}
	plain := errors.New("short read")
	for _, c := range []struct {
		err  error
		want string
	}{
		{Wrap("wal", "read", "/d/f", pe), "wal: read /d/f: input/output error"},
		{WrapAt("wal", "read", "/d/f", 512, pe), "wal: read /d/f: input/output error (at offset 512)"},
		{Wrap("wal", "rename", "/d/f.tmp", le), "wal: rename /d/f.tmp /d/f: no space left on device"},
		{Wrap("clog", "read", "/d/f", plain), "clog: read /d/f: short read"},
		{WrapAt("clog", "read", "/d/f", 8192, plain), "clog: read /d/f at offset 8192: short read"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
		if strings.Count(c.err.Error(), "/d/f ") > 1 {
			t.Errorf("%q names the file twice", c.err)
		}
	}
	var got *fs.PathError
	if err := WrapAt("wal", "read", "/d/f", 0, pe); !errors.As(err, &got) || !errors.Is(err, syscall.EIO) {
		t.Errorf("%v does not match its *fs.PathError and errno", err)
	}
}
