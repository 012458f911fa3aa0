package main

import (
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// scriptEnv is one database for TestPrintedScript.
type scriptEnv struct {
	dialect string
	// store selects the database: -postgres DSN, ...
	store []string
	// printed and migrated are the tables that the script and migrate
	// create.
	printed, migrated store.Tables
	// apply runs the script with the database's own client.
	apply func(t *testing.T, script string)
	// recorded returns the rows of the migrations table: version, name,
	// applied_at.
	recorded func(t *testing.T, tables store.Tables) [][3]string
	// claim claims one message twice in tables: new, then a duplicate.
	claim func(t *testing.T, tables store.Tables)
	// cutShort: Migrate can stop between a migration's statements and
	// its record (MySQL: DDL commits by itself).
	cutShort bool
	// once: the script applies once (SQLite, whose ALTER TABLE ADD COLUMN
	// has no IF NOT EXISTS); applying it again must fail and change
	// nothing. tryApply applies it and returns the error.
	once     bool
	tryApply func(t *testing.T, script string) error
}

// TestPrintedScript: the script that migrate -print writes, applied with
// the database's own client (psql, mariadb, sqlite3 or database/sql),
// creates the tables and records the versions as migrate does: applying it
// again, or after migrate, changes nothing (on SQLite it fails and changes
// nothing); migrate afterwards has nothing to apply; a claim works on the
// tables.
func TestPrintedScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) scriptEnv
	}{{"postgres", postgresScriptEnv}, {"mysql", mysqlScriptEnv}, {"sqlite", sqliteScriptEnv}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := tc.open(t)
			flags := func(tables store.Tables) []string {
				return []string{"-schema", tables.Schema, "-prefix", tables.Prefix}
			}
			code, script, stderr := runCmd(t, append([]string{"migrate", "-print", "-dialect", e.dialect}, flags(e.printed)...)...)
			if code != 0 {
				t.Fatalf("migrate -print: exit %d: %s", code, stderr)
			}
			latest := strconv.Itoa(lastVersion(t, e.dialect))
			migrate := func(tables store.Tables, want string) {
				t.Helper()
				code, stdout, stderr := runCmd(t, append(append([]string{"migrate"}, e.store...), flags(tables)...)...)
				if code != 0 || !strings.Contains(stdout, want) {
					t.Fatalf("migrate %+v: exit %d, stdout %q, want %q; stderr: %s", tables, code, stdout, want, stderr)
				}
			}
			same := func(what string, got, want [][3]string) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Fatalf("%s: migrations table %q, want %q", what, got, want)
				}
			}

			e.apply(t, script)
			applied := e.recorded(t, e.printed)
			if len(applied) == 0 || applied[len(applied)-1][0] != latest {
				t.Fatalf("after the script, migrations table %q, want versions up to %s", applied, latest)
			}
			// reapply applies the script to tables it or migrate made.
			reapply := func(tables store.Tables, script string) {
				t.Helper()
				if !e.once {
					e.apply(t, script)
					return
				}
				if err := e.tryApply(t, script); err == nil || !strings.Contains(err.Error(), "duplicate column") {
					t.Fatalf("applied again: %v, want the script to fail at a column that exists", err)
				}
			}
			reapply(e.printed, script)
			same("applied twice", e.recorded(t, e.printed), applied)
			migrate(e.printed, "up to date at version "+latest+": nothing to apply")
			same("migrate after the script", e.recorded(t, e.printed), applied)

			// What migrate records, the script records: same versions and names.
			migrate(e.migrated, "now at version "+latest)
			byMigrate := e.recorded(t, e.migrated)
			if len(byMigrate) != len(applied) {
				t.Fatalf("migrate recorded %q, the script %q", byMigrate, applied)
			}
			for i := range byMigrate {
				if byMigrate[i][0] != applied[i][0] || byMigrate[i][1] != applied[i][1] {
					t.Fatalf("migrate recorded %q, the script %q", byMigrate, applied)
				}
			}
			scriptFor := func(tables store.Tables) string {
				_, s, _ := runCmd(t, append([]string{"migrate", "-print", "-dialect", e.dialect}, flags(tables)...)...)
				return s
			}
			reapply(e.migrated, scriptFor(e.migrated))
			same("the script after migrate", e.recorded(t, e.migrated), byMigrate)

			if e.cutShort { // a Migrate that stopped before recording the last version
				e.apply(t, "DELETE FROM "+e.printed.Name("inbox_migrations", store.QuoteBacktick)+" WHERE version = "+latest+";")
				e.apply(t, script)
				if got := e.recorded(t, e.printed); len(got) != len(applied) {
					t.Fatalf("after a cut-short migrate and the script, migrations table %q, want %d versions", got, len(applied))
				}
				migrate(e.printed, "up to date at version "+latest)
			}
			e.claim(t, e.printed)
			if code, stdout, stderr := runCmd(t, append(append([]string{"prune"}, e.store...), flags(e.printed)...)...); code != 0 || !strings.Contains(stdout, "pruned 0 rows") {
				t.Fatalf("prune: exit %d, stdout %q, want pruned 0 rows; stderr: %s", code, stdout, stderr)
			}
		})
	}
}

