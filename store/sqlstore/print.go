package sqlstore

import (
	"errors"

	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
)

// Migrations returns the SQL of the dialect's migrations for tables t,
// without a database, for teams that apply SQL themselves.
func Migrations(dialect Dialect, t store.Tables) ([]store.Migration, error) {
	d := dialect.d
	if d == nil {
		return nil, errors.New("sqlstore: a Dialect is required (sqlstore.SQLite)")
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := d.checkTables(t); err != nil {
		return nil, err
	}
	fsys, dir := d.migrations()
	return migrate.Load(fsys, dir, t, d.quote)
}
