package mysql

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
)

// TestOutboxPlanMySQL checks that, on a table of mostly published and
// parked rows, both claims read the due rows in order from outbox_due_idx
// with its two NULL columns as a constant prefix (no filesort, no pass
// over the published or parked rows), the ordered claim finds a key's
// older unpublished rows through outbox_key_idx, and the prune of
// published rows reads a range of outbox_due_idx in published_at order:
// MySQL has no partial indexes.
func TestOutboxPlanMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(mysqlenv.Database(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sqltest.Migrate(t, db, Dialect)
	// 3000 published rows, 1000 parked, 1000 due, on 50 keys; chunks of
	// 1000, MariaDB's and MySQL's default recursion depths.
	for from := 1; from <= 5000; from += 1000 {
		_, err := db.ExecContext(ctx, `INSERT INTO outbox (message_id, destination, msg_key, created_at, available_at, last_error, published_at, parked_at)
WITH RECURSIVE s(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM s WHERE i < ?)
SELECT CONCAT('m', i), 'd', CONCAT('k', i % 50), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, '',
    IF(i <= 3000, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR - INTERVAL i SECOND, NULL),
    IF(i > 3000 AND i <= 4000, UTC_TIMESTAMP(6), NULL)
FROM s`, from, from+999)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE outbox"); err != nil {
		t.Fatal(err)
	}
	q := sqldialect.Render(mysqlDialect{}.Templates(), store.Tables{}, mysqlDialect{}.Quote)
	for _, tc := range []struct {
		name, stmt string
		args       []any
		// want: the indexes read, each with the key parts it must use.
		want map[string][]string
	}{
		{"claim", q.OutboxClaim, []any{100}, map[string][]string{"outbox_due_idx": {"published_at", "parked_at"}}},
		{"ordered claim", q.OutboxClaimOrdered, []any{100}, map[string][]string{
			"outbox_due_idx": {"published_at", "parked_at"},
			"outbox_key_idx": {"msg_key", "published_at"},
		}},
		{"prune published", q.OutboxPrunePublished, []any{sqltest.PruneRetentionMS, sqltest.PruneLimit}, map[string][]string{
			"outbox_due_idx": {"published_at"},
		}},
	} {
		var out string
		if err := db.QueryRowContext(ctx, "EXPLAIN FORMAT=JSON "+tc.stmt, tc.args...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var plan any
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("explain output %s: %v", out, err)
		}
		used, sorted, scanned := map[string][]string{}, false, false
		walkJSON(plan, func(m map[string]any) {
			if key, ok := m["key"].(string); ok {
				for _, p := range m["used_key_parts"].([]any) {
					used[key] = append(used[key], p.(string))
				}
				if m["access_type"] == "index" || m["access_type"] == "ALL" {
					scanned = true
				}
			} else if m["access_type"] == "ALL" {
				scanned = true
			}
			if _, ok := m["filesort"]; ok || m["using_filesort"] == true {
				sorted = true
			}
		})
		ok := !sorted && !scanned && len(used) == len(tc.want)
		for index, parts := range tc.want {
			for _, p := range parts {
				ok = ok && slices.Contains(used[index], p)
			}
		}
		if !ok {
			t.Errorf("plan of the %s:\n%s\nwant the key parts %v, no scan, no filesort; it uses %v", tc.name, out, tc.want, used)
		}
	}
}
