package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every command answers a usage error the same way: one line naming the
// command and the problem, one line saying where the help is, exit 2,
// nothing on stdout.
func TestUsageErrorsSayWhereHelpIs(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		hint string
	}{
		{[]string{"bogus"}, `Try "mvkv help" for the list of commands.`},
		{[]string{"help", "bogus"}, `Try "mvkv help" for the list of commands.`},
		{[]string{"help", "a", "b"}, `Try "mvkv help" for the list of commands.`},
		{[]string{"version", "x"}, `Try "mvkv version --help" for more information.`},
		{[]string{"verify"}, `Try "mvkv verify --help" for more information.`},
		{[]string{"verify", "--bogus", dir}, `Try "mvkv verify --help" for more information.`},
		{[]string{"verify", dir, "--json"}, `Try "mvkv verify --help" for more information.`},
		{[]string{"verify", dir + "/missing"}, `Try "mvkv verify --help" for more information.`},
		{[]string{"verify", "--dir", dir + "/missing"}, `Try "mvkv verify --help" for more information.`},
		{[]string{"waldump"}, `Try "mvkv waldump --help" for more information.`},
		{[]string{"waldump", dir + "/missing"}, `Try "mvkv waldump --help" for more information.`},
		{[]string{"crashtest", "--bogus"}, `Try "mvkv crashtest --help" for more information.`},
		{[]string{"crashtest", "extra"}, `Try "mvkv crashtest --help" for more information.`},
		{[]string{"crashtest", "--mode", "foo"}, `Try "mvkv crashtest --help" for more information.`},
		{[]string{"crashtest", "--clients", "0"}, `Try "mvkv crashtest --help" for more information.`},
		{[]string{"crashtest", "--duration", "-5s"}, `Try "mvkv crashtest --help" for more information.`},
		{[]string{"waldump", "--start", "xyz", dir}, `Try "mvkv waldump --help" for more information.`},
		{[]string{"waldump", "--end", "1/ZZ", dir}, `Try "mvkv waldump --help" for more information.`},
		{[]string{"waldump", "--start", "0/2000", "--end", "0/1000", dir}, `Try "mvkv waldump --help" for more information.`},
		{[]string{"bench", "--bogus"}, `Try "mvkv bench --help" for more information.`},
		{[]string{"serve", "--bogus"}, `Try "mvkv serve --help" for more information.`},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if code != 2 || out.Len() != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "mvkv") || lines[1] != c.hint {
			t.Errorf("mvkv %s: exit %d, stdout %q, stderr %q; want exit 2 and two lines ending %q",
				strings.Join(c.args, " "), code, out.String(), errb.String(), c.hint)
		}
	}
}
