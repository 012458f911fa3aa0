// Package storable makes text fit a database column, the same way for the
// inbox and the outbox's relay.
package storable

import (
	"strings"
	"unicode/utf8"
)

// Text makes s valid UTF-8 without NUL bytes and at most n bytes.
//
// Invalid bytes become U+FFFD, and each NUL becomes nul. A cut falls on a
// rune boundary.
func Text(s string, n int, nul string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") && len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", nul)
	if len(s) > n {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
