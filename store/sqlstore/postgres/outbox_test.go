package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
	"github.com/inboxkit/inbox/store/storetest"
)

// openMigrated opens a pool and a migrated driver on a fresh schema,
// with cfg's OutboxNotifyEvery.
func openMigrated(t *testing.T, cfg ...sqlstore.Config) (*sql.DB, *sqlstore.Driver) {
	t.Helper()
	pgenv.Pool(t, 1)
	db, err := sql.Open("pgx", pgenv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	schema := testenv.Name("outbox_")
	t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); db.Close() })
	c := sqlstore.Config{Dialect: postgres.Dialect, Tables: store.Tables{Schema: schema}}
	if len(cfg) > 0 {
		c.OutboxNotifyEvery = cfg[0].OutboxNotifyEvery
	}
	d, err := sqlstore.New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, d
}

// Many rows and bytes in one Write, and claims, failures and deletes of
// as many, through internal/pgsql's array statements.
func TestPostgresOutboxBatches(t *testing.T) {
	t.Parallel()
	db, d := openMigrated(t)
	sqltest.OutboxBatches(t, db, d)
}

// A listener's connection is closed at Close, not given back to the pool
// LISTENing; a Write wakes it.
func TestPostgresOutboxListenerConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, d := openMigrated(t)
	n, err := d.OutboxListen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(t, db, d, "w")
	if err := wait(n, 5*time.Second); err != nil {
		t.Fatalf("Wait after a committed Write: %v, want a notification", err)
	}
	open := db.Stats().OpenConnections
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if s := db.Stats(); s.OpenConnections != open-1 {
		t.Fatalf("after Close: %d open connections, want %d: the LISTENing one was pooled", s.OpenConnections, open-1)
	}
}

// Config.OutboxNotifyEvery: a write notifies unless another did less than
// that long ago; negative, none does.
func TestPostgresOutboxNotifyEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  []bool // whether each of the writes notifies
	}{
		{"hour", time.Hour, []bool{true, false}},
		{"never", -1, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, d := openMigrated(t, sqlstore.Config{OutboxNotifyEvery: tc.every})
			n, err := d.OutboxListen(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			for i, want := range tc.want {
				write(t, db, d, fmt.Sprintf("w-%d", i))
				timeout := 5 * time.Second
				if !want {
					timeout = 300 * time.Millisecond
				}
				if err := wait(n, timeout); (err == nil) != want {
					t.Fatalf("OutboxNotifyEvery %v, write %d: Wait returned %v; want a notification: %v", tc.every, i+1, err, want)
				}
			}
		})
	}
}

// Connections of a driver that wraps pgx's cannot listen: the error wraps
// ErrNotPgx and store.ErrNoNotifications, so that the relay polls.
func TestPostgresOutboxListenNotPgx(t *testing.T) {
	t.Parallel()
	openMigrated(t) // skips without PostgreSQL
	db := sql.OpenDB(wrapConnector{dsn: pgenv.DSN()})
	defer db.Close()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	n, err := d.OutboxListen(context.Background())
	if !errors.Is(err, postgres.ErrNotPgx) || !errors.Is(err, store.ErrNoNotifications) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("OutboxListen on wrapped connections: %v, want ErrNotPgx and store.ErrNoNotifications", err)
	}
}

// wrapConnector opens pgx stdlib connections wrapped in a type of its own,
// as a tracing or metrics driver does.
type wrapConnector struct{ dsn string }

type wrappedConn struct{ driver.Conn }

func (c wrapConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.Driver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return wrappedConn{conn}, nil
}

func (wrapConnector) Driver() driver.Driver { return stdlib.GetDefaultDriver() }

// write writes one outbox row with id in a transaction of its own.
func write(t *testing.T, db *sql.DB, d *sqlstore.Driver, id string) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.OutboxWrite(ctx, tx, []*store.OutboxRow{{ID: []byte(id), Destination: "d"}}); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to timeout for a notification.
func wait(n store.OutboxNotifications, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return n.Wait(ctx)
}

// A row marked published is never claimed again and holds back no later
// row of its key.
func TestPostgresOutboxKept(t *testing.T) {
	t.Parallel()
	db, d := openMigrated(t)
	sqltest.OutboxKept(t, db, d)
}

// A relay on a pool of one connection (SetMaxOpenConns(1)), which the
// application's writes share, publishes and lets the writes through:
// LISTEN would hold the only connection.
func TestPostgresOutboxRelayPoolOfOne(t *testing.T) {
	t.Parallel()
	db, d := openMigrated(t)
	db.SetMaxOpenConns(1)
	storetest.OutboxPoolOfOne(t, d)
}
