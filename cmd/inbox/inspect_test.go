package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// dbEnv is one database with migrated inbox tables: the command's store
// flags, and a driver on the same tables for the test's own writes.
type dbEnv struct {
	flags  []string
	driver *sqlstore.Driver
	db     *sql.DB
	// ph is the dialect's first placeholder ($1 or ?).
	ph string
}

func openDB(t *testing.T, dialect string) *dbEnv {
	t.Helper()
	var e dbEnv
	var d sqlstore.Dialect
	var tables store.Tables
	var err error
	switch dialect {
	case "postgres":
		pgenv.Pool(t, 1) // skips without PostgreSQL
		schema := testenv.Name("cmdtest_")
		tables.Schema = schema
		e.db, err = sql.Open("pgx", pgenv.DSN())
		e.flags, d, e.ph = []string{"-postgres", pgenv.DSN(), "-schema", schema}, postgres.Dialect, "$1"
		t.Cleanup(func() { _, _ = e.db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	case "mysql":
		dsn := mysqlenv.Database(t)
		e.db, err = mysql.Open(dsn, nil)
		e.flags, d, e.ph = []string{"-mysql", dsn}, mysql.Dialect, "?"
	default:
		path := filepath.Join(t.TempDir(), "cmd.db")
		e.db, err = sqlite.Open(path, nil)
		e.flags, d, e.ph = []string{"-sqlite", path}, sqlite.Dialect, "?"
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.db.Close() })
	if e.driver, err = sqlstore.New(e.db, &sqlstore.Config{Dialect: d, Tables: tables}); err != nil {
		t.Fatal(err)
	}
	if err := e.driver.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ledger := "ledger"
	if tables.Schema != "" {
		ledger = tables.Schema + ".ledger"
	}
	if _, err := e.db.Exec("CREATE TABLE " + ledger + " (id VARCHAR(200) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &e
}

// ledger is the table of the handlers' effects.
func (e *dbEnv) ledger() string {
	if e.flags[0] == "-postgres" {
		return e.flags[3] + ".ledger"
	}
	return "ledger"
}

// effect is a handler that records msg's ID in the ledger.
func (e *dbEnv) effect(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+e.ledger()+" (id) VALUES ("+e.ph+")", msg.ID)
	return err
}

// effects counts the effects of id.
func (e *dbEnv) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT count(*) FROM "+e.ledger()+" WHERE id = "+e.ph, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *dbEnv) inbox(t *testing.T, cfg inbox.Config) *inbox.Inbox[*sql.Tx] {
	t.Helper()
	ib, err := inbox.New(context.Background(), e.driver, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// cmdJSON runs the command with args and decodes its stdout into v,
// failing unless it exits with code.
func cmdJSON(t *testing.T, v any, code int, args ...string) {
	t.Helper()
	got, stdout, stderr := runCmd(t, args...)
	if got != code {
		t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, got, code, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("%v: stdout is not the JSON expected (%v):\n%s", args, err, stdout)
	}
}

// TestInspectCommands runs stats, dead-letters list, show and discard,
// and check against each database, on two consumers' dead letters.
func TestInspectCommands(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := openDB(t, dialect)
			a, b := e.inbox(t, inbox.Config{Consumer: "a"}), e.inbox(t, inbox.Config{Consumer: "b"})
			permanent := func(text string) inbox.Handler[*sql.Tx] {
				return func(context.Context, *sql.Tx, *inbox.Message) error { return inbox.Permanent(errors.New(text)) }
			}
			for _, s := range []struct {
				ib   *inbox.Inbox[*sql.Tx]
				m    inbox.Message
				h    inbox.Handler[*sql.Tx]
				want inbox.Status
			}{
				{a, inbox.Message{ID: "ok-1", Type: "t.one", Payload: []byte("fine")}, e.effect, inbox.Processed},
				{a, inbox.Message{ID: "dead-1", Type: "t.one", Payload: []byte("payload of dead-1"), Headers: map[string]string{"k": "v"}}, permanent("boom: 1"), inbox.DeadLettered},
				{a, inbox.Message{ID: "dead-2", Type: "t.two", Payload: []byte("payload of dead-2")}, permanent("boom: 2"), inbox.DeadLettered},
				{b, inbox.Message{ID: "dead-b", Type: "t.one", Payload: []byte("\xff\x00")}, permanent("boom: b"), inbox.DeadLettered},
			} {
				if out, err := s.ib.Process(ctx, s.m, s.h); out.Status != s.want {
					t.Fatalf("%s: %v, %v; want %v", s.m.ID, out.Status, err, s.want)
				}
			}
			with := func(args ...string) []string { return append(args, e.flags...) }

			var stats []statsJSON
			cmdJSON(t, &stats, 0, with("stats", "-json", "-top", "1", "-error-chars", "4")...)
			if len(stats) != 2 || stats[0].Consumer != "a" || stats[0].InboxRows != 3 || stats[0].DeadRows != 2 || stats[0].DeadLetters != 2 ||
				stats[0].FailedMessages != 2 || !slices.Equal(stats[0].TopErrors, []errorCountJSON{{"boom", 2}}) ||
				stats[0].OldestClaim == "" || stats[1].Consumer != "b" || stats[1].DeadLetters != 1 {
				t.Fatalf("stats: %+v; want a (3 rows, 2 dead, 2 dead letters, 2 failed, top error boom×2) and b (1 dead letter)", stats)
			}
			cmdJSON(t, &stats, 0, with("stats", "-json", "-consumer", "b")...)
			if len(stats) != 1 || stats[0].Consumer != "b" {
				t.Fatalf("stats -consumer b: %+v, want b alone", stats)
			}

			type page struct {
				DeadLetters []deadLetterJSON `json:"dead_letters"`
				NextAfter   int64            `json:"next_after"`
			}
			var all page
			cmdJSON(t, &all, 0, with("dead-letters", "list", "-json")...)
			if len(all.DeadLetters) != 3 || all.NextAfter != 0 {
				t.Fatalf("list: %+v, want 3 dead letters and no next page", all)
			}
			idA1, idA2, idB := all.DeadLetters[0].ID, all.DeadLetters[1].ID, all.DeadLetters[2].ID
			if d := all.DeadLetters[0]; d.MessageID != "dead-1" || d.Consumer != "a" || d.Type != "t.one" || d.Error != "boom: 1" ||
				d.PayloadSize != int64(len("payload of dead-1")) || d.Headers["k"] != "v" || d.FailedAt == "" {
				t.Fatalf("list: first dead letter %+v, want dead-1 of a with its type, error, size, header and time", d)
			}
			ids := func(p page) (out []int64) {
				for _, d := range p.DeadLetters {
					out = append(out, d.ID)
				}
				return out
			}
			for _, tc := range []struct {
				args []string
				want []int64
				next int64
			}{
				{[]string{"-limit", "2"}, []int64{idA1, idA2}, idA2},
				{[]string{"-limit", "2", "-after", fmt.Sprint(idA2)}, []int64{idB}, 0},
				{[]string{"-consumer", "a", "-error", "m: 2"}, []int64{idA2}, 0},
				{[]string{"-type", "t.one"}, []int64{idA1, idB}, 0},
				{[]string{"-error", "BOOM"}, nil, 0},
				{[]string{"-since", "1h"}, []int64{idA1, idA2, idB}, 0},
				{[]string{"-until", "1h"}, nil, 0},
				{[]string{"-since", "2000-01-01", "-until", "2999-01-01T00:00:00Z"}, []int64{idA1, idA2, idB}, 0},
			} {
				var p page
				cmdJSON(t, &p, 0, with(append([]string{"dead-letters", "list", "-json"}, tc.args...)...)...)
				if !slices.Equal(ids(p), tc.want) || p.NextAfter != tc.next {
					t.Errorf("list %v: %v next %d, want %v next %d", tc.args, ids(p), p.NextAfter, tc.want, tc.next)
				}
			}

			var det detailJSON
			cmdJSON(t, &det, 0, with("dead-letters", "show", "-json", fmt.Sprint(idB))...)
			if det.PayloadBase64 != base64.StdEncoding.EncodeToString([]byte("\xff\x00")) || det.PayloadText != nil || det.InboxRow != "dead" ||
				det.FailedAttempts != 1 || det.LastError != "boom: b" || det.ReceivedAt == "" {
				t.Fatalf("show %d: %+v; want the binary payload in base64 only, a dead row, 1 attempt", idB, det)
			}
			cmdJSON(t, &det, 0, with("dead-letters", "show", fmt.Sprint(idA1), "-json")...) // flags after the ID too
			if det.PayloadText == nil || *det.PayloadText != "payload of dead-1" {
				t.Fatalf("show %d: %+v; want the payload as text", idA1, det)
			}
			if code, stdout, stderr := runCmd(t, with("dead-letters", "show", "99999")...); code != exitNotFound || stdout != "" || !strings.Contains(stderr, "no dead letter 99999") {
				t.Fatalf("show of a missing ID: exit %d, stdout %q, stderr %q; want exit 4 and the error on stderr", code, stdout, stderr)
			}

			for _, tc := range []struct {
				name string
				args []string
			}{
				{"no IDs", nil},
				{"IDs and -all", []string{"-all", "1"}},
				{"filters without -all", []string{"-consumer", "a", "1"}},
				{"not an ID", []string{"x"}},
			} {
				if code, _, stderr := runCmd(t, with(append([]string{"dead-letters", "discard"}, tc.args...)...)...); code != exitUsage {
					t.Errorf("discard, %s: exit %d, want 2 (%s)", tc.name, code, stderr)
				}
			}
			var disc struct {
				Discarded []int64 `json:"discarded"`
				NotFound  []int64 `json:"not_found"`
			}
			cmdJSON(t, &disc, exitNotFound, with("dead-letters", "discard", "-json", fmt.Sprint(idB), "99999")...)
			if !slices.Equal(disc.Discarded, []int64{idB}) || !slices.Equal(disc.NotFound, []int64{99999}) {
				t.Fatalf("discard: %+v, want %d discarded and 99999 not found", disc, idB)
			}
			cmdJSON(t, &disc, 0, with("dead-letters", "discard", "-json", "-all", "-consumer", "a", "-error", "m: 2")...)
			if !slices.Equal(disc.Discarded, []int64{idA2}) {
				t.Fatalf("discard -all with filters: %+v, want only %d", disc, idA2)
			}
			cmdJSON(t, &all, 0, with("dead-letters", "list", "-json")...)
			if !slices.Equal(ids(all), []int64{idA1}) {
				t.Fatalf("after the discards, list: %v, want only %d", ids(all), idA1)
			}
			if out, _ := b.Process(ctx, inbox.Message{ID: "dead-b", Payload: []byte("\xff\x00")}, e.effect); out.Status != inbox.Duplicate {
				t.Fatalf("redelivery of a discarded dead letter: %v, want Duplicate (the row stays dead)", out.Status)
			}

			var chk checkJSON
			cmdJSON(t, &chk, 0, with("check", "-json")...)
			if !chk.OK || chk.SchemaApplied != chk.SchemaLatest || chk.SchemaLatest == 0 || len(chk.Problems) != 0 {
				t.Fatalf("check: %+v, want ok", chk)
			}
			cmdJSON(t, &chk, exitProblem, with("check", "-json", "-retention", "30m")...)
			if chk.OK || len(chk.Problems) != 1 {
				t.Fatalf("check -retention 30m: %+v, want one problem", chk)
			}
		})
	}
}

