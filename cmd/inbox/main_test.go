package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCmd runs the command in-process and returns its exit code, stdout and
// stderr.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = exitCode(context.Background(), args, &out, &errOut)
	if strings.Contains(errOut.String(), "inbox: inbox:") {
		t.Errorf("%v: doubled prefix in %q", args, errOut.String())
	}
	return code, out.String(), errOut.String()
}

func TestCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "cmd.db")
	empty := filepath.Join(dir, "empty.db") // an empty file is a SQLite database without tables
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.db")
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     []string // substrings
		stderr     []string // substrings
		noFileLeft string   // a path the command must not create
	}{
		{name: "demo", args: []string{"demo", "-messages", "120", "-workers", "3", "-db", dbPath},
			stdout: []string{"processed:  120\n", "every payment credited exactly once"}},
		{name: "demo again on the same file", args: []string{"demo", "-messages", "50", "-db", dbPath},
			stdout: []string{"processed:  50\n"}},
		{name: "print postgres", args: []string{"migrate", "-print", "-dialect", "postgres", "-schema", "app", "-prefix", "x_"},
			stdout: []string{`CREATE TABLE IF NOT EXISTS "app"."x_inbox_migrations"`, `CREATE TABLE "app"."x_inbox"`, "-- migration 1: inbox",
				`IF NOT EXISTS (SELECT version FROM "app"."x_inbox_migrations" WHERE version = 1)`,
				`INSERT INTO "app"."x_inbox_migrations" (version, name) VALUES (1, 'inbox');`, "BEGIN;", "COMMIT;",
				`CREATE TABLE "app"."x_outbox"`, "-- migration 4: outbox"}},
		{name: "print mysql", args: []string{"migrate", "-print", "-dialect", "mysql", "-schema", "app", "-prefix", "x_"},
			stdout: []string{"CREATE TABLE IF NOT EXISTS `app`.`x_inbox_migrations`", "CREATE TABLE IF NOT EXISTS `app`.`x_inbox`",
				"VARBINARY(1024)", "DO GET_LOCK(", "DO RELEASE_LOCK(",
				"INSERT INTO `app`.`x_inbox_migrations` (version, name, applied_at) VALUES (1, 'inbox', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version;"}},
		{name: "print sqlite", args: []string{"migrate", "-print", "-dialect", "sqlite"},
			stdout: []string{`CREATE TABLE IF NOT EXISTS "inbox_migrations"`, `CREATE TABLE IF NOT EXISTS "inbox"`, "WITHOUT ROWID",
				"BEGIN IMMEDIATE;", "ON CONFLICT (version) DO NOTHING;", "COMMIT;"}},
		{name: "hostile prefix", args: []string{"migrate", "-print", "-dialect", "postgres", "-prefix", `x"; DROP TABLE y; --`},
			code: 1, stderr: []string{"invalid table names"}},
		{name: "print without dialect", args: []string{"migrate", "-print"}, code: 1, stderr: []string{"-dialect must be"}},
		{name: "migrate sqlite", args: []string{"migrate", "-sqlite", dbPath}, stdout: []string{"up to date at version 5: nothing to apply"}},
		{name: "migrate a new sqlite file", args: []string{"migrate", "-sqlite", filepath.Join(dir, "new.db")},
			stdout: []string{"applied migration 1 (inbox)\n", "applied migration 2 (transient_failures)\n", "applied migration 3 (outbox)\n", "applied migration 4 (error_group)\n", "applied migration 5 (idempotency_keys)\n", "now at version 5\n"}},
		{name: "prune sqlite", args: []string{"prune", "-sqlite", dbPath}, stdout: []string{"pruned 0 rows"}},
		{name: "prune a missing sqlite file", args: []string{"prune", "-sqlite", missing},
			code: 1, stderr: []string{"inbox: no SQLite database at " + missing}, noFileLeft: missing},
		{name: "prune without tables", args: []string{"prune", "-sqlite", empty},
			code: 1, stderr: []string{"inbox: prune: ", "no such table"}},
		{name: "prune too short", args: []string{"prune", "-sqlite", dbPath, "-retention", "30m"},
			code: 2, stderr: []string{"inbox prune: -retention 30m0s is shorter than the minimum 1h0m0s\n"}},
		{name: "prune keys too short", args: []string{"prune", "-sqlite", dbPath, "-keys", "30m"},
			code: 2, stderr: []string{"inbox prune: -keys 30m0s is shorter than the minimum 1h0m0s\n"}},
		{name: "prune with keys", args: []string{"prune", "-sqlite", dbPath, "-keys", "24h"},
			stdout: []string{"pruned 0 rows in", "pruned 0 idempotency keys in"}},
		{name: "prune negative", args: []string{"prune", "-sqlite", dbPath, "-retention", "-1h"},
			code: 2, stderr: []string{"inbox prune: -retention -1h0m0s is shorter than the minimum 1h0m0s\n"}},
		{name: "demo without messages", args: []string{"demo", "-messages", "0"},
			code: 2, stderr: []string{"inbox demo: -messages and -workers must be at least 1\n"}},
		{name: "no store", args: []string{"migrate"}, code: 2, stderr: []string{"inbox migrate: give -postgres DSN"}},
		{name: "two stores", args: []string{"migrate", "-postgres", "x", "-mysql", "y"}, code: 2, stderr: []string{"give one of"}},
		{name: "no command", code: 2, stderr: []string{"usage: inbox <command>"}},
		{name: "unknown", args: []string{"frobnicate"}, code: 2, stderr: []string{`unknown command "frobnicate"`}},
		{name: "unknown flag", args: []string{"prune", "-frobnicate"}, code: 2, stderr: []string{"flag provided but not defined: -frobnicate", "-retention"}},
		{name: "extra argument", args: []string{"prune", "-sqlite", dbPath, "now"}, code: 2, stderr: []string{`unexpected arguments ["now"]`}},
		{name: "help", args: []string{"help"}, stdout: []string{"usage: inbox <command>"}},
		{name: "demo -h", args: []string{"demo", "-h"}, stdout: []string{"NAME\n  inbox demo\n", "-messages"}},
		{name: "migrate -h", args: []string{"migrate", "-h"}, stdout: []string{"NAME\n  inbox migrate\n", "psql -v ON_ERROR_STOP=1", "-print"}},
		{name: "prune -help", args: []string{"prune", "-help"}, stdout: []string{"NAME\n  inbox prune\n", "-retention"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Sequential: the demo, migrate and prune cases share a file.
			code, stdout, stderr := runCmd(t, tc.args...)
			if code != tc.code {
				t.Fatalf("%v: exit code %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("%v: stdout lacks %q:\n%s", tc.args, w, stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("%v: stderr lacks %q:\n%s", tc.args, w, stderr)
				}
			}
			if tc.code != 0 && stdout != "" {
				t.Errorf("%v: failed, yet wrote to stdout: %q", tc.args, stdout)
			}
			if tc.noFileLeft != "" {
				if _, err := os.Stat(tc.noFileLeft); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%v: %s exists after the command (stat: %v), want no file created", tc.args, tc.noFileLeft, err)
				}
			}
		})
	}
}

