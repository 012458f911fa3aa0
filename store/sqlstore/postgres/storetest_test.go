package postgres_test

import (
	"context"
	"database/sql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
	"github.com/inboxkit/inbox/store/storetest"
)

// postgresHarness opens a fresh schema per test, on database/sql with
// pgx's stdlib driver.
var postgresHarness = storetest.Harness[*sql.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.Env[*sql.Tx], error) {
	tb.Helper()
	pgenv.Pool(tb, 1) // skips or fails when PostgreSQL is down
	cfg, err := pgx.ParseConfig(pgenv.DSN())
	if err != nil {
		tb.Fatal(err)
	}
	schema := testenv.Name("inboxsql_")
	cfg.RuntimeParams["application_name"] = schema // LockWaits finds the connections by it
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(20)
	tb.Cleanup(func() { _ = db.Close() })
	ledger := schema + ".ledger"
	if _, err := db.Exec("CREATE SCHEMA " + schema + "; CREATE TABLE " + ledger + " (key text NOT NULL)"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE") })
	if tables.Schema == "" {
		tables.Schema = schema
	}
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect, Tables: tables})
	if err != nil {
		return nil, err
	}
	inboxTable := tables.Name("inbox", store.QuoteDouble)
	env := sqltest.LedgerEnv(db, d, tables, sqltest.LedgerSQL{
		Insert:   "INSERT INTO " + ledger + " (key) VALUES ($1)",
		Count:    "SELECT count(*) FROM " + ledger + " WHERE key = $1",
		Backdate: "UPDATE " + inboxTable + " SET received_at = now() - $1::bigint * interval '1 millisecond' WHERE consumer = $2 AND message_id = $3",
		Age:      func(d time.Duration) any { return d.Milliseconds() },
	})
	env.MaxConns = 20
	env.Transient = func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, pgenv.RaiseDeadlock)
		return err
	}
	env.LockWaits = func(ctx context.Context) (n int, err error) {
		err = db.QueryRowContext(ctx, pgenv.LockWaits, schema).Scan(&n)
		return n, err
	}
	env.LockTimeout = func(ctx context.Context, tx *sql.Tx) (time.Duration, error) {
		var ms int64
		err := tx.QueryRowContext(ctx, pgenv.LockTimeout).Scan(&ms)
		return time.Duration(ms) * time.Millisecond, err
	}
	env.Expire = func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error {
		_, err := db.ExecContext(ctx, pgenv.Expire(inboxTable), []byte(consumer), prefix, n, age.Microseconds())
		return err
	}
	env.Settle = func(ctx context.Context) error {
		for _, stmt := range []string{"VACUUM (ANALYZE) " + ledger + ", " + inboxTable, "CHECKPOINT"} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}
	return env, nil
}}

func TestPostgresStore(t *testing.T) { storetest.Run(t, postgresHarness) }

func BenchmarkPostgresStore(b *testing.B) { storetest.Bench(b, postgresHarness) }
func BenchmarkPostgresPrune(b *testing.B) { storetest.BenchPrune(b, postgresHarness) }
