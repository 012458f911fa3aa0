package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

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
