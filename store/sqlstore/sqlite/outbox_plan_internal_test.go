package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
)

// TestOutboxPlanSQLite checks that, on a table of mostly published and
// parked rows, both claims search the partial index of due rows in order
// (no scan, no sort), the ordered claim finds a key's older unpublished
// rows in the key's partial index, and the prune of published rows
// searches their partial index in published_at order.
func TestOutboxPlanSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "outbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sqltest.Migrate(t, db, Dialect)
	// 3000 published rows, 1000 parked, 1000 due, on 50 keys.
	for _, s := range []string{`WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 5000)
INSERT INTO outbox (message_id, destination, msg_key, created_at, available_at, published_at, parked_at)
SELECT CAST(i AS BLOB), 'd', CAST(i % 50 AS BLOB), unixepoch() * 1000, unixepoch() * 1000 - 60000,
    CASE WHEN i <= 3000 THEN unixepoch() * 1000 - 7200000 - i END,
    CASE WHEN i > 3000 AND i <= 4000 THEN unixepoch() * 1000 END
FROM s`, "ANALYZE"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	q := sqldialect.Render(sqliteDialect{}.Templates(), store.Tables{}, sqliteDialect{}.Quote)
	due := "SEARCH d USING INDEX outbox_due_idx (available_at<?)"
	for _, tc := range []struct {
		name, stmt string
		args       []any
		want       []string
	}{
		{"claim", q.OutboxClaim, []any{100, 60000, []byte("t")}, []string{due}},
		{"ordered claim", q.OutboxClaimOrdered, []any{100, 60000, []byte("t")}, []string{due,
			// Not covering: SQLite checks published_at IS NULL in the row
			// too, the first one only (EXISTS).
			"SEARCH p USING INDEX outbox_key_idx (msg_key=? AND seq<?)"}},
		{"prune published", q.OutboxPrunePublished, []any{sqltest.PruneRetentionMS, sqltest.PruneLimit}, []string{
			"USING COVERING INDEX outbox_published_idx (published_at<?)"}},
	} {
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tc.stmt, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		got := strings.Join(plan, "\n")
		ok := !strings.Contains(got, "TEMP B-TREE") && !strings.Contains(got, "SCAN ")
		for _, w := range tc.want {
			ok = ok && strings.Contains(got, w)
		}
		if !ok {
			t.Errorf("plan of the %s:\n%s\nwant %q, no scan, no temp b-tree", tc.name, got, tc.want)
		}
	}
}
