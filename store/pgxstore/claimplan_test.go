package pgxstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
)

// TestClaimBatchReadsOnlyItsRows: a batch's claim looks up its duplicates
// by key, whatever the planner knows of the table. The lookup used to be a
// LATERAL join that PostgreSQL pulled up and planned as a hash join over
// every row of the consumer (with 100,000 rows it read the whole consumer
// on each batch, found while measuring ProcessBatch against raw SQL), or
// as a probe for every message, duplicate or not. Without fingerprints
// (Config.NoFingerprint) there is nothing to compare: no probe at all.
func TestClaimBatchReadsOnlyItsRows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ analyze, fingerprints bool }{{false, true}, {true, true}, {true, false}} {
		analyze := tc.analyze
		t.Run(fmt.Sprintf("analyzed=%v/fingerprints=%v", analyze, tc.fingerprints), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgenv.Pool(t, 2)
			_, q, tables := migratedSchema(t, pool, "claimscan_")
			table := tables.Name("inbox", store.QuoteDouble)
			if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (consumer, message_id, fingerprint)
		SELECT 'c'::bytea, ('old-' || i)::bytea, sha256(('old-' || i)::bytea) FROM generate_series(1, 100000) i`); err != nil {
				t.Fatal(err)
			}
			if analyze {
				if _, err := pool.Exec(ctx, "ANALYZE "+table); err != nil {
					t.Fatal(err)
				}
			}
			var ids, fps [][]byte
			var types []string
			for i := range 100 {
				id := fmt.Sprintf("new-%03d", i)
				if i%10 == 0 {
					id = fmt.Sprintf("old-%d", 1000+i) // a duplicate
				}
				fp := sha256.Sum256([]byte(id))
				ids, types, fps = append(ids, []byte(id)), append(types, ""), append(fps, fp[:])
				if !tc.fingerprints {
					fps[len(fps)-1] = nil
				}
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var plan []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q.ClaimBatch, []byte("c"), ids, types, fps).Scan(&plan); err != nil {
				t.Fatal(err)
			}
			var p []struct {
				Plan planNode `json:"Plan"`
			}
			if err := json.Unmarshal(plan, &p); err != nil || len(p) != 1 {
				t.Fatalf("plan %s: %v", plan, err)
			}
			// The inserts touch about ten blocks each (the keys' and
			// received_at's index pages, the heap); the lookup of each of
			// the 10 duplicates one probe of the key (4 blocks). A scan of the consumer's 100,000 rows
			// reads over a thousand more.
			root := &p[0].Plan
			blocks := root.SharedHit + root.SharedRead
			root.walk(func(n *planNode) {
				if n.NodeType == "ModifyTable" { // the inserts
					blocks -= n.SharedHit + n.SharedRead
				}
			})
			rows := root.ActualRows
			limit := 60.0
			if !tc.fingerprints {
				limit = 0
			}
			if rows != 10 || blocks > limit {
				t.Fatalf("claim of 100 (10 duplicates): %v rows, and %v blocks read besides the inserts, want 10 rows (the duplicates) and %v blocks at most, one probe of the key per duplicate with a fingerprint (the consumer has 100,000 rows):\n%s", rows, blocks, limit, plan)
			}
			t.Logf("%v rows, %v blocks", rows, blocks)
		})
	}
}
