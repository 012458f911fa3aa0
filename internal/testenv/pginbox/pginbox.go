// Package pginbox gives a test an inbox on PostgreSQL in a schema of its
// own, for the examples' handler tests (apart from pgenv, which package
// inbox's own tests import: this one imports package inbox).
package pginbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// New makes a fresh schema (pgenv.PoolInSchema), runs ddl in it (the
// program's own tables), migrates the inbox's tables there and returns an
// inbox for consumer, and the pool. It skips or fails tb as pgenv does.
func New(tb testing.TB, consumer, ddl string) (*inbox.Inbox[pgx.Tx], *pgxpool.Pool) {
	tb.Helper()
	ctx := context.Background()
	pool, _ := pgenv.PoolInSchema(tb, 4)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		tb.Fatal(err)
	}
	driver, err := pgxstore.New(pool, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := inbox.Migrate(ctx, driver); err != nil {
		tb.Fatal(err)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: consumer})
	if err != nil {
		tb.Fatal(err)
	}
	return ib, pool
}