// TestManualsPartly: the manuals say how long replay and discard wait
// for a locked dead letter (MySQL rounds -lock-timeout up to seconds),
// and when replay, discard and outbox exit 4 or 5.
func TestManualsPartly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"dead-letters", "replay", "-h"}, []string{"MySQL/MariaDB round it up to whole seconds, at least 1s",
			"the exit status is 5 (partly done)", "A dead letter not found, the others replayed, exits 4"}},
		{[]string{"dead-letters", "discard", "-h"}, []string{"waited for 5 s at most (store.DefaultLockTimeout)",
			"makes the exit status 4, after the others were deleted", "exits 5 (partly done)"}},
		{[]string{"outbox", "-h"}, []string{"makes the exit status 4, after the others were done", "names the SEQs not tried",
			"the exit status is 5 (partly done), and -json holds the error too"}},
	} {
		code, stdout, _ := runCmd(t, tc.args...)
		manual := strings.Join(strings.Fields(stdout), " ")
		if code != 0 {
			t.Fatalf("%v: exit %d, want 0", tc.args, code)
		}
		for _, w := range append(tc.want, "4 a dead letter or parked outbox row asked for does not exist; the others given were done",
			"5 partly done: some changes were made, which stdout lists, and another failed for a reason other than not found") {
			if !strings.Contains(manual, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, stdout)
			}
		}
	}
}
