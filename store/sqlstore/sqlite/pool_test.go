package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// TestOpenKeepsIdleConns: Open's pool keeps the connections of a burst
// (sqlstore.DefaultMaxIdleConns), where database/sql would close all but 2.
func TestOpenKeepsIdleConns(t *testing.T) {
	t.Parallel()
	sqltest.IdleConns(t, func(t *testing.T, idle int) (*sql.DB, error) {
		return sqlite.Open(filepath.Join(t.TempDir(), "idle.db"), &sqlite.Options{MaxIdleConns: idle})
	})
}
