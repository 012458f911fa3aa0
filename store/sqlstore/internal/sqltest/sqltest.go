// Package sqltest is the storetest environment every dialect of sqlstore
// shares: a ledger table for the handlers' writes, on a *sql.DB.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
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

// IdleConns checks that a pool opened by open with MaxIdleConns idle keeps
// the connections of a burst of 8 (sqlstore.DefaultMaxIdleConns for 0),
// where database/sql would close all but 2; negative keeps none.
func IdleConns(t *testing.T, open func(t *testing.T, idle int) (*sql.DB, error)) {
	const burst = 8
	for _, tc := range []struct {
		name     string
		idle     int // the option
		wantIdle int
	}{
		{"default", 0, burst},
		{"3", 3, 3},
		{"none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := open(t, tc.idle)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			before := db.Stats().MaxIdleClosed // Open's ping
			conns := make([]*sql.Conn, burst)
			for i := range conns {
				if conns[i], err = db.Conn(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range conns {
				_ = c.Close()
			}
			if s := db.Stats(); s.Idle != tc.wantIdle || s.MaxIdleClosed-before != int64(burst-tc.wantIdle) {
				t.Fatalf("after a burst of %d connections: %d idle, %d closed; want %d idle, %d closed",
					burst, s.Idle, s.MaxIdleClosed-before, tc.wantIdle, burst-tc.wantIdle)
			}
		})
	}
}
