package mysql_test

import (
	"errors"
	"testing"

	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// Every DSN or option Open refuses wraps sqlstore.ErrInvalidConfig, and is
// refused before any connection.
func TestOpenRejects(t *testing.T) {
	t.Parallel()
	openMySQL := func(dsn string, opts *mysql.Options) func() error {
		return func() error {
			db, err := mysql.Open(dsn, opts)
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
		{"Open: bad DSN", openMySQL("not a dsn", nil), nil},
		{"Open: clientFoundRows", openMySQL("root@tcp(127.0.0.1:1)/test?clientFoundRows=true", nil), sqlstore.ErrClientFoundRows},
		{"Open: negative LockTimeout", openMySQL("root@tcp(127.0.0.1:1)/test", &mysql.Options{LockTimeout: -1}), nil},
		{"Open: innodb_lock_wait_timeout not seconds", openMySQL("root@tcp(127.0.0.1:1)/test?innodb_lock_wait_timeout=1.5", nil), nil},
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
