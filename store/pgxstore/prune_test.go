package pgxstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// planNode is the part of EXPLAIN (ANALYZE, FORMAT JSON) the test reads.
type planNode struct {
	NodeType        string     `json:"Node Type"`
	IndexName       string     `json:"Index Name"`
	RelationName    string     `json:"Relation Name"`
	ActualRows      float64    `json:"Actual Rows"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	SharedHit       float64    `json:"Shared Hit Blocks"`
	SharedRead      float64    `json:"Shared Read Blocks"`
	Plans           []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// TestPruneReadsOnlyItsBatch checks the plans of both prune statements on
// tables whose young rows come first, then 5000 expired ones: a batch of
// 100 must read about 100 rows through the btree, sort nothing, and so
// cost the same on any table. It runs with custom and generic plans (a
// prepared statement switches to the generic one after five executions).
func TestPruneReadsOnlyItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgenv.Pool(t, 2)
	_, q, _ := migratedSchema(t, pool, "inboxtest_")
	const retentionMS, limit, expired = 3_600_000, 100, 5000
	for _, tc := range []struct {
		table, index, stmt, fill string
		args                     []any
	}{
		{"inbox", "inbox_received_at_btree_idx", q.PruneInbox,
			`INSERT INTO %s (consumer, message_id, received_at) SELECT 'c', convert_to(i::text, 'UTF8'), %s FROM generate_series(%d, %d) i`,
			[]any{retentionMS, limit, "NULL"}},
		{"inbox_attempts", "inbox_attempts_last_failed_at_idx", q.PruneAttempts,
			`INSERT INTO %s (consumer, message_id, attempts, last_failed_at) SELECT 'c', convert_to(i::text, 'UTF8'), 1, %s FROM generate_series(%d, %d) i`,
			[]any{retentionMS, limit}},
	} {
		t.Run(tc.table, func(t *testing.T) {
			table := q.Tables.Name(tc.table, store.QuoteDouble)
			// Young rows first, where a scan of the heap meets them before
			// the expired ones, as it does once freed space is reused.
			for _, f := range []string{
				fmt.Sprintf(tc.fill, table, "now()", 1, 20_000),
				fmt.Sprintf(tc.fill, table, "now() - interval '2 hours' + i * interval '1 microsecond'", 20_001, 20_000+expired),
				"ANALYZE " + table,
			} {
				if _, err := pool.Exec(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := explainAnalyze(t, pool, mode, tc.stmt, tc.args...)
				read, btree := 0.0, false
				plan.walk(func(n *planNode) {
					if n.NodeType == "Sort" || n.NodeType == "Incremental Sort" {
						t.Errorf("%s: the plan sorts; want the btree's order", mode)
					}
					if strings.Contains(n.NodeType, "Scan") && n.NodeType != "Tid Scan" && n.NodeType != "CTE Scan" {
						read += n.ActualRows + n.RemovedByFilter
					}
					if n.NodeType == "Index Scan" && n.IndexName == tc.index {
						btree = true
					}
				})
				if !btree || read > limit {
					t.Errorf("%s: read %v rows (btree index scan: %v) for a batch of %d among %d expired and 20000 young; want at most %d through the btree",
						mode, read, btree, limit, expired, limit)
				}
			}
		})
	}
}

// migratedSchema returns a Driver on tables in a fresh schema (its name
// begins with prefix), migrated, dropped when t ends; their statements;
// and the tables.
func migratedSchema(t *testing.T, pool *pgxpool.Pool, prefix string) (*pgxstore.Driver, *pgsql.Queries, store.Tables) {
	t.Helper()
	schema := testenv.Name(prefix)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	tables := store.Tables{Schema: schema}
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: tables})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	q, err := pgsql.New(tables)
	if err != nil {
		t.Fatal(err)
	}
	return d, q, tables
}

// explainAnalyze prepares stmt and runs it under EXPLAIN ANALYZE with
// args, in a transaction it rolls back, in the plan cache mode given, and
// returns the plan.
func explainAnalyze(t *testing.T, pool *pgxpool.Pool, mode, stmt string, args ...any) *planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = fmt.Sprint(a)
	}
	var out []byte
	for _, s := range []string{
		"SET LOCAL plan_cache_mode = " + mode,
		"PREPARE prune_explained AS " + stmt,
		"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE prune_explained(" + strings.Join(lits, ", ") + ")",
		"DEALLOCATE prune_explained",
	} {
		if strings.HasPrefix(s, "EXPLAIN") {
			err = tx.QueryRow(ctx, s).Scan(&out)
		} else {
			_, err = tx.Exec(ctx, s)
		}
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain output %s: %v", out, err)
	}
	return &plans[0].Plan
}

// TestPruneStartsWhereTheLastBatchEnded deletes 4000 of 5000 expired rows
// in batches while another transaction holds a snapshot, so that the
// deleted rows stay in the index (vacuum could not remove them either),
// and checks that the next batch, started from the last one's Last, reads
// far fewer blocks than one started from the beginning, which steps over
// all 4000.
func TestPruneStartsWhereTheLastBatchEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgenv.Pool(t, 3)
	d, q, _ := migratedSchema(t, pool, "inboxtest_")
	table := q.Tables.Name("inbox", store.QuoteDouble)
	if _, err := pool.Exec(ctx, pgenv.Expire(table), []byte("c"), "old-", 5000, 2*time.Hour.Microseconds()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := holder.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	p := store.PruneParams{Retention: time.Hour, Limit: 1000}
	for range 4 {
		res, err := d.Prune(ctx, &p)
		if err != nil || res.Deleted != 1000 || res.Last.IsZero() {
			t.Fatalf("prune: %+v, %v; want 1000 rows and the last one's time", res, err)
		}
		p.From = res.Last
	}
	blocks := func(from string) float64 {
		plan := explainAnalyze(t, pool, "force_custom_plan", q.PruneInbox, 3_600_000, 100, from)
		var sum float64
		plan.walk(func(n *planNode) {
			if n.NodeType == "Index Scan" {
				sum += n.SharedHit + n.SharedRead
			}
		})
		return sum
	}
	fromLast := blocks("'" + p.From.Format(time.RFC3339Nano) + "'::timestamptz")
	fromStart := blocks("NULL")
	if fromLast*5 > fromStart {
		t.Errorf("a batch from the last one's end read %v blocks, one from the start %v: want at least 5 times fewer", fromLast, fromStart)
	}
}

// BenchmarkClaimIndex measures what the index of received_at costs each
// claim: Process of new messages on 8 goroutines with main's BRIN index
// (migration 0001), the btree that pruning reads (0003), or no index at all
// (the floor), side by side on tables of their own.
func BenchmarkClaimIndex(b *testing.B) {
	ctx := context.Background()
	pool := pgenv.Pool(b, 2)
	for _, v := range []struct{ name, ddl string }{
		{"index=brin", `DROP INDEX %[1]s."inbox_received_at_btree_idx"; CREATE INDEX ON %[1]s.inbox USING brin (received_at)`},
		{"index=btree", ``},
		{"index=none", `DROP INDEX %[1]s."inbox_received_at_btree_idx"`},
	} {
		schema := testenv.Name("inboxbench_")
		b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
		env, err := openBench(b, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
		if err != nil {
			b.Fatal(err)
		}
		if err := env.Driver.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		if v.ddl != "" {
			if _, err := pool.Exec(ctx, fmt.Sprintf(v.ddl, schema)); err != nil {
				b.Fatal(err)
			}
		}
		ib, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		var seq atomic.Int64
		handler := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error { return env.Write(ctx, tx, m.ID) }
		b.Run(v.name, func(b *testing.B) {
			if err := env.Settle(ctx); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(8 / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("claim-%d", seq.Add(1))
					if out, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, handler); out.Status != inbox.Processed {
						b.Errorf("process %s: %v %v", id, out.Status, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
