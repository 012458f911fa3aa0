package pgfailover

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// env is one test's cluster, with a pool and a migrated pgx store on the
// multi-host DSN.
type env struct {
	c      *pgcluster.Cluster
	pool   *pgxpool.Pool
	driver *pgxstore.Driver
	log    *slog.Logger
}

// newEnv starts a pair with opts and migrates the inbox's tables
// through the multi-host DSN, with a pool of maxConns connections. The
// ledger table records each handler's effect; it has no unique key, so a
// message done twice shows twice.
func newEnv(t *testing.T, opts *pgcluster.Options, maxConns int32) *env {
	t.Helper()
	ctx := context.Background()
	c := pgcluster.New(t, opts)
	cfg, err := pgxpool.ParseConfig(c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	driver, err := pgxstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, driver); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (id text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	// The inbox's own logs say what failed during the failover; WARN and
	// above only, so that a retry per message does not flood the output.
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &env{c: c, pool: pool, driver: driver, log: log}
}

// testWriter writes to t's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// effect is the handlers' business write: one ledger row per run.
func effect(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO ledger (id) VALUES ($1)`, m.ID)
	return err
}

// failover times one failover: the primary's stop, the standby's promotion.
type failover struct {
	Killed, Promoted time.Time
}

// failOver stops the primary as a crash does and promotes the standby.
func (e *env) failOver(t *testing.T) failover {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var f failover
	f.Killed = time.Now()
	if err := e.c.StopPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	f.Promoted = time.Now()
	return f
}

// writeGap is the longest time between two effects in the ledger: how long
// the consumers wrote nothing, the failover included.
func writeGap(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	var gap time.Duration
	err := pool.QueryRow(context.Background(), `SELECT coalesce(max(at - prev), '0') FROM
		(SELECT at, lag(at) OVER (ORDER BY at) AS prev FROM ledger) g`).Scan(&gap)
	if err != nil {
		t.Fatal(err)
	}
	return gap
}

// promotedPool is a pool on the promoted standby alone, for the checks
// after a failover: they must read what survived there.
func (e *env) promotedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), e.c.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var recovery bool
	if err := pool.QueryRow(context.Background(), `SELECT pg_is_in_recovery()`).Scan(&recovery); err != nil || recovery {
		t.Fatalf("the standby is not promoted: in recovery %v (%v)", recovery, err)
	}
	return pool
}

// ledger is what the promoted standby holds per message: effects (ledger
// rows) and whether its claim (inbox row) is there.
type ledger struct {
	effects map[string]int
	claimed map[string]bool
}

func readLedger(t *testing.T, pool *pgxpool.Pool, consumer string) ledger {
	t.Helper()
	ctx := context.Background()
	l := ledger{effects: map[string]int{}, claimed: map[string]bool{}}
	rows, err := pool.Query(ctx, `SELECT id, count(*) FROM ledger GROUP BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { l.effects[id] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	rows, err = pool.Query(ctx, `SELECT convert_from(message_id, 'UTF8') FROM inbox WHERE consumer = $1`, []byte(consumer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { l.claimed[id] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return l
}

// tally is the verdict on a run: each message's effect against its ack.
type tally struct {
	Messages, Acked int
	// Lost: acked, with neither claim nor effect on the promoted standby.
	Lost []string
	// Doubled: more than one effect.
	Doubled []string
	// Torn: a claim without its effect, or an effect without its claim.
	Torn []string
	// Missing: no effect and not acked, which a finished run never has.
	Missing []string
}

func (l ledger) tally(ids []string, acked map[string]bool) tally {
	tl := tally{Messages: len(ids), Acked: len(acked)}
	for _, id := range ids {
		n, claimed := l.effects[id], l.claimed[id]
		switch {
		case n > 1:
			tl.Doubled = append(tl.Doubled, id)
		case (n == 1) != claimed:
			tl.Torn = append(tl.Torn, id)
		case n == 0 && acked[id]:
			tl.Lost = append(tl.Lost, id)
		case n == 0:
			tl.Missing = append(tl.Missing, id)
		}
	}
	return tl
}

func (tl tally) String() string {
	return fmt.Sprintf("%d messages, %d acked: %d lost, %d doubled, %d torn, %d missing",
		tl.Messages, tl.Acked, len(tl.Lost), len(tl.Doubled), len(tl.Torn), len(tl.Missing))
}

// first returns up to 5 of ids, for a failure message.
func first(ids []string) []string { return ids[:min(len(ids), 5)] }

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// dumpActivity logs the promoted standby's sessions, to explain a hang.
func dumpActivity(t *testing.T, e *env) {
	t.Helper()
	rows, err := e.promotedPool(t).Query(context.Background(), `SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 80) FROM pg_stat_activity WHERE backend_type = 'client backend'`)
	if err != nil {
		t.Log(err)
		return
	}
	for rows.Next() {
		v, _ := rows.Values()
		t.Logf("activity: %v", v)
	}
}
