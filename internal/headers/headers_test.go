package headers

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

// Names and values of any bytes come back as they were stored: invalid
// UTF-8 in a name is neither replaced nor merged with another name.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    map[string]string
	}{
		{"invalid UTF-8 names", map[string]string{"k\xfe": "b", "k\xff": "a", "ok": "c"}},
		{"replacement character and its bytes", map[string]string{"k\uFFFD": "1", "k\xef\xbf": "2", "k\xff": "3"}},
		{"NUL and controls", map[string]string{"\x00": "\x00", "a\x00b": "\x01\x1f\x7f", "": "empty name"}},
		{"UTF-8", map[string]string{"é": "日本", "<&>": "\u2028", "traceparent": "00-abc-01"}},
		{"binary values", map[string]string{"bin": "\x00\xff", "empty": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(Encode(tc.h))
			if err != nil {
				t.Fatalf("Decode(Encode(%q)): %v", tc.h, err)
			}
			if !maps.Equal(got, tc.h) {
				t.Fatalf("Decode(Encode(%q)) = %q (%d headers), want them back as they were", tc.h, got, len(got))
			}
		})
	}
}

// Rows written by earlier releases, a JSON object of base64 values,
// decode as they always did.
func TestDecodeLegacy(t *testing.T) {
	tests := []struct {
		stored string
		want   map[string]string
	}{
		{`{"bin":"AP8=","trace":"dC0x"}`, map[string]string{"bin": "\x00\xff", "trace": "t-1"}},
		{`{"empty":"","é":"5pel5pys"}`, map[string]string{"empty": "", "é": "日本"}},
		{`{"\u003c\u0026\u003e":"YQ=="}`, map[string]string{"<&>": "a"}},
		{`{}`, map[string]string{}},
	}
	for _, tc := range tests {
		got, err := Decode([]byte(tc.stored))
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("Decode(%s) = %q, %v; want %q", tc.stored, got, err, tc.want)
		}
	}
	if got, err := Decode(nil); got != nil || err != nil {
		t.Errorf("Decode(nil) = %q, %v; want nil, nil", got, err)
	}
}

// Encode writes what earlier releases can read whenever that format is
// lossless (every name valid UTF-8), so that a rolling upgrade's older
// processes still read the rows of the newer ones.
func TestEncodeLegacyWhenLossless(t *testing.T) {
	got := Encode(map[string]string{"trace": "t-1", "bin": "\x00\xff"})
	if want := `{"bin":"AP8=","trace":"dC0x"}`; string(got) != want {
		t.Fatalf("Encode = %q, want the JSON object earlier releases wrote, %s", got, want)
	}
	if Encode(nil) != nil || Encode(map[string]string{}) != nil {
		t.Fatal("Encode of no headers is not nil")
	}
	if b := Encode(map[string]string{"k\xff": "v"}); bytes.Equal(b, LostMarker) || len(b) == 0 || b[0] == '{' || b[0] == '[' {
		t.Fatalf("Encode of an invalid UTF-8 name = %q: it must not read as JSON (nor as LostMarker)", b)
	}
}

// Corrupt stored bytes are an error, never a panic or a silent merge.
func TestDecodeCorrupt(t *testing.T) {
	valid := Encode(map[string]string{"k\xff": "value", "b": "c"})
	tests := map[string][]byte{
		"truncated":          valid[:len(valid)-1],
		"trailing bytes":     append(append([]byte{}, valid...), 0),
		"unknown version":    {0x7f, 1, 'a', 1, 'b'},
		"duplicate name":     {formatV2, 1, 'a', 1, 'b', 1, 'a', 1, 'c'},
		"names out of order": {formatV2, 1, 'b', 0, 1, 'a', 0},
		"huge length":        {formatV2, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad JSON":           []byte(`{"a":`),
		"not base64":         []byte(`{"a":"!"}`),
		"lost marker":        LostMarker,
	}
	for name, b := range tests {
		if h, err := Decode(b); err == nil || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Decode(%q) = %q, %v; want an error wrapping ErrCorrupt", name, b, h, err)
		}
	}
}

// FuzzRoundTrip: any names and values, as pairs of byte strings, come
// back as they were; any bytes decode or fail without a panic.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("k\xfe\x00b\x00k\xff\x00a\x00ok\x00c"))
	f.Add([]byte("\x00\x00"))
	f.Add([]byte(`{"a":"YQ=="}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Decode(b) // must not panic
		h := map[string]string{}
		parts := bytes.Split(b, []byte{0})
		for i := 0; i+1 < len(parts); i += 2 {
			h[string(parts[i])] = string(parts[i+1])
		}
		got, err := Decode(Encode(h))
		if err != nil {
			t.Fatalf("Decode(Encode(%q)): %v", h, err)
		}
		if len(h) == 0 {
			if got != nil {
				t.Fatalf("no headers came back as %q", got)
			}
			return
		}
		if !maps.Equal(got, h) {
			t.Fatalf("Decode(Encode(%q)) = %q", h, got)
		}
	})
}
