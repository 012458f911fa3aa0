package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
)

// hostile is what a producer may put in a message to take over the
// operator's terminal: cursor up, clear line, carriage return, a forged
// line, a window title (OSC), C1 controls (CSI as U+009B), DEL, and bidi
// controls that reorder what is read.
const hostile = "\x1b[1A\x1b[2K\rerror: (none) -- safe to discard\x1b]0;pwned\x07 \u009b2J \u202egnp.exe\u202c \u2066x\u2069 \u200f\x7f \u2028\u2029"

// controlChars are the characters that must not reach a terminal raw.
func controlChars(s string) []string {
	var found []string
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x61c, r == 0x200e, r == 0x200f, r == 0x2028, r == 0x2029,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			found = append(found, fmt.Sprintf("%U", r))
		}
	}
	return found
}

// TestHostileDeadLetter: no output of the command that a person reads
// (show, list, stats, replay's) writes a producer's control characters
// raw; show -raw writes the payload byte for byte, but only to a file or
// a pipe.
func TestHostileDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := openDB(t, "sqlite")
	consumer := "c" + hostile
	ib := e.inbox(t, inbox.Config{Consumer: consumer})
	// A line of its own that reads like one of show's.
	payload := "payload line 1\n\tindented" + hostile + "\nerror: (none) -- safe to discard\nend"
	fail := func(context.Context, *sql.Tx, *inbox.Message) error {
		return inbox.Permanent(errors.New("boom" + hostile))
	}
	msg := inbox.Message{ID: "id" + hostile, Type: "t" + hostile, Payload: []byte(payload), Headers: map[string]string{"k" + hostile: "v" + hostile}}
	if out, err := ib.Process(ctx, msg, fail); out.Status != inbox.DeadLettered {
		t.Fatalf("process: %v, %v; want DeadLettered", out.Status, err)
	}
	if out, err := ib.Process(ctx, inbox.Message{ID: "bin", Payload: []byte("\xff\x1b[2K")}, fail); out.Status != inbox.DeadLettered {
		t.Fatalf("process: %v, %v; want DeadLettered", out.Status, err)
	}
	var page struct {
		DeadLetters []deadLetterJSON `json:"dead_letters"`
	}
	cmdJSON(t, &page, 0, append([]string{"dead-letters", "list", "-json"}, e.flags...)...)
	if len(page.DeadLetters) != 2 {
		t.Fatalf("list: %d dead letters, want 2", len(page.DeadLetters))
	}
	id, bin := fmt.Sprint(page.DeadLetters[0].ID), fmt.Sprint(page.DeadLetters[1].ID)
	with := func(args ...string) []string { return append(args, e.flags...) }

	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stdout
	}{
		{"show", with("dead-letters", "show", id), 0, []string{"| payload line 1\n| \tindented\\x1b[1A\\x1b[2K\\rerror: (none)", `\u202egnp.exe`,
			"\n| error: (none) -- safe to discard\n| end\n", "text, 14 control characters escaped"}},
		{"show binary", with("dead-letters", "show", bin), 0, []string{"base64:\n/xtbMks=\n"}},
		{"list", with("dead-letters", "list"), 0, nil},
		{"stats", with("stats"), 0, nil},
		{"replay, refused", with("dead-letters", "replay", "-nats", testenv.NATSURL(), "-subject", "s", "-consumer", "other", id), exitFailure, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, tc.args...)
			if code != tc.code {
				t.Fatalf("%v: exit %d, want %d\nstdout: %q\nstderr: %q", tc.args, code, tc.code, stdout, stderr)
			}
			if found := controlChars(stdout + stderr); len(found) > 0 {
				t.Errorf("%v: control characters %v written raw:\nstdout: %q\nstderr: %q", tc.args, found, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("%v: stdout lacks %q:\n%s", tc.args, w, stdout)
				}
			}
			for _, line := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(line, "error: (none)") {
					t.Errorf("%v: the payload wrote a line that reads as show's own: %q", tc.args, line)
				}
			}
		})
	}

	// -raw: the payload alone, as it is, to a pipe or a file.
	for _, tc := range []struct{ id, want string }{{id, payload}, {bin, "\xff\x1b[2K"}} {
		code, stdout, stderr := runCmd(t, with("dead-letters", "show", "-raw", tc.id)...)
		if code != 0 || stdout != tc.want {
			t.Errorf("show -raw %s: exit %d, stdout %q, want 0 and the payload %q byte for byte (stderr %q)", tc.id, code, stdout, tc.want, stderr)
		}
	}
	if code, stdout, _ := runCmd(t, with("dead-letters", "show", "-raw", "-json", id)...); code != exitUsage || stdout != "" {
		t.Errorf("show -raw -json: exit %d, stdout %q; want 2 and nothing", code, stdout)
	}
	// A terminal (a pseudo-terminal's master side) refuses -raw.
	tty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to test -raw on a terminal: %v", err)
	}
	defer tty.Close()
	var errOut bytes.Buffer
	if code := exitCode(ctx, with("dead-letters", "show", "-raw", id), tty, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "terminal") {
		t.Errorf("show -raw to a terminal: exit %d, stderr %q; want 2 and why", code, errOut.String())
	}
}
