package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"net/http"
)

// writeField writes b to h after its length, so that no two lists of
// fields hash alike.
func writeField(h hash.Hash, b []byte) {
	h.Write(binary.AppendUvarint(nil, uint64(len(b))))
	h.Write(b)
}

// scope returns the digest of who sent a request and to what.
func scope(principal, method, route string) []byte {
	h := sha256.New()
	h.Write([]byte("inbox idempotency scope v1"))
	for _, f := range []string{principal, method, route} {
		writeField(h, []byte(f))
	}
	return h.Sum(nil)
}

// fingerprint returns the digest of a request: its method, path and query,
// the header fields named, and its body.
func fingerprint(r *http.Request, headers []string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("inbox idempotency request v1"))
	writeField(h, []byte(r.Method))
	writeField(h, []byte(r.URL.RequestURI()))
	for _, name := range headers {
		vs := r.Header.Values(name)
		writeField(h, binary.AppendUvarint(nil, uint64(len(vs))))
		for _, v := range vs {
			writeField(h, []byte(v))
		}
	}
	writeField(h, body)
	return h.Sum(nil)
}

// headerVersion begins an encoded header.
const headerVersion = 1

// encodeHeader encodes the fields of h named in names: a version byte,
// then for each name in order that h has, its name, its number of values
// and each value, every one a uvarint length and its bytes.
func encodeHeader(h http.Header, names []string) []byte {
	out := []byte{headerVersion}
	for _, name := range names {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		out = appendField(out, []byte(name))
		out = binary.AppendUvarint(out, uint64(len(vs)))
		for _, v := range vs {
			out = appendField(out, []byte(v))
		}
	}
	return out
}

func appendField(out, b []byte) []byte {
	return append(binary.AppendUvarint(out, uint64(len(b))), b...)
}

var errCorruptHeader = errors.New("idempotency: a stored header is corrupt")

// decodeHeader reads what encodeHeader wrote.
func decodeHeader(b []byte) (http.Header, error) {
	h := http.Header{}
	if len(b) == 0 || b[0] != headerVersion {
		return nil, errCorruptHeader
	}
	b = b[1:]
	for len(b) > 0 {
		name, rest, ok := readField(b)
		if !ok {
			return nil, errCorruptHeader
		}
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)) {
			return nil, errCorruptHeader
		}
		b = rest[k:]
		for range n {
			var v []byte
			if v, b, ok = readField(b); !ok {
				return nil, errCorruptHeader
			}
			h[string(name)] = append(h[string(name)], string(v))
		}
	}
	return h, nil
}

func readField(b []byte) (field, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}
