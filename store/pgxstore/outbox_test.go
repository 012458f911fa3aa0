package pgxstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/storetest"
)

// The relay's claim reads the due rows through the partial index, whatever
// else the table holds: here 100,000 parked rows and 100,000 waiting for a
// retry, as a table does after a broker outage. Users of outboxes that scan
// report claims timing out on tables of millions of rows.
func TestOutboxClaimReadsOnlyDueRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgenv.Pool(t, 2)
	_, q, tables := migratedSchema(t, pool, "outboxscan_")
	table := tables.Name("outbox", store.QuoteDouble)
	for _, q := range []string{
		`INSERT INTO ` + table + ` (message_id, destination, payload, parked_at, attempts)
		SELECT ('parked-' || i)::bytea, 'd', repeat('x', 200)::bytea, now(), 10 FROM generate_series(1, 100000) i`,
		`INSERT INTO ` + table + ` (message_id, destination, payload, available_at, attempts)
		SELECT ('later-' || i)::bytea, 'd', repeat('x', 200)::bytea, now() + interval '1 hour', 3 FROM generate_series(1, 100000) i`,
		`INSERT INTO ` + table + ` (message_id, destination, payload)
		SELECT ('due-' || i)::bytea, 'd', 'p'::bytea FROM generate_series(1, 10) i`,
		`ANALYZE ` + table,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, claim := range []struct{ name, sql string }{{"claim", q.OutboxClaim}, {"ordered claim", q.OutboxClaimOrdered}} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var plan []byte
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+claim.sql, 100, time.Minute.Milliseconds(), []byte("token")).Scan(&plan)
		_ = tx.Rollback(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p []struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal(plan, &p); err != nil || len(p) != 1 {
			t.Fatalf("plan %s: %v", plan, err)
		}
		rows, blocks := p[0].Plan["Actual Rows"].(float64), p[0].Plan["Shared Hit Blocks"].(float64)+p[0].Plan["Shared Read Blocks"].(float64)
		if rows != 10 || blocks > 500 {
			t.Fatalf("%s: %v rows through %v blocks, want the 10 due rows through a few hundred at most (the table has thousands):\n%s", claim.name, rows, blocks, plan)
		}
		t.Logf("%s: %v rows, %v blocks", claim.name, rows, blocks)
	}
}

// A relay on a pool of one connection, which the application's writes
// share, publishes and lets the writes through: LISTEN would hold the
// only connection.
func TestOutboxRelayPoolOfOne(t *testing.T) {
	t.Parallel()
	pool := pgenv.Pool(t, 1)
	d, _, _ := migratedSchema(t, pool, "outboxone_")
	storetest.OutboxPoolOfOne(t, d)
}
