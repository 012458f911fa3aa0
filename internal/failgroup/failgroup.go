// Package failgroup names the group of a failure. A group is the error's
// text with the parts that change per message replaced. "charge
// poison-00000: card declined" and "charge poison-00001: card declined"
// are one group: "charge poison-<n>: card declined".
//
// The stores write the group next to each dead letter and failed attempt.
// The command and the console then count per group from an index. Changing
// what [Of] returns splits old rows' groups from new ones. Do it with a
// migration that rewrites them.
package failgroup

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxLen is the most bytes a group has. A longer one is cut at a rune's
// boundary, so that it fits an indexed column of every database.
const MaxLen = 200

// The replacements, in order. A pattern that a later one would split
// comes first.
var replacements = []struct {
	re   *regexp.Regexp
	with string
}{
	// UUIDs, in any case.
	{regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`), "<uuid>"},
	// Hex: 0x-prefixed, or a run of 12 or more hex digits (hashes, object IDs).
	{regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b`), "<hex>"},
}

// word is a candidate ID: see isID.
var word = regexp.MustCompile(`\b[A-Za-z0-9_]{6,}\b`)

// number is a run of digits that starts a word, with its fraction. It
// matches counts, amounts, ports, and the "30" of "30s". The "8" of utf8
// does not start a word.
var number = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?`)

// isID reports whether a word is an ID. An ID mixes letters with at least
// three digits, as ord_8f3kq2 does. utf8 and base64 are not IDs.
func isID(w string) bool {
	digits, letters := 0, 0
	for _, c := range w {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c != '_':
			letters++
		}
	}
	return digits >= 3 && letters > 0
}

func id(w string) string {
	if isID(w) {
		return "<id>"
	}
	return w
}

// space is a run of white space, which Of makes one space.
var space = regexp.MustCompile(`\s+`)

// Of returns the group of an error text. UUIDs, hex, IDs and numbers are
// replaced. White space is collapsed, and invalid UTF-8 replaced. The group
// has at most [MaxLen] bytes. The empty text is the empty group; white
// space only is [Blank].
func Of(text string) string {
	s := strings.ToValidUTF8(text, "\uFFFD")
	for _, r := range replacements {
		s = r.re.ReplaceAllString(s, r.with)
	}
	s = word.ReplaceAllStringFunc(s, id)
	s = number.ReplaceAllString(s, "<n>")
	s = strings.TrimSpace(space.ReplaceAllString(s, " "))
	if s == "" && text != "" {
		return Blank
	}
	return cut(s, MaxLen)
}

// Blank is the group of an error text of white space only. A group is
// empty only for an empty text. So the stores can tell a row whose group
// is not filled in yet.
const Blank = "(blank)"

// cut returns s shortened to at most n bytes at a rune's boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
