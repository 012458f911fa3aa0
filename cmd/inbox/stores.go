package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/internal/redact"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// storeFlags select a database and the inbox's table names.
type storeFlags struct {
	postgres, mysql, sqlite, schema, prefix string
	cmd                                     string // the command's name, for a usage error
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	s.cmd = fs.Name()
	fs.StringVar(&s.postgres, "postgres", "", "PostgreSQL DSN, e.g. postgres://postgres@127.0.0.1:5432/test")
	fs.StringVar(&s.mysql, "mysql", "", "MySQL/MariaDB DSN (go-sql-driver/mysql format), e.g. root@tcp(127.0.0.1:3306)/test")
	fs.StringVar(&s.sqlite, "sqlite", "", "SQLite database file")
	fs.StringVar(&s.schema, "schema", "", "schema of the tables (PostgreSQL; MySQL: database)")
	fs.StringVar(&s.prefix, "prefix", "", "prefix of the table names")
}

func (s *storeFlags) tables() store.Tables { return store.Tables{Schema: s.schema, Prefix: s.prefix} }

// driver is what the commands use of a store.
type driver interface {
	inbox.PruneStore
	Migrate(ctx context.Context) error
	Migrations() []store.Migration
	SchemaVersion(ctx context.Context) (int, error)
	DurabilityWarnings(ctx context.Context) ([]string, error)
}

// opened is a store the command opened.
type opened struct {
	driver
	// applied returns the versions recorded in the migrations table, none
	// when the table does not exist.
	applied func(ctx context.Context) ([]int, error)
	close   func()
	// inspect is the store's store.Inspector.
	inspect inspection
	// console makes a web console on the store's driver.
	console func(cfg *console.Config) (*console.Console, error)
}

// consoleOf makes opened.console for driver d.
func consoleOf[TTx any](d store.Driver[TTx]) func(cfg *console.Config) (*console.Console, error) {
	return func(cfg *console.Config) (*console.Console, error) { return console.New(d, cfg) }
}