// TestShowAttempts: show tells why a dead letter has no attempts
// recorded only when the data says so (an invalid message never ran its
// handler; a dead letter that counted attempts lost them to pruning), and
// the text output says "1 attempt", "1 byte".
func TestShowAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := openDB(t, "sqlite")
	a, b := e.inbox(t, inbox.Config{Consumer: "a"}), e.inbox(t, inbox.Config{Consumer: "b"})
	permanent := func(context.Context, *sql.Tx, *inbox.Message) error { return inbox.Permanent(errors.New("boom")) }
	for _, s := range []struct {
		ib *inbox.Inbox[*sql.Tx]
		m  inbox.Message
	}{
		{a, inbox.Message{Payload: []byte("i")}}, // no ID: invalid, dead-lettered at once
		{a, inbox.Message{ID: "pruned", Payload: []byte("pp")}},
		{b, inbox.Message{ID: "once", Payload: []byte("o")}},
	} {
		if out, _ := s.ib.Process(ctx, s.m, permanent); out.Status != inbox.DeadLettered {
			t.Fatalf("%q: %v, want DeadLettered", s.m.ID, out.Status)
		}
	}
	// What the pruner does to attempts older than the retention.
	if _, err := e.db.Exec("DELETE FROM inbox_attempts WHERE message_id = ?", []byte("pruned")); err != nil {
		t.Fatal(err)
	}
	var page struct {
		DeadLetters []deadLetterJSON `json:"dead_letters"`
	}
	cmdJSON(t, &page, 0, append([]string{"dead-letters", "list", "-json"}, e.flags...)...)
	if len(page.DeadLetters) != 3 || page.DeadLetters[0].MessageID != "" {
		t.Fatalf("list: %+v, want 3 dead letters, the invalid message's first", page.DeadLetters)
	}
	for i, tc := range []struct {
		name      string
		want, not []string
	}{
		{"invalid message", []string{"after 0 attempts\n", "attempts:     none: an invalid message is dead-lettered without running its handler\n",
			"payload:      1 byte, text:\n"}, []string{"pruned"}},
		{"attempts pruned", []string{"after 1 attempt\n", "attempts:     none recorded (pruned)\n", "payload:      2 bytes, text:\n"}, nil},
		{"attempt recorded", []string{"after 1 attempt\n", "attempts:     1 failed, 0 transient, from "}, []string{"none"}},
	} {
		id := fmt.Sprint(page.DeadLetters[i].ID)
		code, stdout, stderr := runCmd(t, append([]string{"dead-letters", "show", id}, e.flags...)...)
		if code != 0 {
			t.Fatalf("show %s (%s): exit %d, stderr %q", id, tc.name, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("show %s (%s): stdout lacks %q:\n%s", id, tc.name, w, stdout)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(stdout, w) {
				t.Errorf("show %s (%s): stdout says %q, untrue here:\n%s", id, tc.name, w, stdout)
			}
		}
	}
	code, stdout, _ := runCmd(t, append([]string{"stats", "-consumer", "b"}, e.flags...)...)
	if want := "failed messages:  1 (1 attempt, 0 transient failures)\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("stats -consumer b: exit %d, stdout lacks %q:\n%s", code, want, stdout)
	}
}

