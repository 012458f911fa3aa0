package sqlstore_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// Every configuration the package refuses wraps sqlstore.ErrInvalidConfig,
// and is refused before any connection.
func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	db, err := sqlstore.OpenSQLite(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	newDriver := func(db *sql.DB, cfg *sqlstore.Config) func() error {
		return func() error { _, err := sqlstore.New(db, cfg); return err }
	}
	openMySQL := func(dsn string, opts *sqlstore.MySQLOptions) func() error {
		return func() error {
			db, err := sqlstore.OpenMySQL(dsn, opts)
			if db != nil {
				_ = db.Close()
			}
			return err
		}
	}
	tests := []struct {
		name string
		call func() error
		also error // a second sentinel the error wraps, if any
	}{
		{"nil config", newDriver(db, nil), nil},
		{"no dialect", newDriver(db, &sqlstore.Config{}), nil},
		{"nil db", newDriver(nil, &sqlstore.Config{Dialect: sqlstore.SQLite}), nil},
		{"hostile prefix", newDriver(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Tables: store.Tables{Prefix: "x; DROP"}}), store.ErrInvalidTables},
		{"schema on SQLite", newDriver(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Tables: store.Tables{Schema: "s"}}), store.ErrInvalidTables},
		{"Migrations without a dialect", func() error { _, err := sqlstore.Migrations(sqlstore.Dialect{}, store.Tables{}); return err }, nil},
		{"Migrations with a hostile prefix", func() error {
			_, err := sqlstore.Migrations(sqlstore.MySQL, store.Tables{Prefix: "`"})
			return err
		}, store.ErrInvalidTables},
		{"OpenSQLite empty path", func() error { _, err := sqlstore.OpenSQLite("", nil); return err }, nil},
		{"OpenMySQL bad DSN", openMySQL("not a dsn", nil), nil},
		{"OpenMySQL clientFoundRows", openMySQL("root@tcp(127.0.0.1:1)/test?clientFoundRows=true", nil), sqlstore.ErrClientFoundRows},
		{"OpenMySQL negative LockTimeout", openMySQL("root@tcp(127.0.0.1:1)/test", &sqlstore.MySQLOptions{LockTimeout: -1}), nil},
		{"OpenMySQL innodb_lock_wait_timeout not seconds", openMySQL("root@tcp(127.0.0.1:1)/test?innodb_lock_wait_timeout=1.5", nil), nil},
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
