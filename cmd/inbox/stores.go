package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// storeFlags select a database and the inbox's table names.
type storeFlags struct {
	postgres, mysql, sqlite, schema, prefix string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.postgres, "postgres", "", "PostgreSQL DSN, e.g. postgres://postgres@127.0.0.1:5432/test")
	fs.StringVar(&s.mysql, "mysql", "", "MySQL/MariaDB DSN (go-sql-driver/mysql format), e.g. root@tcp(127.0.0.1:3306)/test")
	fs.StringVar(&s.sqlite, "sqlite", "", "SQLite database file")
	fs.StringVar(&s.schema, "schema", "", "schema of the tables (PostgreSQL; MySQL: database)")
	fs.StringVar(&s.prefix, "prefix", "", "prefix of the table names")
}

// driver is what the commands use of a store.
type driver interface {
	inbox.PruneStore
	Migrate(ctx context.Context) error
	Migrations() []store.Migration
}

// open opens the selected store; close releases it.
func (s *storeFlags) open(ctx context.Context) (d driver, close func(), err error) {
	tables := store.Tables{Schema: s.schema, Prefix: s.prefix}
	given := 0
	for _, v := range []string{s.postgres, s.mysql, s.sqlite} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, nil, errors.New("give one of -postgres, -mysql and -sqlite")
	case s.mysql != "":
		db, err := sqlstore.OpenMySQL(s.mysql, nil)
		if err != nil {
			return nil, nil, err
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Tables: tables})
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return d, func() { db.Close() }, nil
	case s.postgres != "":
		pool, err := pgxpool.New(ctx, s.postgres)
		if err != nil {
			return nil, nil, err
		}
		d, err := pgxstore.New(pool, &pgxstore.Config{Tables: tables})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return d, pool.Close, nil
	case s.sqlite != "":
		db, err := sqlstore.OpenSQLite(s.sqlite, nil)
		if err != nil {
			return nil, nil, err
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Tables: tables})
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return d, func() { db.Close() }, nil
	}
	return nil, nil, errors.New("give -postgres DSN, -mysql DSN or -sqlite FILE")
}

func migrateCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(out)
	var sf storeFlags
	sf.register(fs)
	print := fs.Bool("print", false, "print the SQL instead of applying it (with -dialect)")
	dialect := fs.String("dialect", "", "with -print: postgres, mysql or sqlite")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *print {
		return printMigrations(*dialect, store.Tables{Schema: sf.schema, Prefix: sf.prefix}, out)
	}
	d, closeFn, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := d.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "migrated: %d migrations\n", len(d.Migrations()))
	return nil
}

// printMigrations prints the SQL without connecting to any database.
func printMigrations(dialect string, tables store.Tables, out io.Writer) error {
	var ms []store.Migration
	var err error
	switch dialect {
	case "postgres":
		ms, err = pgxstore.Migrations(tables)
	case "mysql":
		ms, err = sqlstore.Migrations(sqlstore.MySQL, tables)
	case "sqlite":
		ms, err = sqlstore.Migrations(sqlstore.SQLite, tables)
	default:
		return fmt.Errorf("-dialect must be postgres, mysql or sqlite, not %q", dialect)
	}
	if err != nil {
		return err
	}
	for _, m := range ms {
		fmt.Fprintf(out, "-- migration %d: %s\n%s\n", m.Version, m.Name, m.SQL)
	}
	fmt.Fprintln(out, "-- The migrations table records applied versions: see Driver.Migrate.")
	return nil
}

func pruneCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(out)
	var sf storeFlags
	sf.register(fs)
	retention := fs.Duration("retention", inbox.DefaultRetention, "delete rows older than this (at least 1h)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, closeFn, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	p, err := inbox.NewPruner(d, &inbox.PrunerConfig{Retention: *retention})
	if err != nil {
		return err
	}
	start := time.Now()
	n, err := p.Prune(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pruned %d rows in %v\n", n, time.Since(start).Round(time.Millisecond))
	return nil
}