func lastVersion(t *testing.T, dialect string) int {
	t.Helper()
	var ms []store.Migration
	var err error
	switch dialect {
	case "postgres":
		ms, err = pgxstore.Migrations(store.Tables{})
	case "mysql":
		ms, err = sqlstore.Migrations(mysql.Dialect, store.Tables{})
	default:
		ms, err = sqlstore.Migrations(sqlite.Dialect, store.Tables{})
	}
	if err != nil || len(ms) == 0 {
		t.Fatalf("migrations of %s: %d, %v", dialect, len(ms), err)
	}
	return ms[len(ms)-1].Version
}

// client runs one of the databases' command-line clients with script as
// its input, skipping (or failing, when services are required) without it.
func client(t *testing.T, script string, names []string, args ...string) {
	t.Helper()
	var path string
	var err error
	for _, name := range names {
		if path, err = exec.LookPath(name); err == nil {
			break
		}
	}
	if err != nil {
		testenv.Unavailable(t, strings.Join(names, " or "), err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(path), err, out)
	}
}

func postgresScriptEnv(t *testing.T) scriptEnv {
	pool := pgenv.Pool(t, 2)
	schema := testenv.Name("cmdscript_")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	return scriptEnv{
		dialect:  "postgres",
		store:    []string{"-postgres", pgenv.DSN()},
		printed:  store.Tables{Schema: schema, Prefix: "p_"},
		migrated: store.Tables{Schema: schema, Prefix: "m_"},
		apply: func(t *testing.T, script string) {
			client(t, script, []string{"psql"}, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pgenv.DSN(), "-f", "-")
		},
		recorded: func(t *testing.T, tables store.Tables) [][3]string {
			rows, err := pool.Query(context.Background(), "SELECT version::text, name, applied_at::text FROM "+
				tables.Name("inbox_migrations", store.QuoteDouble)+" ORDER BY version")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			return scanRecorded(t, rows)
		},
		claim: func(t *testing.T, tables store.Tables) {
			d, err := pgxstore.New(pool, &pgxstore.Config{Tables: tables})
			if err != nil {
				t.Fatal(err)
			}
			claimTwice(t, d)
		},
	}
}

func mysqlScriptEnv(t *testing.T) scriptEnv {
	dsn := mysqlenv.Database(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := mysql.Open(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	host, port, _ := strings.Cut(cfg.Addr, ":")
	args := []string{"--protocol=TCP", "-h", host, "-P", port, "-u", cfg.User, cfg.DBName}
	if cfg.Passwd != "" {
		args = append(args, "--password="+cfg.Passwd)
	}
	return scriptEnv{
		dialect:  "mysql",
		store:    []string{"-mysql", dsn},
		printed:  store.Tables{Schema: cfg.DBName, Prefix: "p_"},
		migrated: store.Tables{Prefix: "m_"},
		apply:    func(t *testing.T, script string) { client(t, script, []string{"mariadb", "mysql"}, args...) },
		recorded: func(t *testing.T, tables store.Tables) [][3]string {
			return sqlRecorded(t, db, "SELECT version, name, CAST(applied_at AS CHAR) FROM "+tables.Name("inbox_migrations", store.QuoteBacktick))
		},
		claim: func(t *testing.T, tables store.Tables) {
			d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect, Tables: tables})
			if err != nil {
				t.Fatal(err)
			}
			claimTwice(t, d)
		},
		cutShort: true,
	}
}

