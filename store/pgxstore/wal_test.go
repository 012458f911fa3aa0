package pgxstore_test

import (
	"context"
	"crypto/md5"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// BenchmarkWAL reports the WAL a message costs (bytes and records, read
// with pg_walinspect, only the records of the benchmark's own tables,
// commit records apart): the bare business transaction, Process, Process
// without the received_at index, and hand-written claims without the ON
// CONFLICT confirmation record (NOT EXISTS) or without the fingerprint.
// It needs a superuser (CREATE EXTENSION pg_walinspect). b.N messages per
// variant, one goroutine: go test -run '^$' -bench WAL$ -benchtime 2000x.
func BenchmarkWAL(b *testing.B) {
	ctx := context.Background()
	pool := pgenv.Pool(b, 2)
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		b.Fatalf("pg_walinspect: %v", err)
	}
	claim := func(sql string) func(ctx context.Context, w *walTables, id string) error {
		return func(ctx context.Context, w *walTables, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if sql != "" {
					if _, err := tx.Exec(ctx, fmt.Sprintf(sql, w.schema), []byte("c"), []byte(id), []byte(id)); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+w.schema+".ledger (key) VALUES ($1)", id)
				return err
			})
		}
	}
	process := func(ctx context.Context, w *walTables, id string) error {
		_, err := w.ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+w.schema+".ledger (key) VALUES ($1)", m.ID)
			return err
		})
		return err
	}
	for _, v := range []struct {
		name, ddl string
		run       func(ctx context.Context, w *walTables, id string) error
	}{
		{"bare", "", claim("")},
		{"process", "", process},
		{"process-no-received_at-index", `DROP INDEX %s."inbox_received_at_btree_idx"`, process},
		{"claim-on-conflict", "", claim(`INSERT INTO %s.inbox (consumer, message_id, fingerprint) VALUES ($1, $2, sha256($3)) ON CONFLICT DO NOTHING RETURNING 1`)},
		{"claim-not-exists", "", claim(`INSERT INTO %s.inbox (consumer, message_id, fingerprint) SELECT $1, $2, sha256($3) WHERE NOT EXISTS (SELECT 1 FROM %[1]s.inbox WHERE consumer = $1 AND message_id = $2) RETURNING 1`)},
		{"claim-no-fingerprint", "", claim(`INSERT INTO %s.inbox (consumer, message_id) SELECT $1, $2 WHERE length($3) >= 0 ON CONFLICT DO NOTHING RETURNING 1`)},
	} {
		b.Run(v.name, func(b *testing.B) {
			w := newWALTables(b, pool, v.ddl)
			for i := range 200 { // the first pages
				if err := v.run(ctx, w, fmt.Sprintf("warm-%08d", i)); err != nil {
					b.Fatal(err)
				}
			}
			w.measure(b, func() {
				for i := range b.N {
					if err := v.run(ctx, w, fmt.Sprintf("msg-%08d", i)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkWALKeyOrder reports the WAL a message costs on a table of
// INBOX_WAL_ROWS (2,000,000) rows, far larger than shared buffers, in the
// b.N messages after a CHECKPOINT: with random IDs each new key lands on an
// index page not yet written since the checkpoint (a full-page image),
// with IDs in time order on the last one; with wal_compression off and
// lz4. go test -run '^$' -bench WALKeyOrder -benchtime 2000x (the table
// takes about 20 s to fill).
func BenchmarkWALKeyOrder(b *testing.B) {
	ctx := context.Background()
	pool := pgenv.Pool(b, 2)
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		b.Fatalf("pg_walinspect: %v", err)
	}
	w := newWALTables(b, pool, "")
	rows := 2_000_000
	if v := os.Getenv("INBOX_WAL_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			b.Fatalf("INBOX_WAL_ROWS=%q: want a number of rows", v)
		}
		rows = n
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+w.schema+`.inbox (consumer, message_id, fingerprint)
		SELECT 'c', convert_to(md5(i::text), 'UTF8'), sha256(convert_to(i::text, 'UTF8')) FROM generate_series(1, $1::int) i`, rows); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+w.schema+".inbox"); err != nil {
		b.Fatal(err)
	}
	next := 10 * rows // past the keys of the table
	for _, comp := range []string{"off", "lz4"} {
		for _, order := range []string{"random", "time"} {
			b.Run("wal_compression="+comp+"/ids="+order, func(b *testing.B) {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Release()
				for _, q := range []string{"SET wal_compression = " + comp, "CHECKPOINT"} {
					if _, err := conn.Exec(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
				w.measure(b, func() {
					for range b.N {
						next++
						id := fmt.Sprintf("%x", md5.Sum([]byte(fmt.Sprint(next))))
						if order == "time" {
							id = fmt.Sprintf("z-%012d", next) // after every md5 key
						}
						batch := &pgx.Batch{}
						batch.Queue("BEGIN")
						batch.Queue(`INSERT INTO `+w.schema+`.inbox (consumer, message_id, fingerprint) VALUES ($1, $2, sha256($2)) ON CONFLICT DO NOTHING RETURNING 1`, []byte("c"), []byte(id))
						batch.Queue("INSERT INTO "+w.schema+".ledger (key) VALUES ($1)", id)
						batch.Queue("COMMIT")
						if err := conn.SendBatch(ctx, batch).Close(); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// walTables are a schema with the inbox's tables, a ledger and an inbox
// on them, for the WAL benchmarks.
type walTables struct {
	pool   *pgxpool.Pool
	schema string
	ib     *inbox.Inbox[pgx.Tx]
}

func newWALTables(b *testing.B, pool *pgxpool.Pool, ddl string) *walTables {
	b.Helper()
	ctx := context.Background()
	schema := testenv.Name("wal_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".ledger (key text NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		b.Fatal(err)
	}
	if err := inbox.Migrate(ctx, d); err != nil {
		b.Fatal(err)
	}
	if ddl != "" {
		if _, err := pool.Exec(ctx, fmt.Sprintf(ddl, schema)); err != nil {
			b.Fatal(err)
		}
	}
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "c", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return &walTables{pool: pool, schema: schema, ib: ib}
}

// measure runs f and reports the WAL bytes, full-page image bytes and
// records per message that it wrote to w's tables.
func (w *walTables) measure(b *testing.B, f func()) {
	b.Helper()
	ctx := context.Background()
	var start, end string
	if err := w.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&start); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	f()
	b.StopTimer()
	if err := w.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
		b.Fatal(err)
	}
	rows, err := w.pool.Query(ctx, `SELECT c.relfilenode::text FROM pg_class c WHERE c.relnamespace = $1::regnamespace AND c.relfilenode <> 0`, w.schema)
	if err != nil {
		b.Fatal(err)
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	rows, err = w.pool.Query(ctx, `SELECT record_length, fpi_length, coalesce(block_ref, '') FROM public.pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`, start, end)
	if err != nil {
		b.Fatal(err)
	}
	var bytes, fpi, records int
	for rows.Next() {
		var rl, fl int
		var ref string
		if err := rows.Scan(&rl, &fl, &ref); err != nil {
			b.Fatal(err)
		}
		for _, n := range nodes {
			if strings.Contains(ref, "/"+n+" ") { // "rel 1663/16384/<relfilenode> fork main blk 0"
				bytes, fpi, records = bytes+rl, fpi+fl, records+1
				break
			}
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(float64(bytes)/n, "walB/msg")
	b.ReportMetric(float64(fpi)/n, "fpiB/msg")
	b.ReportMetric(float64(records)/n, "records/msg")
}

// BenchmarkClaimShape measures, side by side on 8 goroutines in
// interleaved rounds, the business transaction with the claim as Process
// sends it (BEGIN and the claim in one round trip, then the insert and
// COMMIT), without its ON CONFLICT confirmation record (NOT EXISTS), and
// without a fingerprint: what those cost in throughput (README,
// Performance). go test -run '^$' -bench ClaimShape -benchtime 3000x.
func BenchmarkClaimShape(b *testing.B) {
	ctx := context.Background()
	pool := pgenv.Pool(b, 20)
	variants := []struct{ name, claim string }{
		{"on-conflict", `INSERT INTO %s.inbox (consumer, message_id, message_type, fingerprint) VALUES ($1, $2, '', sha256($2)) ON CONFLICT DO NOTHING RETURNING 1`},
		{"not-exists", `INSERT INTO %s.inbox (consumer, message_id, message_type, fingerprint) SELECT $1, $2, '', sha256($2) WHERE NOT EXISTS (SELECT 1 FROM %[1]s.inbox WHERE consumer = $1 AND message_id = $2) RETURNING 1`},
		{"no-fingerprint", `INSERT INTO %s.inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1`},
	}
	tables := make([]*walTables, len(variants))
	for i := range variants {
		tables[i] = newWALTables(b, pool, "")
	}
	var seq atomic.Int64
	for round := range 8 {
		for i, v := range variants {
			claim := fmt.Sprintf(v.claim, tables[i].schema)
			ledger := "INSERT INTO " + tables[i].schema + ".ledger (key) VALUES ($1)"
			once := func() error {
				id := fmt.Sprintf("m-%d", seq.Add(1))
				c, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer c.Release()
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue(claim, []byte("c"), []byte(id))
				if err := c.SendBatch(ctx, batch).Close(); err != nil {
					return err
				}
				if _, err := c.Exec(ctx, ledger, id); err != nil {
					return err
				}
				_, err = c.Exec(ctx, "COMMIT")
				return err
			}
			b.Run(fmt.Sprintf("%s/round=%d", v.name, round), func(b *testing.B) {
				b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0))) // 8 goroutines on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := once(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
