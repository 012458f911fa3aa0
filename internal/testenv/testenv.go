// Package testenv finds the services that tests run against. A missing
// service skips the test with a clear message, or fails it when
// INBOX_REQUIRE_SERVICES=1 (as in CI).
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Required reports whether INBOX_REQUIRE_SERVICES=1.
func Required() bool { return os.Getenv("INBOX_REQUIRE_SERVICES") == "1" }

// Unavailable skips tb, or fails it when services are required.
func Unavailable(tb testing.TB, service string, err error) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s is required (INBOX_REQUIRE_SERVICES=1) but unavailable: %v", service, err)
	}
	tb.Skipf("%s unavailable, skipping (set INBOX_REQUIRE_SERVICES=1 to fail instead): %v", service, err)
}

// PostgresRaiseDeadlock is a statement that fails with the SQLSTATE of a
// deadlock (40P01), as PostgreSQL reports one.
const PostgresRaiseDeadlock = `DO $$BEGIN RAISE EXCEPTION 'deadlock detected (raised by a test)' USING ERRCODE = 'deadlock_detected'; END$$`

// PostgresDSN returns INBOX_POSTGRES_DSN or the default local DSN.
func PostgresDSN() string {
	if dsn := os.Getenv("INBOX_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// PostgresPool returns a pool on PostgresDSN, closed when tb ends, with
// room for maxConns connections; it skips or fails tb when PostgreSQL does
// not answer.
func PostgresPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	return PostgresPoolNamed(tb, maxConns, "")
}

// PostgresPoolNamed is PostgresPool whose connections carry the
// application_name name (unless empty), by which PostgresLockWaits finds
// them.
func PostgresPoolNamed(tb testing.TB, maxConns int32, name string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresDSN())
	if err != nil {
		tb.Fatalf("INBOX_POSTGRES_DSN: %v", err)
	}
	cfg.MaxConns = maxConns
	if name != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = name
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
		Unavailable(tb, "PostgreSQL at "+cfg.ConnConfig.Host, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// MySQLDSN returns INBOX_MYSQL_DSN or the default local DSN
// (go-sql-driver/mysql's format).
func MySQLDSN() string {
	if dsn := os.Getenv("INBOX_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test"
}

// MySQLDatabase creates a fresh database on the MySQL or MariaDB server of
// MySQLDSN, dropped when tb ends, and returns MySQLDSN with that database
// in it; it skips or fails tb when the server does not answer.
func MySQLDatabase(tb testing.TB) string {
	tb.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		tb.Fatalf("INBOX_MYSQL_DSN: %v", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatalf("INBOX_MYSQL_DSN: %v", err)
	}
	admin := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		Unavailable(tb, "MySQL at "+cfg.Addr, err)
	}
	name := Name("inboxtest_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		tb.Fatalf("create database: %v", err)
	}
	tb.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// Name returns prefix followed by 12 random hex digits, for schemas and
// other per-test names.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NATSURL returns INBOX_NATS_URL or the default local server.
func NATSURL() string {
	if u := os.Getenv("INBOX_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// AMQPURL returns INBOX_AMQP_URL or the default local RabbitMQ.
func AMQPURL() string {
	if u := os.Getenv("INBOX_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// PostgresLockWaits counts the backends whose application_name is $1 that
// wait for a lock (a row's, another transaction's, an advisory one): the
// rows of pg_locks not granted. A backend waits for one lock at a time.
const PostgresLockWaits = `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.application_name = $1`

// PostgresLockTimeout reads the lock_timeout in effect, in milliseconds.
const PostgresLockTimeout = `SELECT (extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)::bigint`

// PostgresExpire inserts expired rows into the inbox table named table,
// for storetest's Env.Expire: $1 consumer, $2 ID prefix, $3 count, $4 age
// in microseconds. IDs and fingerprints are as long as real ones.
func PostgresExpire(table string) string {
	return `INSERT INTO ` + table + ` (consumer, message_id, received_at, message_type, fingerprint)
SELECT $1::bytea, convert_to($2::text || i, 'UTF8'),
	now() - ($4::bigint + $3::int - i) * interval '1 microsecond', 'bench', sha256(convert_to($2::text || i, 'UTF8'))
FROM generate_series(1, $3::int) i`
}
