package idempotency

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Content-Type": {"application/json"},
		"Link":         {"<a>; rel=next", "<b>; rel=prev"},
		"Location":     {"/x\xff\x00y"},
		"Set-Cookie":   {"session=secret"},
		"X-Other":      {"not named"},
	}
	got, err := decodeHeader(encodeHeader(h, []string{"Content-Type", "Link", "Location", "Etag"}))
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Content-Type": h["Content-Type"], "Link": h["Link"], "Location": h["Location"]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %q, want %q", got, want)
	}
	for _, b := range [][]byte{nil, {2}, {1, 5, 'a'}, {1, 1, 'a', 9}, {1, 1, 'a', 1, 4, 'x'}} {
		if _, err := decodeHeader(b); err == nil {
			t.Fatalf("decodeHeader(%q): no error for corrupt bytes", b)
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(encodeHeader(http.Header{"A": {"b", "c"}}, []string{"A"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		if _, err := decodeHeader(encodeHeader(h, names)); err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", h, err)
		}
	})
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	req := func(method, target, ctype string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		r.Header.Set("Content-Type", ctype)
		return r
	}
	base := fingerprint(req("POST", "/a?x=1", "json"), []string{"Content-Type"}, []byte("body"))
	for _, c := range []struct {
		name string
		fp   []byte
	}{
		{"method", fingerprint(req("PUT", "/a?x=1", "json"), []string{"Content-Type"}, []byte("body"))},
		{"path", fingerprint(req("POST", "/b?x=1", "json"), []string{"Content-Type"}, []byte("body"))},
		{"query", fingerprint(req("POST", "/a?x=2", "json"), []string{"Content-Type"}, []byte("body"))},
		{"header", fingerprint(req("POST", "/a?x=1", "xml"), []string{"Content-Type"}, []byte("body"))},
		{"body", fingerprint(req("POST", "/a?x=1", "json"), []string{"Content-Type"}, []byte("bodz"))},
	} {
		if bytes.Equal(c.fp, base) {
			t.Errorf("another %s gives the same fingerprint", c.name)
		}
	}
	if !bytes.Equal(fingerprint(req("POST", "/a?x=1", "json"), nil, []byte("body")), fingerprint(req("POST", "/a?x=1", "xml"), nil, []byte("body"))) {
		t.Error("a header not named changes the fingerprint")
	}
	if bytes.Equal(scope("ab", "c", "d"), scope("a", "bc", "d")) {
		t.Error("scopes of other fields collide: the fields are not length-prefixed")
	}
	if len(scope("", "", "")) != 32 || strings.Contains(string(scope("secret", "POST", "/")), "secret") {
		t.Error("a scope is not a 32-byte digest")
	}
}