// open opens the selected store. A SQLite file that does not exist is
// created only when create is set (migrate), so that a mistyped path is an
// error elsewhere.
func (s *storeFlags) open(ctx context.Context, create bool, stderr io.Writer) (*opened, error) {
	tables := s.tables()
	given := 0
	for _, v := range []string{s.postgres, s.mysql, s.sqlite} {
		if v != "" {
			given++
		}
	}
	// The command says what it migrated; the stores' own log is for trouble.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	switch {
	case given > 1:
		return nil, s.usage(stderr, "give one of -postgres, -mysql and -sqlite")
	case s.mysql != "":
		db, err := mysql.Open(s.mysql, nil)
		if err != nil {
			return nil, redact.Error(err, s.mysql)
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect, Tables: tables, Logger: log})
		if err != nil {
			db.Close()
			return nil, err
		}
		applied := func(ctx context.Context) ([]int, error) {
			return sqlVersions(ctx, db, tables.Name("inbox_migrations", store.QuoteBacktick),
				`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`,
				tables.Schema, tables.Prefix+"inbox_migrations")
		}
		return &opened{d, applied, func() { db.Close() }, checked(newInspection(d), applied), consoleOf(d)}, nil
	case s.postgres != "":
		pool, err := pgxpool.New(ctx, s.postgres)
		if err != nil {
			// pgconn masks the passwords it recognizes, on a best-effort basis.
			return nil, redact.Error(err, s.postgres)
		}
		d, err := pgxstore.New(pool, &pgxstore.Config{Tables: tables})
		if err != nil {
			pool.Close()
			return nil, err
		}
		name := tables.Name("inbox_migrations", store.QuoteDouble)
		applied := func(ctx context.Context) ([]int, error) {
			var exists bool
			if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || !exists {
				return nil, err
			}
			rows, _ := pool.Query(ctx, `SELECT version FROM `+name)
			return pgx.CollectRows(rows, pgx.RowTo[int])
		}
		return &opened{d, applied, pool.Close, checked(newInspection(d), applied), consoleOf(d)}, nil
	case s.sqlite != "":
		if _, err := os.Stat(s.sqlite); !create && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no SQLite database at %s (inbox migrate -sqlite %s creates it)", s.sqlite, s.sqlite)
		}
		db, err := sqlite.Open(s.sqlite, nil)
		if err != nil {
			return nil, err
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Tables: tables, Logger: log})
		if err != nil {
			db.Close()
			return nil, err
		}
		applied := func(ctx context.Context) ([]int, error) {
			return sqlVersions(ctx, db, tables.Name("inbox_migrations", store.QuoteDouble),
				`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, tables.Prefix+"inbox_migrations")
		}
		return &opened{d, applied, func() { db.Close() }, checked(newInspection(d), applied), consoleOf(d)}, nil
	}
	return nil, s.usage(stderr, "give -postgres DSN, -mysql DSN or -sqlite FILE")
}

// sqlVersions reads the versions in the migrations table name, if exists
// (a count, args) finds it.
func sqlVersions(ctx context.Context, db *sql.DB, name, exists string, args ...any) ([]int, error) {
	var n int
	if err := db.QueryRowContext(ctx, exists, args...).Scan(&n); err != nil || n == 0 {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT version FROM `+name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, rows.Err()
}

var migrateCommand = command{
	name: "migrate",
	synopsis: "inbox migrate " + storeSynopsis + `
inbox migrate -print -dialect (postgres | mysql | sqlite) [-schema S] [-prefix P]`,
	description: `Applies the migrations the database lacks and says which, or that it is up
to date. A SQLite file is created if missing. It then fills in the error
groups of rows written before they were recorded, one row at a time: on a
terminal, stderr shows how long it has run.

-print writes the migrations as one SQL script instead, without a database,
for teams that apply SQL themselves. The script does what migrate does,
under its lock: it creates the migrations table if missing and records each
version there as migrate does, so that migrate afterwards finds nothing to
do. Applying it twice, or after migrate, changes nothing: on PostgreSQL each
migration runs only if its version is not recorded, in one transaction; on
MySQL and SQLite every statement is idempotent. Apply it with
  psql -v ON_ERROR_STOP=1 -f inbox.sql DSN
  mariadb DATABASE < inbox.sql       (or mysql)
  sqlite3 -bail inbox.db < inbox.sql`,
	examples: `inbox migrate -sqlite inbox.db
inbox migrate -postgres postgres://app@db/app -schema app
inbox migrate -print -dialect postgres -schema app > inbox.sql`,
}

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := migrateCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	print := fs.Bool("print", false, "print the migrations as one SQL script instead of applying them (with -dialect)")
	dialect := fs.String("dialect", "", "with -print: postgres, mysql or sqlite")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *print {
		return printScript(*dialect, sf.tables(), stdout)
	}
	d, err := sf.open(ctx, true, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	before, err := d.applied(ctx)
	if err != nil {
		return fmt.Errorf("reading the applied migrations: %w", err)
	}
	// The store fills in the error groups of old rows, one at a time, and
	// tells no count: the line says how long it has run.
	prog := newProgress(stderr, false, "migrate", "", 0)
	stop := prog.every(ctx, max(progressInterval, time.Millisecond))
	err = d.Migrate(ctx)
	stop()
	if err != nil {
		return err
	}
	after, err := d.applied(ctx)
	if err != nil {
		return fmt.Errorf("reading the applied migrations: %w", err)
	}
	slices.Sort(after)
	applied := 0
	for _, m := range d.Migrations() {
		if !slices.Contains(before, m.Version) && slices.Contains(after, m.Version) {
			fmt.Fprintf(stdout, "applied migration %d (%s)\n", m.Version, m.Name)
			applied++
		}
	}
	latest := 0
	if len(after) > 0 {
		latest = after[len(after)-1]
	}
	if applied == 0 {
		fmt.Fprintf(stdout, "up to date at version %d: nothing to apply\n", latest)
	} else {
		fmt.Fprintf(stdout, "now at version %d\n", latest)
	}
	return nil
}

// printScript prints the migration script without connecting to any
// database.
func printScript(dialect string, tables store.Tables, out io.Writer) error {
	var script string
	var err error
	switch dialect {
	case "postgres":
		script, err = pgxstore.MigrationScript(tables)
	case "mysql":
		script, err = sqlstore.MigrationScript(mysql.Dialect, tables)
	case "sqlite":
		script, err = sqlstore.MigrationScript(sqlite.Dialect, tables)
	default:
		return fmt.Errorf("-dialect must be postgres, mysql or sqlite, not %q", dialect)
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, script)
	return err
}

var pruneCommand = command{
	name:     "prune",
	synopsis: "inbox prune " + storeSynopsis + " [-retention D] [-keys D]",
	description: `Deletes, once, the inbox rows and the failed attempts recorded that are
older than -retention by the database's clock, for every consumer of the
tables, in batches as inbox.Pruner.Prune does, and prints how many it
deleted. Dead letters are never pruned (inbox dead-letters discard deletes
them). A SQLite file must exist. On a terminal, stderr shows the rows
deleted so far and the rate.

The retention must be longer than the broker's redelivery window: a message
redelivered after its row was pruned is processed again (inbox check
compares them). Run it from cron, or an inbox.Pruner in the service;
several pruners at once are safe: one at a time works on a table.

With -keys, it also deletes the HTTP Idempotency-Keys (package idempotency)
older than that: give the middleware's Config.Expiry, or longer. Without
it, the keys are left alone.`,
	examples: `inbox prune -sqlite inbox.db
inbox prune -postgres postgres://app@db/app -schema app -retention 336h -keys 24h`,
}

// keyPruneStore prunes the idempotency keys' table of a driver.
type keyPruneStore struct {
	s interface {
		KeyPrune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error)
	}
}

