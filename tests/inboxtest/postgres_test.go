package inboxtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/inboxtest/pgtest"
)

// On PostgreSQL, a handler that writes through a second connection (the
// pool) instead of its tx fails Check at the crash before COMMIT; the
// same write through tx passes.
func TestCheckPostgresSecondConnection(t *testing.T) {
	t.Parallel()
	const insert = `INSERT INTO ledger (id) VALUES ($1)`
	tests := []struct {
		name    string
		handler func(pool *pgxpool.Pool) inbox.Handler[pgx.Tx]
		fails   bool
	}{
		{"through tx", func(*pgxpool.Pool) inbox.Handler[pgx.Tx] {
			return func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
				_, err := tx.Exec(ctx, insert, m.ID)
				return err
			}
		}, false},
		{"through the pool", func(pool *pgxpool.Pool) inbox.Handler[pgx.Tx] {
			return func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
				_, err := pool.Exec(ctx, insert, m.ID)
				return err
			}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ib, pool := pgtest.New(t, &inbox.Config{Consumer: "kit"})
			if _, err := pool.Exec(ctx, `CREATE TABLE ledger (id text NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			rows := func(ctx context.Context) (any, error) {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n)
				return n, err
			}
			rec := &recorder{}
			passed := inboxtest.Check(ctx, rec, ib, tc.handler(pool), messages(2), &inboxtest.Options{State: rows})
			switch {
			case !tc.fails && !passed:
				t.Fatalf("Check failed a handler that writes through tx: %q", rec.errors)
			case tc.fails && (passed || !rec.reported(`message "m-0"`, "crash before COMMIT", "from 0 to 1", "writes outside the transaction")):
				t.Fatalf("Check returned %v and reported %q; want it to fail at m-0's crash before COMMIT", passed, rec.errors)
			}
			t.Logf("reported: %q", rec.errors)
		})
	}
}
