// Package logid formats a message ID as a log attribute's value, the same
// way for the inbox and the outbox's relay.
package logid

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String is the ID itself when it is valid UTF-8 and every rune is
// printable (slog's handlers quote it as they need, a space included), so
// that a search for id=pay-13 finds it; Go-quoted otherwise, so that a
// hostile ID cannot forge log lines with a newline nor carry invalid UTF-8
// or a NUL into a JSON handler. An ID that begins with a double quote is
// quoted too, so that it cannot read as another ID's quoted form.
func String(id string) string {
	if !utf8.ValidString(id) || strings.HasPrefix(id, `"`) {
		return strconv.Quote(id)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) { // the ASCII space is printable, other spaces are not
			return strconv.Quote(id)
		}
	}
	return id
}
