package clip

import "testing"

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"ab", 3, "ab"},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abcd", 0, ""},
	} {
		if got := Prefix(tc.in, tc.n); got != tc.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if got := Prefix([]byte(tc.in), tc.n); string(got) != tc.want {
			t.Errorf("Prefix([]byte(%q), %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	b := []byte("abcdef")
	if p := Prefix(b, 4); &p[0] != &b[0] {
		t.Error("Prefix copied its argument")
	}
}
