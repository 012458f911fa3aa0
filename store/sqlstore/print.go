package sqlstore

import (
	"fmt"

	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
)

// Migrations returns the SQL of the dialect's migrations for tables t,
// without a database, for teams that apply SQL themselves.
func Migrations(dialect Dialect, t store.Tables) ([]store.Migration, error) {
	d := dialect.d
	if d == nil {
		return nil, fmt.Errorf("%w: a Dialect is required (sqlstore.SQLite)", ErrInvalidConfig)
	}
	if err := checkTables(d, t); err != nil {
		return nil, err
	}
	fsys, dir := d.migrations()
	return migrate.Load(fsys, dir, t, d.quote)
}

// checkTables checks t's names and that d can use them.
func checkTables(d dialect, t store.Tables) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := d.checkTables(t); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
