package pgxstore_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/storetest"
)

var harness = storetest.Harness[pgx.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.Env[pgx.Tx], error) {
	return open(tb, &pgxstore.Config{Tables: tables})
}}

var benchHarness = storetest.BenchHarness[pgx.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[pgx.Tx], error) {
	return openBench(tb, &pgxstore.Config{Tables: tables})
}}

// open is openBench without the benchmarks' fields.
func open(tb testing.TB, cfg *pgxstore.Config) (*storetest.Env[pgx.Tx], error) {
	tb.Helper()
	env, err := openBench(tb, cfg)
	if err != nil {
		return nil, err
	}
	return env.Env, nil
}

// openBench makes a fresh schema with a ledger table and a Driver on it.
func openBench(tb testing.TB, cfg *pgxstore.Config) (*storetest.BenchEnv[pgx.Tx], error) {
	tb.Helper()
	ctx := context.Background()
	const maxConns = 20
	schema := testenv.Name("inboxtest_")
	pool := pgenv.PoolNamed(tb, maxConns, schema) // LockWaits finds its connections by that name
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	ledger := schema + ".ledger"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+ledger+" (key text NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		tb.Fatal(err)
	}
	tables := &cfg.Tables
	if tables.Schema == "" {
		tables.Schema = schema
	}
	d, err := pgxstore.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	inboxTable := tables.Name("inbox", store.QuoteDouble)
	handTable := handOutbox(tb, pool, schema)
	env := &storetest.Env[pgx.Tx]{
		Driver: d,
		Write: func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", key)
			return err
		},
		Count: func(ctx context.Context, key string) (n int, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM "+ledger+" WHERE key = $1", key).Scan(&n)
			return n, err
		},
		Backdate: func(ctx context.Context, k store.Key, age time.Duration) error {
			tag, err := pool.Exec(ctx, "UPDATE "+inboxTable+" SET received_at = now() - $3::bigint * interval '1 microsecond' WHERE consumer = $1 AND message_id = $2",
				k.Consumer, k.MessageID, age.Microseconds())
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("backdate: %d rows", tag.RowsAffected())
			}
			return err
		},
		BeginPlain: func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		QueueWrite: func(q *inbox.Queue, key string) {
			q.Add("INSERT INTO "+ledger+" (key) VALUES ($1)", key)
		},
		Exec: func(ctx context.Context, tx pgx.Tx, query string) error {
			_, err := tx.Exec(ctx, query)
			return err
		},
		Transient: func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, pgenv.RaiseDeadlock)
			return err
		},
		LeaveRowsOpen: func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT generate_series(1, 100000)")
			if err == nil {
				rows.Next()
			}
			return err
		},
		Tables:   *tables,
		MaxConns: maxConns,
		LockWaits: func(ctx context.Context) (n int, err error) {
			err = pool.QueryRow(ctx, pgenv.LockWaits, schema).Scan(&n)
			return n, err
		},
		LockTimeout: func(ctx context.Context, tx pgx.Tx) (time.Duration, error) {
			var ms int64
			err := tx.QueryRow(ctx, pgenv.LockTimeout).Scan(&ms)
			return time.Duration(ms) * time.Millisecond, err
		},
	}
	return &storetest.BenchEnv[pgx.Tx]{
		Env: env,
		WriteMany: func(ctx context.Context, tx pgx.Tx, keys []string) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) SELECT unnest($1::text[])", keys)
			return err
		},
		HandBatch: func(ctx context.Context, consumer string, ids []string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				bids := make([][]byte, len(ids))
				for i, id := range ids {
					bids[i] = []byte(id)
				}
				slices.SortFunc(bids, bytes.Compare)
				_, err := tx.Exec(ctx, `WITH ins AS (
	INSERT INTO `+inboxTable+` (consumer, message_id) SELECT $1, id FROM unnest($2::bytea[]) AS t(id)
	ON CONFLICT DO NOTHING RETURNING message_id)
INSERT INTO `+ledger+` (key) SELECT convert_from(message_id, 'UTF8') FROM ins`, []byte(consumer), bids)
				return err
			})
		},
		HandQueued: func(ctx context.Context, consumer, id string) error {
			b := &pgx.Batch{}
			b.Queue("INSERT INTO "+inboxTable+" (consumer, message_id) VALUES ($1, $2)", []byte(consumer), []byte(id))
			b.Queue("INSERT INTO "+ledger+" (key) VALUES ($1)", id)
			return pool.SendBatch(ctx, b).Close()
		},
		HandWrite: func(ctx context.Context, tx pgx.Tx, id string, payload []byte) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+handTable+" (message_id, destination, message_type, payload) VALUES ($1, $2, $3, $4)",
				[]byte(id), "orders.placed", "OrderPlaced", payload)
			return err
		},
		Expire: func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error {
			_, err := pool.Exec(ctx, pgenv.Expire(inboxTable), []byte(consumer), prefix, n, age.Microseconds())
			return err
		},
		Settle: func(ctx context.Context) error {
			for _, sql := range []string{"VACUUM (ANALYZE) " + ledger + ", " + inboxTable, "CHECKPOINT"} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					return err
				}
			}
			return nil
		},
	}, nil
}

// handOutbox creates a table like the outbox's, by its own migration with
// another prefix: the yardstick of BenchmarkOutbox.
func handOutbox(tb testing.TB, pool *pgxpool.Pool, schema string) string {
	tb.Helper()
	t := store.Tables{Schema: schema, Prefix: "hand_"}
	ms, err := pgxstore.Migrations(t)
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "outbox" {
			if _, err := pool.Exec(context.Background(), m.SQL); err != nil {
				tb.Fatal(err)
			}
			return t.Name("outbox", store.QuoteDouble)
		}
	}
	tb.Fatal("no outbox migration")
	return ""
}

func TestStore(t *testing.T) { storetest.Run(t, harness) }

// The suite again with the lock timeout set in every transaction.
func TestStoreLockTimeoutPerTransaction(t *testing.T) {
	storetest.Run(t, storetest.Harness[pgx.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.Env[pgx.Tx], error) {
		return open(tb, &pgxstore.Config{Tables: tables, LockTimeoutPerTransaction: true})
	}})
}

func BenchmarkStore(b *testing.B) { storetest.Bench(b, benchHarness) }

func BenchmarkPrune(b *testing.B) { storetest.BenchPrune(b, benchHarness) }

func BenchmarkOutbox(b *testing.B) { storetest.BenchOutbox(b, benchHarness) }

func BenchmarkBatch(b *testing.B) { storetest.BenchBatch(b, benchHarness) }

// BenchmarkOutboxNotify is BenchmarkOutbox with the variants of
// Config.OutboxNotifyEvery: every write, never.
func BenchmarkOutboxNotify(b *testing.B) {
	for _, every := range []time.Duration{time.Nanosecond, -1} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			storetest.BenchOutbox(b, storetest.BenchHarness[pgx.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[pgx.Tx], error) {
				return openBench(tb, &pgxstore.Config{Tables: tables, OutboxNotifyEvery: every})
			}})
		})
	}
}
