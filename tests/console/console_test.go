// Package console runs the web console's suite on SQLite, whose module
// the root module, where the console lives, cannot import.
package console

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox/internal/consoletest"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

func TestSQLite(t *testing.T) {
	t.Parallel()
	consoletest.Run(t, func(t *testing.T) store.Driver[*sql.Tx] {
		db, err := sqlite.Open(filepath.Join(t.TempDir(), "console.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return d
	})
}
