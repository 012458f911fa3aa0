// Package sqltest is the storetest environment every dialect of sqlstore
// shares: a ledger table for the handlers' writes, on a *sql.DB.
package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/inboxkit/inbox"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
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
		// Relayer: the PostgreSQL driver that listens for new outbox rows.
		Driver: d.Relayer().(store.Driver[*sql.Tx]),
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

// PruneRetentionMS and PruneLimit are the arguments the prune plan tests
// explain the statements with: 1 h and a batch of 100, on 2000 young rows
// (inserted first) and 3000 expired ones.
const PruneRetentionMS, PruneLimit = 3_600_000, 100

// PruneStatement is a prune statement of a dialect, on the default tables:
// the table it deletes from, its time column and that column's index.
type PruneStatement struct{ Table, Column, Index, Stmt string }

// PruneStatements returns d's two prune statements, on the default tables.
func PruneStatements(d sqldialect.Dialect) []PruneStatement {
	q := sqldialect.Render(d.Templates(), store.Tables{}, d.Quote)
	return []PruneStatement{
		{"inbox", "received_at", "inbox_received_at_idx", q.PruneInbox},
		{"inbox_attempts", "last_failed_at", "inbox_attempts_last_failed_at_idx", q.PruneAttempts},
	}
}

// Migrate migrates the default tables of dialect on db.
func Migrate(t *testing.T, db *sql.DB, dialect sqlstore.Dialect) {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// ProcessTxFunc is the examples' flow: claim msg in a transaction the
// service owns, credit with the statement credit in it, commit when the
// outcome says so.
type ProcessTxFunc func(ctx context.Context, db *sql.DB, ib *inbox.Inbox[*sql.Tx], msg inbox.Message, credit string) (inbox.Outcome, error)

// ProcessTxFlow runs processTx twice for one message on db, migrated for
// dialect, with a credits table: the first delivery is Processed, the
// second a Duplicate, and one credit is written.
func ProcessTxFlow(t *testing.T, db *sql.DB, dialect sqlstore.Dialect, credit string, processTx ProcessTxFunc) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE credits (payment VARCHAR(100) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []inbox.Status{inbox.Processed, inbox.Duplicate} {
		out, err := processTx(ctx, db, ib, inbox.Message{ID: "payment-1"}, credit)
		if err != nil || out.Status != want {
			t.Fatalf("delivery %d: %v %v, want %v", i+1, out.Status, err, want)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM credits`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d credits (%v), want 1", n, err)
	}
}

// OutboxBatches checks the outbox statements that a dialect runs in
// chunks (multi-row inserts, lists of sequence numbers, failures) on d,
// whose tables are migrated: one Write of more rows than a statement
// takes, with a payload of more bytes than one takes and a duplicate ID
// across chunks, then a claim, release, claim, a stale token's release
// and deletes of them all.
func OutboxBatches(t *testing.T, db *sql.DB, d *sqlstore.Driver) {
	t.Helper()
	ctx := context.Background()
	const n = 11001 // more placeholders than MySQL (65535) and SQLite (32766) take in one statement
	rows := make([]*store.OutboxRow, n)
	for i := range rows {
		rows[i] = &store.OutboxRow{ID: fmt.Appendf(nil, "b-%04d", i), Destination: "d", Payload: []byte("p")}
	}
	rows[1] = &store.OutboxRow{ID: []byte("b-big"), Destination: "d", Key: []byte("k"), Payload: make([]byte, 3<<20)}
	rows[900].ID = rows[3].ID // skipped
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrote, err := d.OutboxWrite(ctx, tx, rows)
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("OutboxWrite: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if wrote != n-1 {
		t.Fatalf("OutboxWrite wrote %d rows, want %d (one duplicate skipped)", wrote, n-1)
	}
	claim := func(token string) []*store.OutboxRecord {
		t.Helper()
		recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 2 * n, Lease: time.Minute, Token: []byte(token)})
		if err != nil {
			t.Fatalf("OutboxClaim: %v", err)
		}
		if len(recs) != n-1 {
			t.Fatalf("claimed %d rows, want %d", len(recs), n-1)
		}
		for i, r := range recs {
			want := rows[i]
			if i >= 900 {
				want = rows[i+1]
			}
			if string(r.ID) != string(want.ID) || len(r.Payload) != len(want.Payload) || string(r.Key) != string(want.Key) {
				t.Fatalf("claimed row %d is %q (%d bytes, key %q), want %q (%d bytes, key %q): not in the order written",
					i, r.ID, len(r.Payload), r.Key, want.ID, len(want.Payload), want.Key)
			}
		}
		return recs
	}
	recs := claim("first")
	fails := make([]store.OutboxFailure, len(recs))
	seqs := make([]int64, len(recs))
	for i, r := range recs {
		fails[i], seqs[i] = store.OutboxFailure{Seq: r.Seq, Released: true}, r.Seq
	}
	if err := d.OutboxFail(ctx, []byte("first"), fails); err != nil {
		t.Fatalf("OutboxFail: %v", err)
	}
	claim("second")
	// The first lease's token releases nothing of the second's.
	if err := d.OutboxFail(ctx, []byte("first"), fails); err != nil {
		t.Fatalf("OutboxFail with a stale token: %v", err)
	}
	if recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: n, Lease: time.Minute, Token: []byte("third")}); err != nil || len(recs) != 0 {
		t.Fatalf("claimed %d rows (%v) after a failure recorded with a stale token, want none: it released the second lease", len(recs), err)
	}
	if got, err := d.OutboxDelete(ctx, []byte("first"), seqs); err != nil || got != 0 {
		t.Fatalf("OutboxDelete with the released lease's token deleted %d (%v), want 0", got, err)
	}
	if got, err := d.OutboxDelete(ctx, []byte("second"), seqs); err != nil || got != n-1 {
		t.Fatalf("OutboxDelete deleted %d (%v), want %d", got, err, n-1)
	}
}
