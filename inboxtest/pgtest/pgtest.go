// Package pgtest gives a test an inbox on PostgreSQL, in a fresh schema of
// its own.
//
// Each test gets a new schema with the inbox's tables migrated in it. The
// schema is dropped when the test ends. Tests thus run in parallel on one
// database, as River's riverdbtest.TestSchema lets them.
//
// It is for handlers tested with
// [github.com/inboxkit/inbox/inboxtest.Check] on PostgreSQL. It links pgx.
// Package inboxtest itself imports no database driver. A program that does
// not import pgtest thus links no pgx.
//
// The server is the one INBOX_POSTGRES_DSN names, or by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. Without it, a
// test skips with a message saying so. With INBOX_REQUIRE_SERVICES=1 it
// fails instead, as in CI.
package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// DefaultConsumer is the consumer name New gives an inbox whose Config
// names none.
const DefaultConsumer = "inboxtest"

// maxConns is the size of the pools: two concurrent deliveries of
// inboxtest.Check and the test's own queries fit.
const maxConns = 8

// Schema makes a fresh schema and migrates the inbox's tables in it. It
// returns a pool of 8 connections whose search_path is the schema, and the
// schema's name. The test's own unqualified tables thus go there too. The
// schema is dropped and the pool closed when tb ends.
//
// Schema skips tb when PostgreSQL does not answer, or fails it with
// INBOX_REQUIRE_SERVICES=1. It fails tb on any other error.
func Schema(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	pool, schema := pgenv.PoolInSchema(tb, maxConns)
	d, err := pgxstore.New(pool, nil)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if err := inbox.Migrate(context.Background(), d); err != nil {
		tb.Fatalf("pgtest: migrate: %v", err)
	}
	return pool, schema
}

// New makes a schema as [Schema] does and returns an inbox in it with cfg.
// It also returns the pool, on which the test creates its own tables. New
// fails tb on error.
//
// A nil cfg means the defaults. Without a consumer name, the inbox gets
// [DefaultConsumer].
func New(tb testing.TB, cfg *inbox.Config) (*inbox.Inbox[pgx.Tx], *pgxpool.Pool) {
	tb.Helper()
	pool, _ := Schema(tb)
	d, err := pgxstore.New(pool, nil)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	var c inbox.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	ib, err := inbox.New(context.Background(), d, &c)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return ib, pool
}
