package pgxstore_test

import (
	"context"
	"testing"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
)

// TestRetryingProbesTheInboxKey: Retrying looks up each attempts row's
// inbox row by its primary key, so that its cost grows with the attempts
// table, not with the inbox. Written as NOT EXISTS, PostgreSQL planned it
// as a hash anti-join that read every row of the inbox (153 ms for 10,000
// attempts rows among 1,000,000 inbox rows). It runs with custom and
// generic plans, over all consumers and one.
func TestRetryingProbesTheInboxKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgenv.Pool(t, 2)
	_, _, tables := migratedSchema(t, pool, "retryplan_")
	inboxTable := tables.Name("inbox", store.QuoteDouble)
	attempts := tables.Name("inbox_attempts", store.QuoteDouble)
	// 100,000 inbox rows over two consumers; 1,000 messages in retry and
	// 100 processed after a failure, whose attempts rows stay.
	for _, s := range []string{
		`INSERT INTO ` + inboxTable + ` (consumer, message_id)
	SELECT convert_to('c' || i % 2, 'UTF8'), convert_to('msg-' || i, 'UTF8') FROM generate_series(1, 100000) i`,
		`INSERT INTO ` + attempts + ` (consumer, message_id, attempts, first_failed_at, last_failed_at)
	SELECT convert_to('c' || i % 2, 'UTF8'), convert_to(CASE WHEN i <= 100 THEN 'msg-' ELSE 'retry-' END || i, 'UTF8'), 1, now(), now()
	FROM generate_series(1, 1100) i`,
		"ANALYZE " + inboxTable,
		"ANALYZE " + attempts,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	stmt := pgsql.InspectOf(tables).Retrying
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, consumer := range []string{"NULL", `'c1'::bytea`} {
			plan := explainAnalyze(t, pool, mode, stmt, consumer)
			plan.walk(func(n *planNode) {
				if n.RelationName == "inbox" && n.NodeType != "Index Only Scan" && n.NodeType != "Index Scan" {
					t.Errorf("%s, consumer %s: a %s of the inbox; want a probe of its key per attempts row", mode, consumer, n.NodeType)
				}
			})
			want := 2.0
			if consumer != "NULL" {
				want = 1
			}
			if plan.ActualRows != want {
				t.Errorf("%s, consumer %s: %v consumers in retry, want %v", mode, consumer, plan.ActualRows, want)
			}
		}
	}
}
