package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
)

// inbox outbox parked, unpark and discard, on each database: discard
// lets the key's next row go out, unpark publishes a row again, a SEQ
// that is not parked exits 4 after the others were done.
func TestOutboxCommand(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := openDB(t, dialect)
			e.writeOutbox(t, &outbox.Message{ID: "p-1", Destination: "d", Key: "k", Payload: []byte("bad")},
				&outbox.Message{ID: "p-2", Destination: "d", Key: "k"},
				&outbox.Message{ID: "p-3\x1b[2J", Destination: "d", Payload: []byte("bad"),
					Headers: map[string]string{"k\xfe": "b", "k\xff": "a", "ok": "c"}})
			var mu sync.Mutex
			var published []string
			refuse := true
			r, err := outbox.NewRelay(ctx, e.driver, &outbox.RelayConfig{Ordered: true, Logger: slog.New(slog.DiscardHandler),
				Publish: func(_ context.Context, m *outbox.Message) error {
					mu.Lock()
					defer mu.Unlock()
					if refuse && string(m.Payload) == "bad" {
						return inbox.Permanent(errors.New("refused\x1b]0;title\x07"))
					}
					published = append(published, m.ID)
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			drain := func() []string {
				t.Helper()
				for {
					res, err := r.RelayOnce(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if res.Claimed == 0 {
						mu.Lock()
						defer mu.Unlock()
						return slices.Clone(published)
					}
				}
			}
			if got := drain(); len(got) != 0 {
				t.Fatalf("published %q, want nothing: p-1 and p-3 parked, p-2 held back by p-1", got)
			}
			parked, err := r.Parked(ctx, 0, 10)
			if err != nil || len(parked) != 2 {
				t.Fatalf("Parked: %d, %v; want 2", len(parked), err)
			}
			one, three := fmt.Sprint(parked[0].Seq), fmt.Sprint(parked[1].Seq)
			store := e.flags
			for _, tc := range []struct {
				name   string
				args   []string
				code   int
				stdout []string
				stderr string
				then   func(t *testing.T, stdout string)
			}{
				{name: "parked", args: []string{"parked"}, stdout: []string{"SEQ", "\n" + one + " ", " p-1 ", `"p-3\x1b[2J"`, `"refused\x1b]0;title\a"`}},
				{name: "parked page", args: []string{"parked", "-limit", "1"}, stdout: []string{"p-1", "more may follow: -after " + one}},
				{name: "action after flags", args: []string{"-json", "parked"}, code: 2, stderr: "give parked, unpark or discard first"},
				{name: "parked json", args: []string{"parked", "-json"}, then: func(t *testing.T, stdout string) {
					var out struct {
						Parked []struct {
							Seq           int64             `json:"seq"`
							MessageID     string            `json:"message_id"`
							Key           string            `json:"key"`
							Error         string            `json:"error"`
							PayloadBase64 string            `json:"payload_base64"`
							Headers       map[string]string `json:"headers"`
							HeadersBase64 map[string]string `json:"headers_base64"`
						} `json:"parked"`
						NextAfter int64 `json:"next_after"`
					}
					if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Parked) != 2 || out.NextAfter != 0 {
						t.Fatalf("parked -json: %v, %s", err, stdout)
					}
					if p := out.Parked[0]; p.Seq != parked[0].Seq || p.MessageID != "p-1" || p.Key != "k" || p.PayloadBase64 != "YmFk" ||
						!strings.HasPrefix(p.Error, "refused") {
						t.Fatalf("parked -json: first %+v, want p-1", p)
					}
					// Header names that are not valid UTF-8 keep their bytes.
					want := map[string]string{"a/4=": "Yg==", "a/8=": "YQ=="}
					if p := out.Parked[1]; !maps.Equal(p.Headers, map[string]string{"ok": "c"}) || !maps.Equal(p.HeadersBase64, want) {
						t.Fatalf("parked -json: headers %q and headers_base64 %q, want ok: c and %q", p.Headers, p.HeadersBase64, want)
					}
				}},
				{name: "discard", args: []string{"discard", one}, stdout: []string{"discarded outbox row " + one + "\n"},
					then: func(t *testing.T, _ string) {
						if got := drain(); !slices.Equal(got, []string{"p-2"}) {
							t.Fatalf("after discard published %q, want p-2: its key no longer held back", got)
						}
					}},
				{name: "discard again", args: []string{"discard", one}, code: 4, stdout: []string{"discarded no outbox rows"},
					stderr: "inbox: no parked outbox rows [" + one + "]"},
				{name: "unpark", args: []string{"unpark", "-json", three, one}, code: 4,
					stdout: []string{`"unparked": [` + "\n    " + three + "\n  ]", `"not_found": [` + "\n    " + one}, then: func(t *testing.T, _ string) {
						mu.Lock()
						refuse = false
						mu.Unlock()
						if got := drain(); !slices.Equal(got, []string{"p-2", "p-3\x1b[2J"}) {
							t.Fatalf("after unpark published %q, want p-3 again", got)
						}
					}},
				{name: "parked none", args: []string{"parked"}, stdout: []string{"no parked outbox rows\n"}},
				{name: "no action", args: []string{}, code: 2, stderr: "give parked, unpark or discard first"},
				{name: "unknown action", args: []string{"drop", one}, code: 2, stderr: "give parked, unpark or discard first"},
				{name: "discard without SEQ", args: []string{"discard"}, code: 2, stderr: "give the SEQ of each parked row to discard"},
				{name: "bad SEQ", args: []string{"discard", "x1"}, code: 2, stderr: `"x1" is not a SEQ`},
				{name: "parked with SEQ", args: []string{"parked", one}, code: 2, stderr: "parked takes no SEQ"},
				{name: "unpark with -limit", args: []string{"unpark", "-limit", "3", one}, code: 2, stderr: "-after and -limit are parked's"},
			} {
				// In order: each case sees what the one before did.
				args := append([]string{"outbox"}, store...)
				if len(tc.args) > 0 {
					args = append(append([]string{"outbox", tc.args[0]}, store...), tc.args[1:]...)
				}
				code, stdout, stderr := runCmd(t, args...)
				if code != tc.code || !strings.Contains(stderr, tc.stderr) {
					t.Fatalf("%s: %q: exit %d, stderr %q; want %d and %q\nstdout: %s", tc.name, args, code, stderr, tc.code, tc.stderr, stdout)
				}
				for _, w := range tc.stdout {
					if !strings.Contains(stdout, w) {
						t.Fatalf("%s: %q: stdout lacks %q:\n%s", tc.name, args, w, stdout)
					}
				}
				if tc.then != nil {
					tc.then(t, stdout)
				}
			}
		})
	}
}

