// Package headers stores message headers losslessly in one column, for
// dead letters and outbox rows: a JSON object whose values are base64
// (JSON's encoding of []byte), so that binary values survive.
package headers

import (
	"encoding/json"
	"fmt"
)

// Encode encodes h; nil for no headers.
func Encode(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
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

// Decode decodes what Encode wrote; nil for none.
func Decode(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var m map[string][]byte
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding headers: %w", err)
	}
	h := make(map[string]string, len(m))
	for k, v := range m {
		h[k] = string(v)
	}
	return h, nil
}

// LostMarker is stored in place of the headers of a dead letter kept
// without its payload and headers (the database refused them); Encode
// never writes a JSON array.
var LostMarker = []byte(`["inbox: payload and headers not kept"]`)
