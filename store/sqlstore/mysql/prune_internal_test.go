package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
)

// TestPrunePlanMySQL checks that both prune statements delete through a
// range of the time column's index, without a filesort of the expired
// rows, so that a batch costs the same on any table.
func TestPrunePlanMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(mysqlenv.Database(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sqltest.Migrate(t, db, Dialect)
	for _, p := range sqltest.PruneStatements(mysqlDialect{}) {
		table := store.Tables{}.Name(p.Table, store.QuoteBacktick)
		// Chunks of 1000 rows: MySQL's cte_max_recursion_depth.
		fill := `INSERT INTO ` + table + ` (consumer, message_id, %s)
WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT 'c', CONCAT('m', i), %s FROM s`
		cols, now := "received_at", "UTC_TIMESTAMP(6)"
		if p.Table == "inbox_attempts" {
			cols = "attempts, first_failed_at, last_failed_at, last_error"
			now = "1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)"
		}
		var stmts []string
		for from := 1; from <= 5000; from += 1000 {
			ts := now
			if from > 2000 {
				ts += " - INTERVAL 2 HOUR"
			}
			if p.Table == "inbox_attempts" {
				ts += ", ''"
			}
			stmts = append(stmts, fmt.Sprintf(fill, cols, from, from+999, ts))
		}
		for _, s := range append(stmts, "ANALYZE TABLE "+table) {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var out string
		if err := db.QueryRowContext(ctx, "EXPLAIN FORMAT=JSON "+p.Stmt, sqltest.PruneRetentionMS, sqltest.PruneLimit).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var plan any
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatalf("explain output %s: %v", out, err)
		}
		index := p.Index
		ranged, sorted := false, false
		walkJSON(plan, func(m map[string]any) {
			if m["access_type"] == "range" && m["key"] == index {
				ranged = true
			}
			if _, ok := m["filesort"]; ok || m["using_filesort"] == true {
				sorted = true
			}
		})
		if !ranged || sorted {
			t.Errorf("plan of the %s prune:\n%s\nwant a range of %s and no filesort", p.Table, out, index)
		}
	}
}

// walkJSON calls f on every object in v.
func walkJSON(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		f(v)
		for _, e := range v {
			walkJSON(e, f)
		}
	case []any:
		for _, e := range v {
			walkJSON(e, f)
		}
	}
}
