package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
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
	bin := filepath.Join(t.TempDir(), "mvkv")
	if out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".").CombinedOutput(); err != nil {
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
