package brokertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// Bench measures end-to-end consumption, in messages per second, from the
// broker through the inbox on PostgreSQL to the ack. The messages are
// published before the timer starts. Bench runs these side by side.
//   - The baseline is the same consumer, with 4 workers and the same source.
//     It acks after the same business transaction without the inbox, with
//     BEGIN, one insert and COMMIT.
//   - The inbox's one round trip is ConsumeQueued, with the same insert
//     queued.
//   - Batch consumption is ConsumeBatch, up to 100 a batch, with one
//     multi-row insert per batch. Where the harness has Env.PrefetchSource,
//     its source holds Workers × 100 ahead.
func Bench(b *testing.B, h Harness) {
	const workers = 4
	pool := pgenv.Pool(b, 2*workers+2)
	ctx := context.Background()
	schema := testenv.Name("benchbroker_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".ledger_baseline (id text NOT NULL); CREATE TABLE "+schema+".ledger_inbox (id text NOT NULL); CREATE TABLE "+schema+".ledger_queued (id text NOT NULL); CREATE TABLE "+schema+".ledger_batch (id text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	// Each run has a ledger of its own, so that neither counts rows of the
	// other.
	insert := func(run string) string { return "INSERT INTO " + schema + ".ledger_" + run + " (id) VALUES ($1)" }
	handler := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		_, err := tx.Exec(ctx, insert("inbox"), m.ID)
		return err
	}
	baseline := func(ctx context.Context, src broker.Source) error {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					dv, err := src.Next(ctx)
					if err != nil {
						return
					}
					actx := context.WithoutCancel(ctx)
					if err := pgx.BeginFunc(actx, pool, func(tx pgx.Tx) error {
						_, err := tx.Exec(actx, insert("baseline"), dv.Message().ID)
						return err
					}); err != nil {
						_ = dv.Nack(actx, 0)
						continue
					}
					_ = dv.Ack(actx)
				}
			})
		}
		wg.Wait()
		return nil
	}
	withInbox := func(ctx context.Context, src broker.Source) error {
		return inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: workers})
	}
	queued := func(ctx context.Context, src broker.Source) error {
		return inbox.ConsumeQueued(ctx, ib, src, func(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
			q.Add(insert("queued"), m.ID)
			return nil
		}, &inbox.ConsumerConfig{Workers: workers})
	}
	batched := func(ctx context.Context, src broker.Source) error {
		return inbox.ConsumeBatch(ctx, ib, src, func(ctx context.Context, tx pgx.Tx, ms []*inbox.Message) error {
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.ID
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+schema+".ledger_batch (id) SELECT unnest($1::text[])", ids)
			return err
		}, &inbox.ConsumerConfig{Workers: workers, BatchSize: 100})
	}
	for _, run := range []struct {
		name    string
		consume func(context.Context, broker.Source) error
	}{{"baseline", baseline}, {"inbox", withInbox}, {"queued", queued}, {"batch", batched}} {
		b.Run(run.name, func(b *testing.B) {
			b.StopTimer()
			env := h.Open(b, 30*time.Second)
			prefix := testenv.Name(run.name + "-") // IDs new to the inbox on every run
			for i := range b.N {
				id := fmt.Sprintf("%s-%d", prefix, i)
				if err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Payload: []byte(id)}); err != nil {
					b.Fatal(err)
				}
			}
			var src broker.Source
			if run.name == "batch" && env.PrefetchSource != nil { // enough ahead to fill the batches
				src = env.PrefetchSource(b, workers*100)
			} else {
				src = env.Source(b)
			}
			before := ledgerCount(b, pool, schema+".ledger_"+run.name)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			deadline := time.Now().Add(time.Minute + time.Duration(b.N)*time.Millisecond)
			b.StartTimer()
			go func() { done <- run.consume(cctx, src) }()
			for ledgerCount(b, pool, schema+".ledger_"+run.name)-before < b.N {
				if time.Now().After(deadline) {
					cancel()
					b.Fatalf("%d of %d messages consumed before the deadline", ledgerCount(b, pool, schema+".ledger_"+run.name)-before, b.N)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchPublish measures a loop of Publish, one message at a time, each
// waiting for the broker's ack. A message has a 100-byte payload, an ID and
// a type. It is the baseline of a relay's publishing. Run it with
// -benchtime=1000x.
func BenchPublish(b *testing.B, h Harness) {
	env := h.Open(b, 30*time.Second)
	ctx := context.Background()
	payload := make([]byte, 100)
	prefix := testenv.Name("pub-") // new IDs: JetStream would drop a seen one
	i := 0
	for b.Loop() {
		i++
		if err := env.Publisher.Publish(ctx, &broker.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Subject: env.Subject, Type: "bench", Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func ledgerCount(b *testing.B, pool *pgxpool.Pool, table string) int {
	b.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
