package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// Every configuration the package refuses wraps sqlstore.ErrInvalidConfig,
// and is refused before any connection.
func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	newDriver := func(db *sql.DB, cfg *sqlstore.Config) func() error {
		return func() error { _, err := sqlstore.New(db, cfg); return err }
	}

	tests := []struct {
		name string
		call func() error
		also error // a second sentinel the error wraps, if any
	}{
		{"nil config", newDriver(db, nil), nil},
		{"no dialect", newDriver(db, &sqlstore.Config{}), nil},
		{"nil db", newDriver(nil, &sqlstore.Config{Dialect: sqlite.Dialect}), nil},
		{"hostile prefix", newDriver(db, &sqlstore.Config{Dialect: sqlite.Dialect, Tables: store.Tables{Prefix: "x; DROP"}}), store.ErrInvalidTables},
		{"schema on SQLite", newDriver(db, &sqlstore.Config{Dialect: sqlite.Dialect, Tables: store.Tables{Schema: "s"}}), store.ErrInvalidTables},
		{"Migrations without a dialect", func() error { _, err := sqlstore.Migrations(sqlstore.Dialect{}, store.Tables{}); return err }, nil},
		{"Migrations with a hostile prefix", func() error {
			_, err := sqlstore.Migrations(sqlite.Dialect, store.Tables{Prefix: "`"})
			return err
		}, store.ErrInvalidTables},
		{"OpenSQLite empty path", func() error { _, err := sqlite.Open("", nil); return err }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			if !errors.Is(err, sqlstore.ErrInvalidConfig) || tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("err = %v, want sqlstore.ErrInvalidConfig (and %v)", err, tc.also)
			}
		})
	}
}
