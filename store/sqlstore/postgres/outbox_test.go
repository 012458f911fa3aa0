package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
)

// openMigrated opens a pool and a migrated driver on a fresh schema.
func openMigrated(t *testing.T) (*sql.DB, *sqlstore.Driver) {
	t.Helper()
	pgenv.Pool(t, 1)
	db, err := sql.Open("pgx", pgenv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	schema := testenv.Name("outbox_")
	t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); db.Close() })
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect, Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, d
}

// Many rows and bytes in one Write, and claims, failures and deletes of
// as many, through internal/pgsql's array statements.
func TestPostgresOutboxBatches(t *testing.T) {
	t.Parallel()
	db, d := openMigrated(t)
	sqltest.OutboxBatches(t, db, d)
}

// A listener's connection is closed at Close, not given back to the pool
// LISTENing; a Write wakes it.
func TestPostgresOutboxListenerConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, d := openMigrated(t)
	l, ok := d.Relayer().(store.OutboxListener)
	if !ok {
		t.Fatalf("Relayer() is %T, want a store.OutboxListener on PostgreSQL", d.Relayer())
	}
	n, err := l.OutboxListen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.OutboxWrite(ctx, tx, []*store.OutboxRow{{ID: []byte("w"), Destination: "d"}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.Wait(wctx); err != nil {
		t.Fatalf("Wait after a committed Write: %v, want a notification", err)
	}
	open := db.Stats().OpenConnections
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if s := db.Stats(); s.OpenConnections != open-1 {
		t.Fatalf("after Close: %d open connections, want %d: the LISTENing one was pooled", s.OpenConnections, open-1)
	}
}
