package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
)

// outboxRowsOut is list's JSON output, as a script reads it.
type outboxRowsOut struct {
	Rows []struct {
		Seq             int64             `json:"seq"`
		State           string            `json:"state"`
		MessageID       string            `json:"message_id"`
		MessageIDBase64 string            `json:"message_id_base64"`
		Destination     string            `json:"destination"`
		Key             string            `json:"key"`
		Error           string            `json:"error"`
		AvailableAt     string            `json:"available_at"`
		ParkedAt        string            `json:"parked_at"`
		PayloadSize     int64             `json:"payload_size"`
		Headers         map[string]string `json:"headers"`
	} `json:"rows"`
	NextAfter int64 `json:"next_after"`
}

// TestOutboxInspectCommand: inbox outbox stats, list, show, and unpark
// and discard -all with -dry-run, on each database, in order: each case
// sees what the one before did.
func TestOutboxInspectCommand(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := openDB(t, dialect)
			// Two rows parked, then two pending (written after the relay ran).
			e.writeOutbox(t, &outbox.Message{ID: "c-3", Destination: "payments-api", Key: "acct-1", Payload: []byte("bad")},
				&outbox.Message{ID: "d-4", Destination: "audit", Payload: []byte("bad: no stream")})
			r, err := outbox.NewRelay(ctx, e.driver, &outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler),
				Publish: func(_ context.Context, m *outbox.Message) error {
					if m.ID == "c-3" {
						return inbox.Permanent(errors.New("card declined\x1b]0;title\x07"))
					}
					return inbox.Permanent(errors.New("no such stream: audit"))
				}})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := r.RelayOnce(ctx); err != nil || res.Parked != 2 {
				t.Fatalf("RelayOnce: %+v, %v; want 2 parked", res, err)
			}
			binID, binPayload := "b-2\xff", []byte{0, 1, 0xfe, 'x'}
			e.writeOutbox(t, &outbox.Message{ID: "a-1", Destination: "payments-api", Key: "acct-1", Type: "charge",
				Payload: []byte("line 1\n\x1b[2Jline 2\u202e"), Headers: map[string]string{"traceparent": "00-1"}},
				&outbox.Message{ID: binID, Destination: "payments-api", Payload: binPayload})

			list := func(t *testing.T, args ...string) outboxRowsOut {
				t.Helper()
				code, stdout, stderr := runCmd(t, append(append([]string{"outbox", "list"}, e.flags...), append(args, "-json")...)...)
				var out outboxRowsOut
				if err := json.Unmarshal([]byte(stdout), &out); code != 0 || err != nil {
					t.Fatalf("list %q -json: exit %d, %v\nstdout: %s\nstderr: %s", args, code, err, stdout, stderr)
				}
				return out
			}
			ids := func(out outboxRowsOut) []string {
				var s []string
				for _, r := range out.Rows {
					s = append(s, r.MessageID+r.MessageIDBase64)
				}
				return s
			}
			all := list(t)
			if got, want := ids(all), []string{"c-3", "d-4", "a-1", base64.StdEncoding.EncodeToString([]byte(binID))}; !slices.Equal(got, want) {
				t.Fatalf("list: %q, want %q", got, want)
			}
			seq := func(i int) string { return fmt.Sprint(all.Rows[i].Seq) }
			if r := all.Rows[2]; r.State != "pending" || r.AvailableAt == "" || r.ParkedAt != "" || r.Key != "acct-1" ||
				r.PayloadSize != int64(len("line 1\n\x1b[2Jline 2\u202e")) || r.Headers["traceparent"] != "00-1" {
				t.Fatalf("list: a-1 %+v, want pending, due, its key, size and headers", r)
			}
			if r := all.Rows[0]; r.State != "parked" || r.ParkedAt == "" || !strings.HasPrefix(r.Error, "card declined") {
				t.Fatalf("list: c-3 %+v, want parked with its error", r)
			}
			for _, tc := range []struct {
				args []string
				want []string
			}{
				{[]string{"-pending"}, []string{"a-1", "Yi0y/w=="}},
				{[]string{"-parked"}, []string{"c-3", "d-4"}},
				{[]string{"-destination", "payments-api", "-parked"}, []string{"c-3"}},
				{[]string{"-destination", "payments-api", "-type", "charge"}, []string{"a-1"}},
				{[]string{"-error", "stream"}, []string{"d-4"}},
				{[]string{"-error", "Stream"}, nil},
				{[]string{"-message-id", "d-4"}, []string{"d-4"}},
				{[]string{"-message-id", "d-4", "-pending"}, nil},
				{[]string{"-message-id-base64", "Yi0y/w=="}, []string{"Yi0y/w=="}},
				{[]string{"-message-id", "x'; DROP TABLE outbox; --"}, nil},
				{[]string{"-since", "2000-01-01", "-until", "1h"}, nil},
				{[]string{"-since", "1h"}, []string{"c-3", "d-4", "a-1", "Yi0y/w=="}},
				{[]string{"-after", seq(1), "-limit", "1"}, []string{"a-1"}},
			} {
				if got := ids(list(t, tc.args...)); !slices.Equal(got, tc.want) {
					t.Errorf("list %q: %q, want %q", tc.args, got, tc.want)
				}
			}
			if page := list(t, "-limit", "2"); page.NextAfter != all.Rows[1].Seq {
				t.Errorf("list -limit 2: next_after %d, want %d", page.NextAfter, all.Rows[1].Seq)
			}

			for _, tc := range []struct {
				name   string
				args   []string
				code   int
				stdout []string
				not    []string // substrings stdout must lack
				stderr string
			}{
				{name: "stats", args: []string{"stats"},
					stdout: []string{"pending:          2, 2 due now\n", "oldest pending:   20", " ago\n", "parked:           2\n",
						"oldest parked:    20", "published, kept:  0\n"}},
				{name: "list text", args: []string{"list"},
					stdout: []string{"SEQ  STATE", "\n" + seq(0) + "  ", " parked ", `"card declined\x1b]0;title\a"`, ` "b-2\xff" `, " charge ", " pending "},
					not:    []string{"\x1b"}},
				{name: "list text page", args: []string{"list", "-limit", "1"}, stdout: []string{"c-3", "more may follow: -after " + seq(0)}},
				{name: "list none", args: []string{"list", "-destination", "nowhere"}, stdout: []string{"no outbox rows\n"}},
				{name: "list both states", args: []string{"list", "-pending", "-parked"}, code: 2, stderr: "give -pending or -parked, not both"},
				{name: "list bad base64", args: []string{"list", "-message-id-base64", "!!"}, code: 2, stderr: `-message-id-base64 "!!": not a message ID`},
				{name: "list invalid UTF-8", args: []string{"list", "-destination", "pay\xffments"}, code: 2, stderr: `-destination "pay\xffments": not valid UTF-8`},
				{name: "list bad time", args: []string{"list", "-since", "yesterday"}, code: 2, stderr: `-since: time "yesterday"`},
				{name: "list bad limit", args: []string{"list", "-limit", "0"}, code: 2, stderr: "-limit must be at least 1"},
				{name: "show text", args: []string{"show", seq(2)},
					stdout: []string{"outbox row:   " + seq(2) + "\n", "state:        pending, due at 20", "message id:   a-1\n",
						"header:       traceparent: 00-1\n", fmt.Sprintf("payload:      %d bytes, text, 2 control characters escaped", len("line 1\n\x1b[2Jline 2\u202e")),
						"| line 1\n| \\x1b[2Jline 2\\u202e\n"},
					not: []string{"\x1b", "\u202e"}},
				{name: "show binary", args: []string{"show", seq(3)},
					stdout: []string{`message id:   "b-2\xff"`, "payload:      4 bytes, base64:\nAAH+eA==\n"}},
				{name: "show by message ID", args: []string{"show", "-message-id", "c-3"},
					stdout: []string{"outbox row:   " + seq(0) + "\n", "state:        parked at 20", `last error:   "card declined\x1b]0;title\a"`,
						"key:          acct-1\n", "| bad\n"}, not: []string{"\x1b"}},
				{name: "show by binary message ID", args: []string{"show", "-message-id-base64", "Yi0y/w=="}, stdout: []string{"AAH+eA=="}},
				{name: "show missing", args: []string{"show", "999999"}, code: 4, stderr: "inbox: no outbox row 999999"},
				{name: "show missing ID", args: []string{"show", "-message-id", "x\x1b[2J"}, code: 4,
					stderr: `no unpublished outbox row has message ID "x\x1b[2J"`},
				{name: "show SEQ and ID", args: []string{"show", "-message-id", "a-1", seq(0)}, code: 2, stderr: "give a SEQ or -message-id, not both"},
				{name: "show nothing", args: []string{"show"}, code: 2, stderr: "give one SEQ, or -message-id"},
				{name: "show bad SEQ", args: []string{"show", "-1"}, code: 2},
				{name: "unpark -all -dry-run", args: []string{"unpark", "-all", "-error", "stream", "-dry-run"},
					stdout: []string{"\n" + seq(1) + " ", " d-4 ", "dry run: would unpark 1 outbox row; nothing changed\n"}, not: []string{"c-3"}},
				{name: "discard -dry-run of a pending row", args: []string{"discard", "-dry-run", seq(0), seq(2)}, code: 4,
					stdout: []string{"c-3", "dry run: would discard 1 outbox row; nothing changed\n"}, stderr: "no parked outbox rows [" + seq(2) + "]"},
				{name: "discard -all -dry-run -json", args: []string{"discard", "-all", "-dry-run", "-json"},
					stdout: []string{`"dry_run": true`, `"would_discard": [` + "\n    " + seq(0) + ",\n    " + seq(1) + "\n  ]"}},
				{name: "filters without -all", args: []string{"discard", "-error", "x", seq(0)}, code: 2, stderr: "the filters select parked rows only with -all"},
				{name: "SEQs and -all", args: []string{"discard", "-all", seq(0)}, code: 2, stderr: "give SEQs or -all, not both"},
				{name: "parked -dry-run", args: []string{"parked", "-dry-run"}, code: 2, stderr: "-all and -dry-run are unpark's and discard's"},
				{name: "parked with a filter", args: []string{"parked", "-error", "stream"}, stdout: []string{"d-4"}, not: []string{"c-3"}},
				{name: "unpark -all", args: []string{"unpark", "-all", "-error", "stream"}, stdout: []string{"unparked outbox row " + seq(1) + "\n"}},
				{name: "stats after", args: []string{"stats", "-json"}, stdout: []string{`"pending": 3,`, `"due": 3,`, `"parked": 1,`,
					`"oldest_pending_age_seconds": `, `"oldest_parked_age_seconds": `, `"published_kept": 0`}},
				{name: "discard -all", args: []string{"discard", "-all", "-json"}, stdout: []string{`"discarded": [` + "\n    " + seq(0) + "\n  ]"}},
				{name: "discard -all none", args: []string{"discard", "-all"}, stdout: []string{"discarded no outbox rows\n"}},
				{name: "stats none parked", args: []string{"stats"}, stdout: []string{"parked:           0\n", "oldest parked:    -\n"}},
			} {
				args := append(append([]string{"outbox", tc.args[0]}, e.flags...), tc.args[1:]...)
				code, stdout, stderr := runCmd(t, args...)
				if code != tc.code || !strings.Contains(stderr, tc.stderr) {
					t.Fatalf("%s: %q: exit %d, stderr %q; want %d and %q\nstdout: %s", tc.name, args, code, stderr, tc.code, tc.stderr, stdout)
				}
				for _, w := range tc.stdout {
					if !strings.Contains(stdout, w) {
						t.Errorf("%s: %q: stdout lacks %q:\n%s", tc.name, args, w, stdout)
					}
				}
				for _, w := range tc.not {
					if strings.Contains(stdout, w) {
						t.Errorf("%s: %q: stdout holds %q:\n%s", tc.name, args, w, stdout)
					}
				}
			}

			// show -json and -raw keep the payload byte for byte.
			code, stdout, _ := runCmd(t, append(append([]string{"outbox", "show"}, e.flags...), "-json", seq(3))...)
			var shown struct {
				PayloadBase64   string  `json:"payload_base64"`
				PayloadText     *string `json:"payload_text"`
				MessageIDBase64 string  `json:"message_id_base64"`
				State           string  `json:"state"`
			}
			if err := json.Unmarshal([]byte(stdout), &shown); code != 0 || err != nil {
				t.Fatalf("show -json: exit %d, %v: %s", code, err, stdout)
			}
			if got, _ := base64.StdEncoding.DecodeString(shown.PayloadBase64); string(got) != string(binPayload) || shown.PayloadText != nil ||
				shown.MessageIDBase64 != "Yi0y/w==" || shown.State != "pending" {
				t.Errorf("show -json: %+v, want the binary payload in base64 alone", shown)
			}
			code, stdout, _ = runCmd(t, append(append([]string{"outbox", "show"}, e.flags...), "-raw", seq(3))...)
			if code != 0 || stdout != string(binPayload) {
				t.Errorf("show -raw: exit %d, %q; want %q", code, stdout, binPayload)
			}
		})
	}
}

