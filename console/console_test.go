package console_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inbox/internal/consoletest"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
)

// The suite runs on SQLite in tests/console: this module cannot import
// the SQLite module.

func TestPgx(t *testing.T) {
	t.Parallel()
	consoletest.Run(t, func(t *testing.T) store.Driver[pgx.Tx] {
		pool, schema := pgenv.PoolInSchema(t, 8)
		d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestPostgresSQL(t *testing.T) {
	t.Parallel()
	consoletest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] {
		admin := pgenv.Pool(t, 1) // skips without PostgreSQL
		schema := testenv.Name("console_")
		if _, err := admin.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(t.Context(), "DROP SCHEMA "+schema+" CASCADE") })
		cfg, err := pgx.ParseConfig(pgenv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = db.Close() })
		return migrated(t, db, postgres.Dialect, schema)
	})
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	consoletest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] {
		db, err := mysql.Open(mysqlenv.Database(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return migrated(t, db, mysql.Dialect, "")
	})
}

func migrated(t *testing.T, db *sql.DB, dialect sqlstore.Dialect, schema string) *sqlstore.Driver {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect, Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return d
}
