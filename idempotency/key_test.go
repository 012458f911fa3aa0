package idempotency

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		lines []string // header field lines; nil for none
		want  string   // the key, when valid
		bad   string   // a part of the reason, when malformed
	}{
		{name: "none", lines: nil, bad: "no Idempotency-Key"},
		{name: "uuid", lines: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "spaces around", lines: []string{`  "k"  `}, want: "k"},
		{name: "escapes", lines: []string{`"a\"b\\c"`}, want: `a"b\c`},
		{name: "space inside", lines: []string{`"a b"`}, want: "a b"},
		{name: "parameters", lines: []string{`"k";a=1;b;c="x";d=?0;e=:AQI=:;f=tok/en;g=-1.25;*h=2`}, want: "k"},
		{name: "parameter after spaces", lines: []string{`"k"; a=1`}, want: "k"},
		{name: "longest", lines: []string{`"` + strings.Repeat("k", 255) + `"`}, want: strings.Repeat("k", 255)},
		{name: "token", lines: []string{`abc`}, bad: "double quotes"},
		{name: "empty value", lines: []string{``}, bad: "double quotes"},
		{name: "empty string", lines: []string{`""`}, bad: "empty"},
		{name: "too long", lines: []string{`"` + strings.Repeat("k", 256) + `"`}, bad: "longer than 255"},
		{name: "unclosed", lines: []string{`"abc`}, bad: "no closing"},
		{name: "bad escape", lines: []string{`"a\nb"`}, bad: "backslash"},
		{name: "trailing backslash", lines: []string{`"a\`}, bad: "backslash"},
		{name: "control byte", lines: []string{"\"a\tb\""}, bad: "printable ASCII"},
		{name: "NUL", lines: []string{"\"a\x00b\""}, bad: "printable ASCII"},
		{name: "UTF-8", lines: []string{"\"caf\xc3\xa9\""}, bad: "printable ASCII"},
		{name: "invalid UTF-8", lines: []string{"\"\xff\""}, bad: "printable ASCII"},
		{name: "list", lines: []string{`"a", "b"`}, bad: "after the string"},
		{name: "two lines", lines: []string{`"a"`, `"b"`}, bad: "more than once"},
		{name: "junk after", lines: []string{`"a"x`}, bad: "after the string"},
		{name: "uppercase parameter", lines: []string{`"a";A=1`}, bad: "parameter's name"},
		{name: "empty parameter value", lines: []string{`"a";a=`}, bad: "malformed"},
		{name: "bad boolean", lines: []string{`"a";a=?2`}, bad: "malformed"},
		{name: "long integer", lines: []string{`"a";a=1234567890123456`}, bad: "number"},
		{name: "long fraction", lines: []string{`"a";a=1.2345`}, bad: "number"},
		{name: "bad byte sequence", lines: []string{`"a";a=:#:`}, bad: "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, l := range c.lines {
				h.Add(HeaderName, l)
			}
			got, err := parseKey(h, 255)
			if c.bad != "" {
				if err == nil || !strings.Contains(err.Error(), c.bad) {
					t.Fatalf("parseKey(%q) = %q, %v; want an error saying %q", c.lines, got, err, c.bad)
				}
				var ke *KeyError
				if c.lines != nil && !errors.As(err, &ke) {
					t.Fatalf("parseKey(%q): %v is not a *KeyError", c.lines, err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("parseKey(%q) = %q, %v; want %q", c.lines, got, err, c.want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"k"`, `"a\"b";x=1`, `"`, `"a";b=:AA==:`, `"a";b=-1.5`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{HeaderName: {s}}
		key, err := parseKey(h, 255)
		if err != nil {
			return
		}
		if len(key) == 0 || len(key) > 255 {
			t.Fatalf("parseKey(%q) = %q: a key out of bounds", s, key)
		}
		for _, c := range key {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("parseKey(%q) = %q: byte 0x%02x", s, key, c)
			}
		}
	})
}
