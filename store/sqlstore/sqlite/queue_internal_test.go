package sqlite

import (
	"context"
	"database/sql/driver"
	"path/filepath"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"
)

// A connection closed while it holds the write slot (database/sql closes
// one it discards, in a transaction or not) gives the slot back.
func TestQueuedConnCloseGivesTheSlotBack(t *testing.T) {
	t.Parallel()
	dsn, err := sqliteDSN(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	base, err := msqlite.NewConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := newWriteQueue(time.Second)
	ctx := t.Context()
	conn, err := queuedConnector{Connector: base, q: q}.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := conn.(*queuedConn)
	if _, err := c.BeginTx(ctx, driver.TxOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := q.take(short, q.wait); err != nil {
		t.Fatalf("taking the slot after its holder's connection closed: %v; want it free", err)
	}
}
