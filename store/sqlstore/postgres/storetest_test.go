package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"slices"
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
var (
	postgresHarness = storetest.Harness[*sql.Tx]{Open: storetest.SuiteOpen(postgresOpen)}
	postgresBench   = storetest.BenchHarness[*sql.Tx]{Open: postgresOpen}
)

func postgresOpen(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
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

		InsertMany: "INSERT INTO " + ledger + " (key) SELECT unnest($1::text[])",
	})
	handBatch := `WITH ins AS (
	INSERT INTO ` + inboxTable + ` (consumer, message_id) SELECT $1, id FROM unnest($2::bytea[]) AS t(id)
	ON CONFLICT DO NOTHING RETURNING message_id)
INSERT INTO ` + ledger + ` (key) SELECT convert_from(message_id, 'UTF8') FROM ins`
	// The raw batched SQL, as store/pgxstore's harness has it: one
	// statement claims and writes.
	env.HandBatch = func(ctx context.Context, consumer string, ids []string) error {
		bids := make([][]byte, len(ids))
		for i, id := range ids {
			bids[i] = []byte(id)
		}
		slices.SortFunc(bids, bytes.Compare)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, handBatch, []byte(consumer), bids); err != nil {
			return err
		}
		return tx.Commit()
	}
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
}

func TestPostgresStore(t *testing.T) { storetest.Run(t, postgresHarness) }

func BenchmarkPostgresStore(b *testing.B) { storetest.Bench(b, postgresBench) }
func BenchmarkPostgresPrune(b *testing.B) { storetest.BenchPrune(b, postgresBench) }
func BenchmarkPostgresBatch(b *testing.B) { storetest.BenchBatch(b, postgresBench) }

func TestPostgresBatchTxEnded(t *testing.T) {
	sqltest.BatchTxEnded(t, postgresHarness, "ROLLBACK", "SELECT * FROM inbox_no_such_table")
}

func TestPostgresClaimBatch(t *testing.T) { sqltest.ClaimBatch(t, postgresHarness) }

func TestPostgresProcessTxHandlerEndsTx(t *testing.T) {
	t.Parallel()
	sqltest.ProcessTxHandlerEndsTx(t, postgresHarness)
}
