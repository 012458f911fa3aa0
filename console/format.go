package console

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// show is b as a short value for a person: as is when it is printable
// UTF-8, else Go-quoted ("a\x00b", "\u202e"). A value that starts with a
// quote is quoted too, so that [parseShown] reads back every shown value.
func show(b []byte) string {
	s := string(b)
	if strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// parseShown reads a value typed in a filter: Go-quoted as [show] writes
// it, else as is.
func parseShown(s string) []byte {
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			return []byte(u)
		}
	}
	return []byte(s)
}

// visible is s for a page with every byte in sight: invalid UTF-8 as
// \xff, and what is not printable as Go escapes (\x00, \x1b, \u202e),
// newlines and tabs but kept. n is how many it escaped.
func visible(s string) (out string, n int) {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
			n++
		case r == '\n' || r == '\t' || unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
			n++
		}
		i += size
	}
	return b.String(), n
}

// vis is visible without the count, for the templates.
func vis(s string) string {
	out, _ := visible(s)
	return out
}

// shorten cuts s, already visible, to at most n runes and one line,
// with an ellipsis when it cut.
func shorten(s string, n int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// duration is d for a person: "7 days" rather than "168h0m0s".
func duration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d %s", d/(24*time.Hour), plural(d/(24*time.Hour), "day"))
	}
	return strings.Replace(strings.Replace(d.String(), "m0s", "m", 1), "h0m", "h", 1)
}

// timeLayout shows times in UTC, to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format(timeLayout)
}

// age is how long ago t was, rounded for a person: 42s, 5m12s, 3h4m,
// 2d5h.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%dh", s/86400, s%86400/3600)
}

// bytesSize is n bytes for a person: 812 B, 12.3 KiB, 1.0 MiB.
func bytesSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
}

// The bounds of a payload on a page: the whole one is a download.
const (
	// maxTextShown bounds a text or JSON payload's bytes on the page.
	maxTextShown = 64 << 10
	// maxHexShown bounds a binary payload's bytes in the hex dump, which
	// takes about 4.3 characters a byte.
	maxHexShown = 8 << 10
)

// payloadView is a payload as a page shows it.
type payloadView struct {
	// Kind is "JSON", "text" or "binary" (a hex dump), "empty" for none.
	Kind string
	Body string
	// Shown and Size count the bytes shown and the payload's.
	Shown, Size int64
	// Escaped counts the characters written as escapes.
	Escaped int
}

// Truncated reports whether the page shows a part of the payload only.
func (p payloadView) Truncated() bool { return p.Shown < p.Size }

// viewPayload renders b: pretty-printed JSON, text with escapes, or a
// hex dump when it is mostly not text, a bounded prefix of each.
func viewPayload(b []byte) payloadView {
	v := payloadView{Size: int64(len(b))}
	if len(b) == 0 {
		v.Kind = "empty"
		return v
	}
	if len(b) <= maxTextShown && json.Valid(b) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil && out.Len() <= 2*maxTextShown {
			v.Kind, v.Shown = "JSON", int64(len(b))
			v.Body, v.Escaped = visible(out.String())
			return v
		}
	}
	prefix := b[:min(len(b), maxTextShown)]
	if isText(prefix) {
		// Cut on a rune's boundary: the last rune may be split.
		for i := 0; i < utf8.UTFMax && len(prefix) < len(b) && !utf8.Valid(prefix); i++ {
			prefix = prefix[:len(prefix)-1]
		}
		v.Kind, v.Shown = "text", int64(len(prefix))
		v.Body, v.Escaped = visible(string(prefix))
		return v
	}
	prefix = b[:min(len(b), maxHexShown)]
	v.Kind, v.Shown, v.Body = "binary", int64(len(prefix)), hex.Dump(prefix)
	return v
}

// isText reports whether b reads as text: valid UTF-8, but for a rune
// split at its end, with few control characters. Other characters that
// need an escape, such as bidi overrides, are shown escaped in text.
func isText(b []byte) bool {
	bad := 0
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			if len(b)-i < utf8.UTFMax && !utf8.FullRune(b[i:]) {
				break
			}
			return false
		}
		if r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r >= 0x7f && r <= 0x9f {
			bad++
		}
		i += size
	}
	return bad*100 <= len(b) // at most 1 %
}
