package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// A Write of more rows or bytes than one statement takes, and claims,
// failures and deletes of as many, go in chunks, in order.
func TestSQLiteOutboxBatches(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sqltest.OutboxBatches(t, db, d)
}

// SQLite cannot tell relays of new rows: OutboxListen says so with
// store.ErrNoNotifications, and the relay polls.
func TestSQLiteOutboxListen(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.OutboxListen(context.Background()); n != nil || !errors.Is(err, store.ErrNoNotifications) {
		t.Fatalf("OutboxListen: %v, %v; want no notifications and store.ErrNoNotifications", n, err)
	}
}

// A row marked published is never claimed again and holds back no later
// row of its key.
func TestSQLiteOutboxKept(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sqltest.OutboxKept(t, db, d)
}
