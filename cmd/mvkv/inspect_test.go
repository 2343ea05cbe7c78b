package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"mvkv/engine"
)

func TestVerifyAndWaldumpCommands(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(context.Background(), func(tx *engine.Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var out, errb bytes.Buffer
	if code := run([]string{"verify", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("verify: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"waldump", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "type: CHECKPOINT") {
		t.Fatalf("waldump: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	for _, flag := range []string{"--start=", "--end="} {
		errb.Reset()
		if code := run([]string{"waldump", flag, dir}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `invalid LSN ""`) {
			t.Fatalf("waldump %s (empty): exit %d, %q; want it refused", flag, code, errb.String())
		}
	}
	if code := run([]string{"waldump", "--start", "zz", dir}, &out, &errb); code != 2 {
		t.Fatalf("bad LSN: exit %d", code)
	}
	errb.Reset()
	if code := run([]string{"waldump", "--start", "0/2000000", "--end", "0/1000000", dir}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "before --start") {
		t.Fatalf("waldump --end before --start: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	out.Reset()
	run([]string{"waldump", dir}, &out, &errb)
	second := strings.SplitN(strings.SplitN(out.String(), "\n", 3)[1], ",", 2)[0] // "lsn: X"
	out.Reset()
	if code := run([]string{"waldump", "--start", strings.TrimPrefix(second, "lsn: "), "--end", "0", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "type: CHECKPOINT") {
		t.Fatalf("waldump --start %s --end 0 (no end): exit %d, %q", second, code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"waldump", dir, "--start", "0/1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "options go before DIR") {
		t.Fatalf("waldump with an option after DIR: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"verify"}, &out, &errb); code != 2 {
		t.Fatalf("verify without a directory: exit %d", code)
	}
	// --dir, as serve, bench and crashtest take it; but only once.
	out.Reset()
	if code := run([]string{"verify", "--dir", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("verify --dir: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"waldump", "--dir=" + dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "type: CHECKPOINT") {
		t.Fatalf("waldump --dir: exit %d\n%s%s", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run([]string{"verify", "--dir", dir, dir}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "given twice") {
		t.Fatalf("verify --dir D D: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"verify", t.TempDir() + "/missing/\x00bad"}, &out, &errb); code != 1 {
		t.Fatalf("verify of an unusable path: exit %d", code)
	}
}

func TestParseLSN(t *testing.T) {
	for in, want := range map[string]uint64{"0/01000028": 0x1000028, "1/0": 1 << 32, "0x10": 16, "42": 42, "010": 10, "0X1f": 31} {
		if got, err := parseLSN(in); err != nil || got != want {
			t.Errorf("parseLSN(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x/1", "1/zz", "-1", "0x", "0b1"} {
		if _, err := parseLSN(bad); err == nil {
			t.Errorf("parseLSN(%q) accepted", bad)
		}
	}
}

// waldump on a directory a running database holds says so (the log's end
// moves under the dump, which pg_waldump on a live server shares), and
// dumps all the same; on a stopped one it says nothing of the kind.
func TestWaldumpWarnsOfRunningDatabase(t *testing.T) {
	dir := t.TempDir()
	db, err := engine.Open(dir, engine.Options{SharedBuffers: 1 << 20, WALSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"waldump", dir}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "in use by a running database") {
		t.Fatalf("waldump of a running database: exit %d, stderr %q", code, errb.String())
	}
	db.Close()
	errb.Reset()
	if code := run([]string{"waldump", dir}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("waldump of a stopped database: exit %d, stderr %q", code, errb.String())
	}
}