// TestOutboxInspectSecretsNotPrinted: the outbox's reads, on a database
// they cannot reach, tell the failure without the DSN's password.
func TestOutboxInspectSecretsNotPrinted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		secret string
	}{
		{[]string{"outbox", "stats", "-postgres", "postgres://postgres:S3cretPg@127.0.0.1:1/test"}, "S3cretPg"},
		{[]string{"outbox", "list", "-mysql", "root:S3cretMy@tcp(127.0.0.1:1)/test"}, "S3cretMy"},
		{[]string{"outbox", "show", "-postgres", "host=127.0.0.1 port=1 user=app password=S3cretKV", "1"}, "S3cretKV"},
		{[]string{"outbox", "unpark", "-mysql", "root:S3c/r@tMy@tcp(127.0.0.1:1/test", "-all", "-dry-run"}, "S3c/r@tMy"},
	} {
		code, stdout, stderr := runCmd(t, tc.args...)
		if code != exitFailure || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 1 and the failure told", tc.args, code, stderr)
		}
		if strings.Contains(stdout+stderr, tc.secret) {
			t.Errorf("%v: the output holds the password:\nstdout: %s\nstderr: %s", tc.args, stdout, stderr)
		}
	}
}

// TestOutboxInspectManuals: each new subcommand's -h prints its manual.
func TestOutboxInspectManuals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox", "list", "-h"}, "inbox outbox list"},
		{[]string{"outbox", "show", "-h"}, "escaped as in Go"},
		{[]string{"outbox", "stats", "-h"}, "by the database's clock"},
		{[]string{"outbox", "-h"}, "-dry-run prints the rows it would change"},
	} {
		code, stdout, _ := runCmd(t, tc.args...)
		if manual := strings.Join(strings.Fields(stdout), " "); code != 0 || !strings.Contains(manual, tc.want) {
			t.Errorf("%v: exit %d, want 0 and %q in:\n%s", tc.args, code, tc.want, stdout)
		}
	}
}