func (k keyPruneStore) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	return k.s.KeyPrune(ctx, p)
}

// countedPrune tells prog of each batch that the Pruner deletes.
type countedPrune struct {
	inbox.PruneStore
	prog *progress
}

func (c countedPrune) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	res, err := c.PruneStore.Prune(ctx, p)
	if err == nil {
		c.prog.add(res.Deleted)
	}
	return res, err
}

func pruneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pruneCommand.flagSet()
	var sf storeFlags
	sf.register(fs)
	retention := fs.Duration("retention", inbox.DefaultRetention, "delete rows older than this (at least 1h; 0 is the default, as in PrunerConfig.Retention)")
	keys := fs.Duration("keys", 0, "also delete idempotency keys older than this (at least 1h; 0 leaves them)")
	if err := parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *retention == 0 {
		*retention = inbox.DefaultRetention
	}
	if *retention < inbox.MinRetention {
		return usageError(fs, stderr, "-retention %v is shorter than the minimum %v", *retention, inbox.MinRetention)
	}
	if *keys != 0 && *keys < inbox.MinRetention {
		return usageError(fs, stderr, "-keys %v is shorter than the minimum %v", *keys, inbox.MinRetention)
	}
	d, err := sf.open(ctx, false, stderr)
	if err != nil {
		return err
	}
	defer d.close()
	if err := pruneTable(ctx, d, *retention, "row", stdout, stderr); err != nil {
		return err
	}
	if *keys == 0 {
		return nil
	}
	kp, ok := d.driver.(interface {
		KeyPrune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error)
	})
	if !ok {
		return fmt.Errorf("inbox prune: the store %T has no idempotency keys", d.driver)
	}
	return pruneTable(ctx, keyPruneStore{kp}, *keys, "idempotency key", stdout, stderr)
}

// pruneTable runs one Prune of an inbox.Pruner on s, and prints how many
// things it deleted.
func pruneTable(ctx context.Context, s inbox.PruneStore, retention time.Duration, thing string, stdout, stderr io.Writer) error {
	prog := newProgress(stderr, false, "pruned", thing, 0)
	p, err := inbox.NewPruner(countedPrune{s, prog}, &inbox.PrunerConfig{Retention: retention})
	if err != nil {
		return err
	}
	start := time.Now()
	n, err := p.Prune(ctx)
	prog.finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pruned %s in %v\n", plural(n, thing), time.Since(start).Round(time.Millisecond))
	return nil
}