// TestCheckWithoutBroker: without a broker, check says that it compared
// the retention with no broker's window, in text and JSON.
func TestCheckWithoutBroker(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	code, stdout, _ := runCmd(t, append([]string{"check"}, e.flags...)...)
	for _, w := range []string{"durability: 0 warnings\n", "retention:  168h0m0s, not compared with a broker's redelivery window\n",
		"note: the retention was not compared with a broker's redelivery window: no broker given"} {
		if code != 0 || !strings.Contains(stdout, w) {
			t.Errorf("check without a broker: exit %d, stdout lacks %q:\n%s", code, w, stdout)
		}
	}
	var chk checkJSON
	cmdJSON(t, &chk, 0, append([]string{"check", "-json"}, e.flags...)...)
	if !chk.OK || chk.RetentionCompared || len(chk.Notes) != 1 || !strings.Contains(chk.Notes[0], "no broker given") {
		t.Fatalf("check -json without a broker: %+v; want ok, retention_compared false, a note saying no broker was given", chk)
	}
}

// TestCheckSchemaBehind: check fails (exit 3) on tables one migration
// behind, naming inbox migrate.
func TestCheckSchemaBehind(t *testing.T) {
	t.Parallel()
	e := openDB(t, "sqlite")
	if _, err := e.db.Exec("DELETE FROM inbox_migrations WHERE version = (SELECT max(version) FROM inbox_migrations)"); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCmd(t, append([]string{"check"}, e.flags...)...)
	if code != exitProblem || !strings.Contains(stdout, "problem: ") || !strings.Contains(stdout, "run inbox migrate") {
		t.Fatalf("check on tables behind: exit %d, stdout %q; want 3 and a problem naming inbox migrate", code, stdout)
	}
}

