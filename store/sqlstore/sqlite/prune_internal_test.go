package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
)

// TestPrunePlanSQLite checks that both prune statements read their batch
// in index order: a search of the time column's index, no sort of the
// expired rows, so that a batch costs the same on any table.
func TestPrunePlanSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sqltest.Migrate(t, db, Dialect)
	for _, p := range sqltest.PruneStatements(sqliteDialect{}) {
		table := store.Tables{}.Name(p.Table, store.QuoteDouble)
		fill := `WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM s WHERE i < %d)
INSERT INTO ` + table + ` (consumer, message_id, %s) SELECT x'63', CAST(i AS BLOB), %s FROM s`
		cols, now := "received_at", "unixepoch() * 1000"
		if p.Table == "inbox_attempts" {
			cols = "attempts, first_failed_at, last_failed_at"
			now = "1, 0, unixepoch() * 1000"
		}
		for _, s := range []string{
			fmt.Sprintf(fill, 1, 2000, cols, now),
			fmt.Sprintf(fill, 2001, 5000, cols, now+" - 7200000"),
			"ANALYZE",
		} {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+p.Stmt, sqltest.PruneRetentionMS, sqltest.PruneLimit)
		if err != nil {
			t.Fatal(err)
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
		index := fmt.Sprintf("USING COVERING INDEX %s (%s<?)", p.Index, p.Column)
		if !strings.Contains(got, index) || strings.Contains(got, "TEMP B-TREE") || strings.Contains(got, "SCAN ") {
			t.Errorf("plan of the %s prune:\n%s\nwant a search %s, no scan, no temp b-tree", p.Table, got, index)
		}
	}
}
