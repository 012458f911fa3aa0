package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
)

func TestCommands(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "cmd.db")
	tests := []struct {
		name    string
		args    []string
		want    []string // substrings of the output
		wantErr error    // nil: success; errAny: any error
	}{
		{"demo", []string{"demo", "-messages", "120", "-workers", "3", "-db", dbPath},
			[]string{"processed:  120\n", "every payment credited exactly once"}, nil},
		{"demo again on the same file", []string{"demo", "-messages", "50", "-db", dbPath},
			[]string{"processed:  50\n"}, nil},
		{"print postgres", []string{"migrate", "-print", "-dialect", "postgres", "-schema", "app", "-prefix", "x_"},
			[]string{`CREATE TABLE "app"."x_inbox"`, `"app"."x_inbox_dead_letters"`, "-- migration 1: inbox"}, nil},
		{"print mysql", []string{"migrate", "-print", "-dialect", "mysql", "-schema", "app", "-prefix", "x_"},
			[]string{"CREATE TABLE IF NOT EXISTS `app`.`x_inbox`", "VARBINARY(1024)", "ENGINE=InnoDB"}, nil},
		{"print sqlite", []string{"migrate", "-print", "-dialect", "sqlite"},
			[]string{`CREATE TABLE IF NOT EXISTS "inbox"`, "WITHOUT ROWID"}, nil},
		{"hostile prefix", []string{"migrate", "-print", "-dialect", "postgres", "-prefix", `x"; DROP TABLE y; --`},
			nil, store.ErrInvalidTables},
		{"migrate sqlite", []string{"migrate", "-sqlite", dbPath}, []string{"migrated: 1 migrations"}, nil},
		{"prune sqlite", []string{"prune", "-sqlite", dbPath}, []string{"pruned 0 rows"}, nil},
		{"prune too short", []string{"prune", "-sqlite", dbPath, "-retention", "30m"}, nil, errAny},
		{"no store", []string{"migrate"}, nil, errAny},
		{"unknown", []string{"frobnicate"}, nil, errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Sequential: the demo and prune cases share a file.
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("%v: %v\n%s", tc.args, err, out.String())
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("%v: error %v, want %v", tc.args, err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("%v: output lacks %q:\n%s", tc.args, w, out.String())
				}
			}
		})
	}
}

var errAny = errors.New("any error")

// migrate and prune on the servers, in fresh schemas.
func TestCommandsOnServers(t *testing.T) {
	t.Parallel()
	pool := testenv.PostgresPool(t, 1)
	schema := testenv.Name("cmd_")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	mysqlDSN := testenv.MySQLDatabase(t)
	for _, args := range [][]string{
		{"migrate", "-postgres", testenv.PostgresDSN(), "-schema", schema},
		{"prune", "-postgres", testenv.PostgresDSN(), "-schema", schema},
		{"migrate", "-mysql", mysqlDSN, "-prefix", "cmd_"},
		{"prune", "-mysql", mysqlDSN, "-prefix", "cmd_"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out); err != nil {
			t.Fatalf("%v: %v\n%s", args[:2], err, out.String())
		}
		if !strings.Contains(out.String(), " migrations\n") && !strings.Contains(out.String(), "pruned 0 rows") { // PostgreSQL has more migrations than MySQL
			t.Fatalf("%v: output %q", args[:2], out.String())
		}
	}
	if err := run(context.Background(), []string{"migrate", "-postgres", "x", "-mysql", "y"}, &bytes.Buffer{}); err == nil {
		t.Fatal("two stores at once accepted")
	}
}
