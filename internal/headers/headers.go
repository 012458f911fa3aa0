// Package headers stores message headers losslessly in one column, for
// dead letters and outbox rows.
//
// Two formats exist. The first, which every release has written, is a
// JSON object whose values are base64 (JSON's encoding of []byte). It
// loses names that are not valid UTF-8: JSON replaces their bad bytes by
// U+FFFD, which can merge two names into one. Encode still writes it
// whenever every name is valid UTF-8, so that the processes of an earlier
// release still read the rows during a rolling upgrade. Otherwise it
// writes the second format: the byte formatV2, then for each header in
// ascending order of name, its name and its value, each as a uvarint
// length and its bytes. Decode reads both.
//
// An earlier release cannot read the second format. During a rolling
// upgrade, its relay parks an outbox row written so (Unpark publishes it
// once every relay runs this release). It shows such a dead letter
// without its headers, and cannot replay it.
package headers

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// formatV2 begins the second format. It is neither '{', which begins the
// first, nor '[', which begins LostMarker.
const formatV2 = 0x02

// ErrCorrupt is wrapped by Decode's error for bytes that neither format
// can read.
var ErrCorrupt = errors.New("headers: corrupt")

// Encode encodes h; nil for no headers.
func Encode(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(h))
	if !slices.ContainsFunc(names, func(k string) bool { return !utf8.ValidString(k) }) {
		return encodeJSON(h)
	}
	b := []byte{formatV2}
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

// encodeJSON writes the first format, lossless for names of valid UTF-8.
func encodeJSON(h map[string]string) []byte {
	m := make(map[string][]byte, len(h))
	for k, v := range h {
		m[k] = []byte(v)
	}
	b, err := json.Marshal(m)
	if err != nil { // cannot happen for map[string][]byte
		return nil
	}
	return b
}

// Decode decodes what Encode wrote, in either format; nil for none.
func Decode(b []byte) (map[string]string, error) {
	switch {
	case len(b) == 0:
		return nil, nil
	case b[0] == formatV2:
		return decodeV2(b[1:])
	case b[0] != '{':
		return nil, fmt.Errorf("%w: %d bytes beginning with %#x, neither format's", ErrCorrupt, len(b), b[0])
	}
	var m map[string][]byte
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: decoding headers: %w", ErrCorrupt, err)
	}
	h := make(map[string]string, len(m))
	for k, v := range m {
		h[k] = string(v)
	}
	return h, nil
}

func decodeV2(b []byte) (map[string]string, error) {
	h := map[string]string{}
	var prev string
	for len(b) > 0 {
		k, rest, err := field(b)
		if err != nil {
			return nil, fmt.Errorf("%w: header %d's name: %w", ErrCorrupt, len(h)+1, err)
		}
		v, rest, err := field(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: header %q's value: %w", ErrCorrupt, k, err)
		}
		if len(h) > 0 && k <= prev { // Encode writes names in ascending order, once each
			return nil, fmt.Errorf("%w: header %q after %q", ErrCorrupt, k, prev)
		}
		h[k], prev, b = v, k, rest
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("%w: no headers after the format's byte", ErrCorrupt)
	}
	return h, nil
}

// field reads a uvarint length and that many bytes.
func field(b []byte) (string, []byte, error) {
	n, size := binary.Uvarint(b)
	switch {
	case size <= 0:
		return "", nil, errors.New("bad length")
	case n > uint64(len(b)-size):
		return "", nil, fmt.Errorf("length %d past the end", n)
	}
	b = b[size:]
	return string(b[:n]), b[n:], nil
}

// LostMarker is stored in place of the headers of a dead letter kept
// without its payload and headers (the database refused them). Encode
// never writes a JSON array, nor anything that begins with '['.
var LostMarker = []byte(`["inbox: payload and headers not kept"]`)