// TestCheckReadOnly: check on a database that takes no writes (here a
// session with default_transaction_read_only=on; a standby is the same)
// fails with exit 3 and a problem that says so, instead of an error.
func TestCheckReadOnly(t *testing.T) {
	t.Parallel()
	e := openDB(t, "postgres")
	flags := append([]string(nil), e.flags...)
	flags[1] += "&default_transaction_read_only=on"
	code, stdout, stderr := runCmd(t, append([]string{"check"}, flags...)...)
	if code != exitProblem || !strings.Contains(stdout, "problem: ") || !strings.Contains(stdout, "read-only") {
		t.Fatalf("check on a read-only database: exit %d, stdout %q, stderr %q; want 3 and a problem saying read-only", code, stdout, stderr)
	}
}

// TestSubcommandHelp: -h of every command, taken from the command's own
// tables so that a new one is checked too, prints its manual to stdout and
// exits 0: NAME, SYNOPSIS, DESCRIPTION, FLAGS, EXAMPLES, EXIT STATUS in
// that order, every flag in the synopsis, and the top-level usage or
// dead-letters' names the command.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	var manuals [][]string // a command's words
	for name := range commands {
		if name != "dead-letters" {
			manuals = append(manuals, []string{name})
			continue
		}
		for sub := range deadLetterCommands {
			manuals = append(manuals, []string{name, sub})
		}
	}
	if len(manuals) < 9 {
		t.Fatalf("%d commands with a manual, want at least 9: %v", len(manuals), manuals)
	}
	_, dlIndex, _ := runCmd(t, "dead-letters", "-h")
