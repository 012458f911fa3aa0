package failgroup

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{" \t\n", Blank},
		{"card declined", "card declined"},
		{"charge poison-00000: card declined", "charge poison-<n>: card declined"},
		{"charge poison-00001: card declined", "charge poison-<n>: card declined"},
		{"order 12345 not found", "order <n> not found"},
		{"amount 12.50 over limit 10", "amount <n> over limit <n>"},
		{"user 3F2504E0-4F89-11D3-9A0C-0305E82C3301 unknown", "user <uuid> unknown"},
		{"user 3f2504e0-4f89-11d3-9a0c-0305e82c3301 unknown", "user <uuid> unknown"},
		{"object 5f2b9c1e8a7d4e3f9b0c1d2e missing", "object <hex> missing"},
		{"bad pointer 0xc000012345", "bad pointer <hex>"},
		{"customer ord_8f3kq2 suspended", "customer <id> suspended"},
		{"dial tcp 10.0.0.7:5432: connection refused", "dial tcp <n>.<n>:<n>: connection refused"},
		{"deadline  exceeded\n\tafter retry", "deadline exceeded after retry"},
		{"ERROR: duplicate key (SQLSTATE 23505)", "ERROR: duplicate key (SQLSTATE <n>)"},
		{"utf8 \xff\xfe bytes", "utf8 \uFFFD bytes"},
	} {
		if got := Of(tc.in); got != tc.want {
			t.Errorf("Of(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestOfSameGroup: errors that differ only in what changes per message
// are one group; errors that differ in their cause are two.
func TestOfSameGroup(t *testing.T) {
	t.Parallel()
	same := [][2]string{
		{"timeout after 30s calling payments-7f3a9c2b1d", "timeout after 45s calling payments-0b1c2d3e4f"},
		{"row 1 of batch 9: invalid amount", "row 17 of batch 120: invalid amount"},
		{`message "a1b2c3" rejected`, `message "z9y8x7" rejected`},
	}
	for _, p := range same {
		if a, b := Of(p[0]), Of(p[1]); a != b {
			t.Errorf("%q and %q: groups %q and %q, want one", p[0], p[1], a, b)
		}
	}
	differ := [][2]string{
		{"card declined", "card expired"},
		{"charge 1: card declined", "refund 1: card declined"},
	}
	for _, p := range differ {
		if a, b := Of(p[0]), Of(p[1]); a == b {
			t.Errorf("%q and %q: one group %q, want two", p[0], p[1], a)
		}
	}
}

func TestOfLength(t *testing.T) {
	t.Parallel()
	for _, in := range []string{strings.Repeat("x", 1000), strings.Repeat("é", 300), strings.Repeat("ab 😀 ", 100)} {
		got := Of(in)
		if len(got) > MaxLen || !utf8.ValidString(got) {
			t.Errorf("Of(%d bytes) = %d bytes, valid UTF-8 %v; want at most %d, valid", len(in), len(got), utf8.ValidString(got), MaxLen)
		}
		if !strings.HasPrefix(in, got) {
			t.Errorf("Of(%q…) = %q…, not its prefix", in[:20], got[:20])
		}
	}
}

func BenchmarkOf(b *testing.B) {
	text := "charge 3f2504e0-4f89-11d3-9a0c-0305e82c3301 poison-00042: card declined after 3 retries (code 0x51)"
	for b.Loop() {
		Of(text)
	}
}
