// Package pgenv finds the PostgreSQL that tests run against (package
// testenv's rules: skip without it, fail when INBOX_REQUIRE_SERVICES=1).
// Apart from testenv, so that tests of packages without PostgreSQL do not
// import pgx.
package pgenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/internal/testenv"
)

// RaiseDeadlock is a statement that fails with the SQLSTATE of a
// deadlock (40P01), as PostgreSQL reports one.
const RaiseDeadlock = `DO $$BEGIN RAISE EXCEPTION 'deadlock detected (raised by a test)' USING ERRCODE = 'deadlock_detected'; END$$`

// DSN returns INBOX_POSTGRES_DSN or the default local DSN.
func DSN() string {
	if dsn := os.Getenv("INBOX_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Pool returns a pool on DSN, closed when tb ends, with
// room for maxConns connections; it skips or fails tb when PostgreSQL does
// not answer.
func Pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return PoolNamed(tb, maxConns, "")
}

// PoolNamed is Pool whose connections carry the
// application_name name (unless empty), by which LockWaits finds
// them.
func PoolNamed(tb testing.TB, maxConns int32, name string) *pgxpool.Pool {
	tb.Helper()
	params := map[string]string{}
	if name != "" {
		params["application_name"] = name
	}
	return pool(tb, maxConns, params)
}

// PoolInSchema makes a fresh schema, dropped when tb ends, and returns a
// pool whose connections have it as their search_path, so that a
// program's unqualified tables (and the inbox's, with no
// store.Tables.Schema) are created in it; and the schema's name.
func PoolInSchema(tb testing.TB, maxConns int32) (*pgxpool.Pool, string) {
	tb.Helper()
	admin := Pool(tb, 1)
	schema := testenv.Name("inboxtest_")
	if _, err := admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	return pool(tb, maxConns, map[string]string{"search_path": schema}), schema
}

func pool(tb testing.TB, maxConns int32, params map[string]string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(DSN())
	if err != nil {
		tb.Fatalf("INBOX_POSTGRES_DSN: %v", err)
	}
	cfg.MaxConns = maxConns
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		testenv.Unavailable(tb, "PostgreSQL at "+cfg.ConnConfig.Host, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// LockWaits counts the backends whose application_name is $1 that
// wait for a lock (a row's, another transaction's, an advisory one): the
// rows of pg_locks not granted. A backend waits for one lock at a time.
const LockWaits = `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.application_name = $1`

// LockTimeout reads the lock_timeout in effect, in milliseconds.
const LockTimeout = `SELECT (extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)::bigint`

// Expire inserts expired rows into the inbox table named table,
// for storetest's Env.Expire: $1 consumer, $2 ID prefix, $3 count, $4 age
// in microseconds. IDs and fingerprints are as long as real ones.
func Expire(table string) string {
	return `INSERT INTO ` + table + ` (consumer, message_id, received_at, message_type, fingerprint)
SELECT $1::bytea, convert_to($2::text || i, 'UTF8'),
	now() - ($4::bigint + $3::int - i) * interval '1 microsecond', 'bench', sha256(convert_to($2::text || i, 'UTF8'))
FROM generate_series(1, $3::int) i`
}
