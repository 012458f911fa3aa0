package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// TestFailover writes through the multi-host DSN, fails over, and writes
// again through the same pool: the row written before is on the promoted
// standby, and the pool now reaches it.
func TestFailover(t *testing.T) {
	for _, r := range []pgcluster.Replication{pgcluster.Sync, pgcluster.Async} {
		t.Run(r.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := pgcluster.New(t, &pgcluster.Options{Replication: r})
			pool, err := pgxpool.New(ctx, c.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var port int
			if err := pool.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil {
				t.Fatal(err)
			}
			if port != c.Primary.Port {
				t.Fatalf("the multi-host DSN reached port %d, want the primary's %d", port, c.Primary.Port)
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			standby, err := pgxpool.New(ctx, c.Standby.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer standby.Close()
			if _, err := standby.Exec(ctx, `INSERT INTO t VALUES (2)`); err == nil {
				t.Fatal("the standby took a write before its promotion")
			}
			if r == pgcluster.Async { // a sync standby has it already
				time.Sleep(200 * time.Millisecond)
			}

			start := time.Now()
			if err := c.StopPrimary(ctx); err != nil {
				t.Fatal(err)
			}
			if c.Primary.Running() {
				t.Fatal("the primary runs after StopPrimary")
			}
			if err := c.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("stopped and promoted in %v", time.Since(start).Round(time.Millisecond))
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err = pool.Exec(ctx, `INSERT INTO t VALUES (3)`)
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("the pool on the multi-host DSN cannot write after the failover: %v", err)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM t WHERE id IN (1, 3)`).Scan(&n); err != nil || n != 2 {
				t.Fatalf("rows 1 and 3 on the promoted standby: %d (%v), want 2", n, err)
			}
			if err := pool.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil || port != c.Standby.Port {
				t.Fatalf("the pool reaches port %d (%v), want the promoted standby's %d", port, err, c.Standby.Port)
			}
		})
	}
}

// TestLinkDelay streams through a slow link: a row committed just before
// the primary's crash never reaches the standby, and one committed well
// before does.
func TestLinkDelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pgcluster.New(t, &pgcluster.Options{LinkDelay: 300 * time.Millisecond})
	pool, err := pgxpool.New(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // row 1 crosses the link
	if _, err := pool.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := c.StopPrimary(ctx); err != nil { // row 2 is still on its way
		t.Fatal(err)
	}
	if err := c.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	standby, err := pgxpool.New(ctx, c.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	var ids []int32
	rows, err := standby.Query(ctx, `SELECT id FROM t ORDER BY id`)
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err != nil || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("the promoted standby has rows %v (%v), want [1]: row 2 was committed within the link's delay", ids, err)
	}
}
