package mysql_test

import (
	"context"
	"errors"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// A Write of more rows or bytes than one statement takes, and claims,
// failures and deletes of as many, go in chunks, in order; with
// interpolateParams the escaped payload still fits the packet.
func TestMySQLOutboxBatches(t *testing.T) {
	t.Parallel()
	for _, params := range []string{"", "interpolateParams=true"} {
		t.Run("params="+params, func(t *testing.T) {
			t.Parallel()
			db := openMySQL(t, params)
			d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			sqltest.OutboxBatches(t, db, d)
		})
	}
}

// A row larger than max_allowed_packet is refused with store.ErrTooLarge
// before it is sent (the server would drop the connection, which looks
// transient), and the transaction stays usable.
func TestMySQLOutboxTooLarge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMySQL(t, "")
	var limit int
	if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		t.Fatal(err)
	}
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	big := []*store.OutboxRow{{ID: []byte("big"), Destination: "d", Payload: make([]byte, limit+1)}}
	if _, err := d.OutboxWrite(ctx, tx, big); !errors.Is(err, store.ErrTooLarge) || d.Retryable(err) {
		t.Fatalf("OutboxWrite of %d bytes: %v, want store.ErrTooLarge, not retryable", limit+1, err)
	}
	if n, err := d.OutboxWrite(ctx, tx, []*store.OutboxRow{{ID: []byte("small"), Destination: "d"}}); err != nil || n != 1 {
		t.Fatalf("OutboxWrite after the refusal: %d, %v; want 1 row in the same transaction", n, err)
	}
}

// MySQL cannot tell relays of new rows: OutboxListen says so with
// store.ErrNoNotifications, and the relay polls.
func TestMySQLOutboxListen(t *testing.T) {
	t.Parallel()
	d, err := sqlstore.New(openMySQL(t, ""), &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.OutboxListen(context.Background()); n != nil || !errors.Is(err, store.ErrNoNotifications) {
		t.Fatalf("OutboxListen: %v, %v; want no notifications and store.ErrNoNotifications", n, err)
	}
}

// A row marked published is never claimed again and holds back no later
// row of its key.
func TestMySQLOutboxKept(t *testing.T) {
	t.Parallel()
	db := openMySQL(t, "")
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sqltest.OutboxKept(t, db, d)
}
