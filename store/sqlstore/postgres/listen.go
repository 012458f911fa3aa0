package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

// ErrNotPgx is wrapped by the error of sqlstore.Driver's OutboxListen when
// the pool's connections are not those of pgx's stdlib driver, as with a
// wrapping driver. It wraps store.ErrNoNotifications, and the relay then
// polls.
var ErrNotPgx = fmt.Errorf("sqlstore: listening for new outbox rows needs the connections of pgx's stdlib driver: %w", store.ErrNoNotifications)

// OutboxListen LISTENs on the channel of tables t's outbox on a connection
// of db that it holds until Close. database/sql knows nothing of
// notifications: Wait reaches pgx's connection under it with sql.Conn.Raw.
func (postgresDialect) OutboxListen(ctx context.Context, db *sql.DB, t store.Tables) (store.OutboxNotifications, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	l := &listener{conn: conn}
	listen := "LISTEN " + pgx.Identifier{pgsql.OutboxChannel(t)}.Sanitize()
	err = l.raw(func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, listen)
		return err
	})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

type listener struct{ conn *sql.Conn }

// raw runs f on the pgx connection under l.conn.
func (l *listener) raw(f func(c *pgx.Conn) error) error {
	return l.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("%w (they are %T)", ErrNotPgx, dc)
		}
		return f(c.Conn())
	})
}

func (l *listener) Wait(ctx context.Context) error {
	err := l.raw(func(c *pgx.Conn) error {
		_, err := c.WaitForNotification(ctx)
		return err
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return pgsql.Classify(err)
}

// Close closes the connection rather than giving it back LISTENing: a
// pooled connection would keep receiving notifications nobody reads.
func (l *listener) Close() error {
	_ = l.conn.Raw(func(any) error { return driver.ErrBadConn }) // database/sql then closes it
	if err := l.conn.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return err
	}
	return nil
}
