package vfs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestOutsideModule builds a fresh module outside this one that imports the
// vfs and engine packages through a replace directive, as an application
// would, and runs its crash loop (testdata/crashapp) twice: as written it
// must pass, and with its planted bug (-split: a transfer's debit and credit
// in separate transactions) it must report the broken invariant and exit 1.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a separate module")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		t.Skipf("no go command: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("testdata/crashapp/main.go")
	if err != nil {
		t.Fatal(err)
	}
	gomod := "module crashapp\n\ngo 1.26\n\nrequire mvkv v0.0.0\n\nreplace mvkv => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"main.go": src, "go.mod": []byte(gomod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out), 0
	}
	if out, rc := run("build", "-o", "crashapp", "."); rc != 0 {
		t.Fatalf("build of the outside module failed (%d):\n%s", rc, out)
	}
	bin := "./crashapp"
	exe := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	out, rc := exe()
	if rc != 0 || !strings.Contains(out, " 0 failures") {
		t.Fatalf("correct application: exit %d, output:\n%s", rc, out)
	}
	t.Logf("correct application: %s", strings.TrimSpace(out))
	out, rc = exe("-split")
	if rc != 1 || !strings.Contains(out, "a+b = 99+0, want 100") {
		t.Fatalf("planted bug: exit %d, output:\n%s", rc, out)
	}
	t.Logf("planted bug: %s", strings.SplitN(out, "\n", 3)[:2])
}
