package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpCommand: "mvkv help CMD" prints what "mvkv CMD --help" prints,
// "mvkv help" the general usage, and an unknown command is an error with
// exit status 2.
func TestHelpCommand(t *testing.T) {
	for name := range commands {
		var want, wantErr, got, gotErr bytes.Buffer
		wantCode := run([]string{name, "--help"}, &want, &wantErr)
		code := run([]string{"help", name}, &got, &gotErr)
		if code != 0 || wantCode != 0 || got.String() != want.String() || gotErr.Len() != 0 || want.Len() == 0 {
			t.Errorf("help %s: exit %d, stderr %q; %s --help: exit %d; same output: %v",
				name, code, gotErr.String(), name, wantCode, got.String() == want.String())
		}
		if got.String() == usage {
			t.Errorf("help %s printed the general usage", name)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"--help"}, {"-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || out.String() != usage || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "nosuch"}, "mvkv help: unknown command \"nosuch\"\n"},
		{[]string{"help", "serve", "verify"}, "mvkv help: too many arguments"},
		{[]string{"nosuch"}, "mvkv: unknown command \"nosuch\"\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || out.Len() != 0 || !strings.HasPrefix(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, stderr starting %q", c.args, code, out.String(), errb.String(), c.want)
		}
	}
}