// writeOutbox writes msgs to e's outbox in a transaction of its own.
func (e *dbEnv) writeOutbox(t *testing.T, msgs ...*outbox.Message) {
	t.Helper()
	ctx := context.Background()
	ob, err := outbox.New(ctx, e.driver, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := ob.Write(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestOutboxPartly: outbox unpark and discard of several SEQs, one of
// which the database refuses (a trigger) after another was done, exit 5
// (partly done) and say which were done, -json with the error, and
// which SEQs were not tried.
func TestOutboxPartly(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			e := openDB(t, dialect)
			e.writeOutbox(t, &outbox.Message{ID: "o-1", Destination: "d"}, &outbox.Message{ID: "o-2", Destination: "d"},
				&outbox.Message{ID: "o-3", Destination: "d"}, &outbox.Message{ID: "o-4", Destination: "d"})
			table := e.table("outbox")
			now := "CURRENT_TIMESTAMP"
			if dialect == "sqlite" {
				now = "1" // milliseconds since the epoch
			}
			if _, err := e.db.Exec("UPDATE " + table + " SET parked_at = " + now); err != nil {
				t.Fatal(err)
			}
			var seq []int64
			rows, err := e.db.Query("SELECT seq FROM " + table + " ORDER BY seq")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var s int64
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				seq = append(seq, s)
			}
			if rows.Close(); len(seq) != 4 {
				t.Fatalf("%d outbox rows, want 4", len(seq))
			}
			refuseChanges(t, e, table, seq[1])
			str := func(s int64) string { return fmt.Sprint(s) }

			for _, tc := range []struct {
				name   string
				args   []string
				stdout []string
				stderr []string
			}{
				{name: "unpark", args: []string{"unpark", str(seq[0]), str(seq[1]), str(seq[2])},
					stdout: []string{"unparked outbox row " + str(seq[0]) + "\n"},
					stderr: []string{"partly done: unparked 1 outbox row", "refused by the test", fmt.Sprintf("not tried: [%d]", seq[2])}},
				{name: "discard -json", args: []string{"discard", "-json", str(seq[3]), str(seq[0]), str(seq[1])},
					stdout: []string{`"discarded": [` + "\n    " + str(seq[3]) + "\n  ]", `"not_found": [` + "\n    " + str(seq[0]) + "\n  ]",
						`"error": "partly done: discarded 1 outbox row`, "refused by the test"},
					stderr: []string{"partly done: discarded 1 outbox row", fmt.Sprintf("no parked outbox rows [%d]", seq[0])}},
			} {
				args := append(append([]string{"outbox", tc.args[0]}, e.flags...), tc.args[1:]...)
				code, stdout, stderr := runCmd(t, args...)
				if code != exitPartial {
					t.Fatalf("%s: %q: exit %d, want %d\nstdout: %s\nstderr: %s", tc.name, args, code, exitPartial, stdout, stderr)
				}
				for _, w := range tc.stdout {
					if !strings.Contains(stdout, w) {
						t.Errorf("%s: stdout lacks %q:\n%s", tc.name, w, stdout)
					}
				}
				for _, w := range tc.stderr {
					if !strings.Contains(stderr, w) {
						t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, stderr)
					}
				}
			}
			var left int
			if err := e.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE parked_at IS NOT NULL").Scan(&left); err != nil || left != 2 {
				t.Fatalf("%d parked rows left (%v), want 2: the refused one and the one not tried", left, err)
			}
		})
	}
}

// refuseChanges makes the database refuse to update or delete outbox row
// seq of table, with the error "refused by the test".
func refuseChanges(t *testing.T, e *dbEnv, table string, seq int64) {
	t.Helper()
	var stmts []string
	switch e.flags[0] {
	case "-postgres":
		fn := e.flags[3] + ".refuse"
		stmts = []string{
			"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$",
			fmt.Sprintf("CREATE TRIGGER refuse BEFORE UPDATE OR DELETE ON %s FOR EACH ROW WHEN (OLD.seq = %d) EXECUTE FUNCTION %s()", table, seq, fn),
		}
	case "-mysql":
		for _, op := range []string{"UPDATE", "DELETE"} {
			stmts = append(stmts, fmt.Sprintf("CREATE TRIGGER refuse_%s BEFORE %s ON %s FOR EACH ROW BEGIN IF OLD.seq = %d THEN "+
				"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END", strings.ToLower(op), op, table, seq))
		}
	default:
		for _, op := range []string{"UPDATE", "DELETE"} {
			stmts = append(stmts, fmt.Sprintf("CREATE TRIGGER refuse_%s BEFORE %s ON %s WHEN OLD.seq = %d BEGIN "+
				"SELECT RAISE(ABORT, 'refused by the test'); END", strings.ToLower(op), op, table, seq))
		}
	}
	for _, s := range stmts {
		if _, err := e.db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
