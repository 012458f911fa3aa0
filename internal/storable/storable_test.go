package storable

import "testing"

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		nul  string
		want string
	}{
		{"plain", 10, "", "plain"},
		{"a\x00b", 10, `\0`, `a\0b`},
		{"a\x00\xffb", 10, "\uFFFD", "a\uFFFD\uFFFDb"},
		{"a\xffb", 10, "", "a\uFFFDb"},
		{"abcdef", 3, "", "abc"},
		{"aé", 2, "", "a"}, // é is two bytes: the cut keeps whole runes
	} {
		if got := Text(tc.in, tc.n, tc.nul); got != tc.want {
			t.Errorf("Text(%q, %d, %q) = %q, want %q", tc.in, tc.n, tc.nul, got, tc.want)
		}
	}
}
