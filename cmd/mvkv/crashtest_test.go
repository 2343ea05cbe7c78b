package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashtestModes runs a few cycles of each mode of mvkv crashtest from
// a freshly built binary (kill and server modes start it as a child): each
// must print a line per cycle and PASS with exit status 0.
func TestCrashtestModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs child processes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "mvkv")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"--mode", "power", "--cycles", "3", "--seed", "1"},
		{"--mode", "kill", "--cycles", "3", "--seed", "1"},
		{"--mode", "server", "--cycles", "2", "--seed", "1"},
	} {
		t.Run(args[1], func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"crashtest"}, args...)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out.String())
			}
			s := out.String()
			if !strings.Contains(s, "PASS: mode "+args[1]) || !strings.Contains(s, "seed 1") || strings.Count(s, "\ncycle ") < 2 {
				t.Fatalf("%v:\n%s", args, s)
			}
		})
	}
}

// TestCrashtestUsage: bad options are exit status 2.
func TestCrashtestUsage(t *testing.T) {
	for _, args := range [][]string{{"--clients", "0"}, {"--bogus"}, {"extra"}, {"--mode", "nope", "--cycles", "1"}} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"crashtest"}, args...), &out, &errb); code != 2 {
			t.Errorf("crashtest %v: exit %d, want 2\n%s%s", args, code, out.String(), errb.String())
		}
	}
}

// TestCrashtestOptionErrors: each option out of range gets its own line,
// naming the option and its value, then the line saying where the help
// is, and exit status 2.
func TestCrashtestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cycles", "-1"}, "mvkv crashtest: invalid --cycles -1 (want 0 or more)\n"},
		{[]string{"--duration", "-5s"}, "mvkv crashtest: invalid --duration -5s (want 0 or more)\n"},
		{[]string{"--clients", "0"}, "mvkv crashtest: invalid --clients 0 (want 1 to 64)\n"},
		{[]string{"--clients", "65", "--cycles", "1"}, "mvkv crashtest: invalid --clients 65 (want 1 to 64)\n"},
		{[]string{"--clients", "0", "--cycles", "-2", "--duration", "-1m"}, "mvkv crashtest: invalid --clients 0 (want 1 to 64)\n" +
			"mvkv crashtest: invalid --cycles -2 (want 0 or more)\nmvkv crashtest: invalid --duration -1m0s (want 0 or more)\n"},
	} {
		var out, errb bytes.Buffer
		c.want += tryHelp("crashtest")
		if code := run(append([]string{"crashtest"}, c.args...), &out, &errb); code != 2 || errb.String() != c.want || out.Len() != 0 {
			t.Errorf("crashtest %v: exit %d, stdout %q, stderr %q; want exit 2, stderr %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}

// TestCrashtestErrorPrefix: an error of the crashtest package or of the
// engine is printed after "mvkv crashtest: " without a prefix of its own.
func TestCrashtestErrorPrefix(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Power mode writes a failing crash copy to --dir, so it refuses a
	// directory holding anything too, before it runs.
	for _, mode := range []string{"kill", "server", "power"} {
		var out, errb bytes.Buffer
		code := run([]string{"crashtest", "--mode", mode, "--dir", dir, "--cycles", "1", "--seed", "1"}, &out, &errb)
		want := "mvkv crashtest: " + dir + " is not empty; give a new directory\n"
		if code != 1 || errb.String() != want {
			t.Errorf("--mode %s on a non-empty --dir: exit %d, stderr %q; want exit 1, stderr %q", mode, code, errb.String(), want)
		}
		if out.Len() > 0 {
			t.Errorf("--mode %s on a non-empty --dir printed %q before refusing it", mode, out.String())
		}
	}
	for in, want := range map[string]string{
		"crashtest: x":       "x",
		"mvkv: x":            "x",
		"crashtest: mvkv: x": "x",
		"x: crashtest: y":    "x: crashtest: y",
	} {
		if got := crashtestErrorText(errors.New(in)); got != want {
			t.Errorf("crashtestErrorText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCrashtestRefusedDirLeavesProfileAlone: a --dir that is refused is
// refused before --cpuprofile's file is created, which truncated a file
// of that name, and made an empty --dir holding the profile not empty.
func TestCrashtestRefusedDirLeavesProfileAlone(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	if err := os.WriteFile(prof, []byte("an earlier profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"crashtest", "--dir", dir, "--cpuprofile", prof, "--cycles", "1", "--seed", "1"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d on a non-empty --dir, want 1; stderr %q", code, errb.String())
	}
	if b, err := os.ReadFile(prof); err != nil || string(b) != "an earlier profile" {
		t.Errorf("--cpuprofile's file after the refusal: %q, %v; want it unchanged", b, err)
	}
}

// TestCrashtestProfileInsideDir: a --cpuprofile inside --dir is refused
// as bad usage before anything is printed or created, where the profile
// made the new --dir not empty and the run refused it after its first
// line.
func TestCrashtestProfileInsideDir(t *testing.T) {
	dir := t.TempDir()
	// A link to dir from elsewhere: a profile through it lands in dir.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, prof := range []string{filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "sub", "..", "cpu.prof"), filepath.Join(link, "cpu.prof"), filepath.Join(link, "new", "cpu.prof")} {
		var out, errb bytes.Buffer
		code := run([]string{"crashtest", "--dir", dir, "--cpuprofile", prof, "--cycles", "1", "--seed", "1"}, &out, &errb)
		if code != 2 || out.Len() > 0 || !strings.Contains(errb.String(), "inside --dir") {
			t.Errorf("--cpuprofile %s inside --dir: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout", prof, code, out.String(), errb.String())
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
			t.Errorf("--dir after the refusal: %v, %v; want it empty", ents, err)
		}
	}
	if !pathWithin("/a/b", "/a") || pathWithin("/ab", "/a") || pathWithin("/a/../b", "/a") || !pathWithin("/a/..b", "/a") {
		t.Error("pathWithin")
	}
}
