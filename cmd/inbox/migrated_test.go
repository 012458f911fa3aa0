package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

// unmigrated returns the store flags of a database without the inbox's
// tables.
func unmigrated(t *testing.T, dialect string) []string {
	t.Helper()
	switch dialect {
	case "postgres":
		_, schema := pgenv.PoolInSchema(t, 1) // skips without PostgreSQL
		return []string{"-postgres", pgenv.DSN(), "-schema", schema}
	case "mysql":
		return []string{"-mysql", mysqlenv.Database(t)}
	}
	path := filepath.Join(t.TempDir(), "empty.db") // an empty file is a SQLite database without tables
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-sqlite", path}
}

// On a database that migrate never ran on, the commands that read the
// inbox's tables say to run migrate, not the database's "no such table".
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	const want = "inbox: not migrated: run inbox migrate with the same store flags first (the inbox's tables do not exist)\n"
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			flags := unmigrated(t, dialect)
			for _, args := range [][]string{
				{"stats"}, {"stats", "-json"}, {"dead-letters", "list"}, {"dead-letters", "list", "-json"}, {"dead-letters", "show", "1"},
			} {
				args := append(args, flags...)
				code, stdout, stderr := runCmd(t, args...)
				if code != exitFailure || stderr != want || stdout != "" {
					t.Errorf("%v: exit %d, stderr %q, stdout %q\nwant exit 1, stderr %q", args[:len(args)-len(flags)], code, stderr, stdout, want)
				}
			}
		})
	}
}

// A command without a store, or with two, is a wrong command line: exit
// 2, with the command's name.
func TestStoreFlagUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"stats"}, "inbox stats: give -postgres DSN, -mysql DSN or -sqlite FILE\n"},
		{[]string{"dead-letters", "list"}, "inbox dead-letters list: give -postgres DSN, -mysql DSN or -sqlite FILE\n"},
		{[]string{"prune"}, "inbox prune: give -postgres DSN, -mysql DSN or -sqlite FILE\n"},
		{[]string{"check"}, "inbox check: give -postgres DSN, -mysql DSN or -sqlite FILE\n"},
		{[]string{"migrate", "-postgres", "x", "-mysql", "y"}, "inbox migrate: give one of -postgres, -mysql and -sqlite\n"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, tc.args...)
			if code != exitUsage || stderr != tc.want || stdout != "" {
				t.Fatalf("%v: exit %d, stderr %q, stdout %q\nwant exit 2, stderr %q", tc.args, code, stderr, stdout, tc.want)
			}
		})
	}
}
