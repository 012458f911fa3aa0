// Package sqltest is the storetest environment every dialect of sqlstore
// shares: a ledger table for the handlers' writes, on a *sql.DB.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/storetest"
)

// LedgerSQL are a dialect's statements of the suite's environment: insert
// and count take the ledger key; backdate sets an inbox row's received_at
// to the database clock minus the age, which age converts; its arguments
// are the age, the consumer and the message ID.
type LedgerSQL struct {
	Insert, Count, Backdate string
	Age                     func(time.Duration) any
}

// LedgerEnv is the suite's environment on db and d, on tables.
func LedgerEnv(db *sql.DB, d *sqlstore.Driver, tables store.Tables, q LedgerSQL) *storetest.Env[*sql.Tx] {
	return &storetest.Env[*sql.Tx]{
		Tables: tables,
		Exec: func(ctx context.Context, tx *sql.Tx, query string) error {
			_, err := tx.ExecContext(ctx, query)
			return err
		},
		LeaveRowsOpen: func(ctx context.Context, tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3")
			if err == nil {
				rows.Next()
			}
			return err
		},
		Driver: d,
		Write: func(ctx context.Context, tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, q.Insert, key)
			return err
		},
		Count: func(ctx context.Context, key string) (n int, err error) {
			err = db.QueryRowContext(ctx, q.Count, key).Scan(&n)
			return n, err
		},
		Backdate: func(ctx context.Context, k store.Key, age time.Duration) error {
			res, err := db.ExecContext(ctx, q.Backdate, q.Age(age), k.Consumer, k.MessageID)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("backdate: %d rows", n)
			}
			return nil
		},
		BeginPlain: func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
	}
}