manuals:
	for _, words := range manuals {
		name := strings.Join(words, " ")
		index := usage
		if len(words) > 1 {
			index = dlIndex
		}
		if !strings.Contains(index, "\n  "+words[len(words)-1]+" ") && !strings.Contains(index, "inbox "+name+" ") {
			t.Errorf("the usage does not list %q:\n%s", name, index)
		}
		var stdout string
		for _, h := range []string{"-h", "-help", "--help"} {
			var code int
			var stderr string
			code, stdout, stderr = runCmd(t, append(words, h)...)
			if code != 0 || stderr != "" {
				t.Errorf("inbox %s %s: exit %d, stderr %q; want 0 and nothing on stderr", name, h, code, stderr)
			}
			at := 0
			for _, section := range []string{"NAME\n  inbox " + name + "\n", "\nSYNOPSIS\n  inbox " + name + " ", "\nDESCRIPTION\n  ", "\nFLAGS\n  -",
				"\nEXAMPLES\n  inbox " + name, "\n" + exitStatus} {
				i := strings.Index(stdout[at:], section)
				if i < 0 || at == 0 && i != 0 {
					t.Errorf("inbox %s %s: the manual lacks %q after byte %d, want NAME, SYNOPSIS, DESCRIPTION, FLAGS, EXAMPLES, EXIT STATUS in order:\n%s",
						name, h, section, at, stdout)
					continue manuals
				}
				at += i + len(section)
			}
		}
		_, synopsis, _ := strings.Cut(stdout, "\nSYNOPSIS\n")
		synopsis, rest, _ := strings.Cut(synopsis, "\nDESCRIPTION\n")
		_, flags, _ := strings.Cut(rest, "\nFLAGS\n")
		flags, _, _ = strings.Cut(flags, "\n\n")
		n := 0
		for _, line := range strings.Split(flags, "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			n++
			flag := strings.Fields(line)[0]
			if !regexp.MustCompile(regexp.QuoteMeta(flag) + `[ \])\n]`).MatchString(synopsis + "\n") {
				t.Errorf("inbox %s -h: the synopsis lacks %s, which FLAGS has:\n%s", name, flag, synopsis)
			}
		}
		if n == 0 {
			t.Errorf("inbox %s -h: no flags listed under FLAGS:\n%s", name, stdout)
		}
	}
	for _, args := range [][]string{{"dead-letters"}, {"dead-letters", "frobnicate"}, {"dead-letters", "replay", "-sqlite", "x.db", "1"},
		{"dead-letters", "replay", "-sqlite", "x.db", "-nats", "nats://x", "1"}, {"stats", "-top", "-1"}, {"check", "-nats", "nats://x"}} {
		if code, stdout, _ := runCmd(t, args...); code != exitUsage || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing on stdout", args, code, stdout)
		}
	}
}