func sqliteScriptEnv(t *testing.T) scriptEnv {
	path := filepath.Join(t.TempDir(), "script.db")
	applied := 0
	open := func(t *testing.T) *sql.DB {
		db, err := sqlite.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	return scriptEnv{
		dialect:  "sqlite",
		store:    []string{"-sqlite", path},
		printed:  store.Tables{Prefix: "p_"},
		migrated: store.Tables{Prefix: "m_"},
		// The first time with the sqlite3 command if it is installed,
		// then as one Exec of database/sql.
		apply: func(t *testing.T, script string) {
			applied++
			if _, err := exec.LookPath("sqlite3"); err == nil && applied == 1 {
				client(t, script, []string{"sqlite3"}, "-bail", path)
				return
			} else if applied == 1 {
				t.Logf("no sqlite3 command (%v): the script runs through database/sql", err)
			}
			if _, err := open(t).Exec(script); err != nil {
				t.Fatalf("the script through database/sql: %v", err)
			}
		},
		once: true,
		tryApply: func(t *testing.T, script string) error {
			db, err := sqlite.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close() // ends the transaction that the failed script left open
			_, err = db.Exec(script)
			return err
		},
		recorded: func(t *testing.T, tables store.Tables) [][3]string {
			return sqlRecorded(t, open(t), "SELECT version, name, applied_at FROM "+tables.Name("inbox_migrations", store.QuoteDouble))
		},
		claim: func(t *testing.T, tables store.Tables) {
			d, err := sqlstore.New(open(t), &sqlstore.Config{Dialect: sqlite.Dialect, Tables: tables})
			if err != nil {
				t.Fatal(err)
			}
			claimTwice(t, d)
		},
	}
}

func sqlRecorded(t *testing.T, db *sql.DB, query string) [][3]string {
	t.Helper()
	rows, err := db.Query(query + " ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	return scanRecorded(t, rows)
}

// scanRecorded reads the rows of the migrations table, of database/sql
// or pgx.
func scanRecorded(t *testing.T, rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) [][3]string {
	t.Helper()
	var out [][3]string
	for rows.Next() {
		var r [3]string
		if err := rows.Scan(&r[0], &r[1], &r[2]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claimTwice claims one message on d: new, then a duplicate.
func claimTwice[TTx any](t *testing.T, d store.Driver[TTx]) {
	t.Helper()
	ctx := context.Background()
	p := &store.ClaimParams{Key: store.Key{Consumer: []byte("cmd"), MessageID: []byte("m-1")}, LockTimeout: time.Second, Type: "t"}
	for i, want := range []bool{true, false} {
		tx, res, err := d.BeginClaim(ctx, p)
		if err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
		if res.Claimed != want {
			t.Fatalf("claim %d: Claimed %v, want %v", i+1, res.Claimed, want)
		}
		if !res.Claimed {
			continue // BeginClaim ended the transaction
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
}

// TestPostgresScriptsAgree: postgres.Dialect prints pgxstore's script, as
// both share the schema and the migrations table.
func TestPostgresScriptsAgree(t *testing.T) {
	t.Parallel()
	tables := store.Tables{Schema: "app", Prefix: "x_"}
	a, err := pgxstore.MigrationScript(tables)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlstore.MigrationScript(postgres.Dialect, tables)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("postgres.Dialect's script differs from pgxstore's:\n%s\n---\n%s", b, a)
	}
}
