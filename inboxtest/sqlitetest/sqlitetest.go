// Package sqlitetest gives a test an inbox on a fresh SQLite file, with the
// inbox's tables migrated.
//
// It is for handlers tested with package inboxtest without a database
// server. It links SQLite, modernc.org/sqlite in pure Go. Package inboxtest
// itself imports no database driver. A program on PostgreSQL that tests with
// inboxtest thus downloads none. On PostgreSQL, package
// [github.com/inboxkit/inbox/inboxtest/pgtest] gives each test a schema.
package sqlitetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// DefaultConsumer is the consumer name New gives an inbox whose Config
// names none.
const DefaultConsumer = "inboxtest"

// New opens a SQLite database in a file of tb.TempDir(), migrates the
// inbox's tables in it, and returns an inbox on it with cfg. It also returns
// the database, on which the test creates its own tables. The database is
// closed when tb ends. New fails tb on error.
//
// A nil cfg means the defaults. Without a consumer name, the inbox gets
// [DefaultConsumer]. The Logger of cfg is the store's too.
func New(tb testing.TB, cfg *inbox.Config) (*inbox.Inbox[*sql.Tx], *sql.DB) {
	tb.Helper()
	db, err := sqlite.Open(filepath.Join(tb.TempDir(), "inbox.db"), nil)
	if err != nil {
		tb.Fatalf("sqlitetest: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	var c inbox.Config
	if cfg != nil {
		c = *cfg
	}
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Logger: c.Logger})
	if err != nil {
		tb.Fatalf("sqlitetest: %v", err)
	}
	ctx := context.Background()
	if err := inbox.Migrate(ctx, d); err != nil {
		tb.Fatalf("sqlitetest: migrate: %v", err)
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	ib, err := inbox.New(ctx, d, &c)
	if err != nil {
		tb.Fatalf("sqlitetest: %v", err)
	}
	return ib, db
}
