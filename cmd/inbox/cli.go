package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The exit codes of the command, for scripts (usage text's EXIT STATUS).
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitProblem: check found a problem.
	exitProblem = 3
	// exitNotFound: a dead letter (or a parked outbox row) asked for does
	// not exist; the others given were done.
	exitNotFound = 4
	// exitPartial: partly done: some changes committed, which stdout
	// lists, and another failed for a reason other than not found
	// (discard -all, replay, outbox unpark and discard).
	exitPartial = 5
	// exitTempFail: nothing changed, and running the command again later
	// may succeed (a NATS duplicate window, an SQS FIFO queue's
	// deduplication interval; sysexits.h's EX_TEMPFAIL).
	exitTempFail = 75
)

// exitStatus is the EXIT STATUS section shared by the usage texts.
const exitStatus = `EXIT STATUS
  0   success, and -h
  1   failure (written to stderr)
  2   wrong command line
  3   check found a problem
  4   a dead letter or parked outbox row asked for does not exist; the
      others given were done, as stdout lists
  5   partly done: some changes were made, which stdout lists, and
      another failed for a reason other than not found
  75  nothing changed; try again later (a replay within a NATS
      stream's duplicate window)
`

// codedError carries an exit code other than 1.
type codedError struct {
	code int
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// withCode gives err the exit code code.
func withCode(code int, err error) error { return &codedError{code: code, err: err} }

// errProblem: check found a problem, which it wrote (exit 3, nothing more
// on stderr).
var errProblem = errors.New("problems found")

// storeSynopsis is the store flags in a synopsis.
const storeSynopsis = "(-postgres DSN | -mysql DSN | -sqlite FILE) [-schema S] [-prefix P]"

// filterSynopsis is the dead letter filters but -consumer in a synopsis.
const filterSynopsis = "[-type T] [-error TEXT] [-since TIME] [-until TIME]\n    [-message-id ID] [-group G]"

// command describes a subcommand for its -h: a man page in short.
type command struct {
	name, synopsis, description, examples string
}

// flagSet returns the subcommand's flag set, whose usage is the man page:
// NAME, SYNOPSIS, DESCRIPTION, FLAGS, EXAMPLES, EXIT STATUS.
func (c command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "NAME\n  inbox %s\n\nSYNOPSIS\n%s\nDESCRIPTION\n%s\nFLAGS\n", c.name, indent(c.synopsis), indent(c.description))
		fs.PrintDefaults()
		if c.examples != "" {
			fmt.Fprintf(w, "\nEXAMPLES\n%s", indent(c.examples))
		}
		fmt.Fprintf(w, "\n%s", exitStatus)
	}
	return fs
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// plural is n and noun, with an s unless n is 1: "1 attempt", "2 attempts".
func plural[N ~int | ~int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// text is b as a string for a person: as is when it is printable UTF-8,
// else Go-quoted ("a\x00b").
func text(b []byte) string {
	s := string(b)
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// escapeControls is s for a terminal, with the characters that would
// act on it or reorder what is read written as Go escapes (\x1b, \r,
// \u009b, \u202e): C0 controls but newline and tab, DEL, C1 controls,
// and the bidirectional formatting characters. n is how many it escaped.
func escapeControls(s string) (out string, n int) {
	var b strings.Builder
	for _, r := range s {
		if !isControl(r) {
			b.WriteRune(r)
			continue
		}
		n++
		q := strconv.QuoteRuneToASCII(r) // '\x1b', '\r', '\u202e'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String(), n
}

// isControl: r acts on a terminal (C0 but newline and tab, DEL, C1),
// breaks a line where a terminal may not (U+2028, U+2029) or reorders
// the text around it (bidirectional marks, embeddings, overrides and
// isolates).
func isControl(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x2028, r == 0x2029:
		return true
	case r == 0x61c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// isTerminal reports whether w is a terminal: a character device other
// than the null device (the standard library cannot ask the terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// jsonBytes is b for JSON: as a string when it is valid UTF-8, else in
// base64 (JSON strings cannot carry other bytes), one of the two empty.
func jsonBytes(b []byte) (s, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

// timeJSON is t in RFC 3339 with milliseconds, UTC; empty for zero.
func timeJSON(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// parseTime reads a time for -since and -until: RFC 3339 (2026-01-02T15:04:05Z),
// a date (2026-01-02, UTC), or a duration before now (24h, 90m).
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-01-02T15:04:05Z), a date (2026-01-02) or a duration before now (24h)", s)
}
