package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// db is a fresh schema with the inbox's tables (the outbox's among them).
type db struct {
	pool   *pgxpool.Pool
	driver *pgxstore.Driver
	ob     *outbox.Outbox[pgx.Tx]
	table  string // the outbox table's name
}

func openDB(tb testing.TB) *db {
	tb.Helper()
	ctx := context.Background()
	schema := testenv.Name("outboxtest_")
	pool := pgenv.PoolNamed(tb, 20, schema)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := inbox.Migrate(ctx, d); err != nil {
		tb.Fatal(err)
	}
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &db{pool: pool, driver: d, ob: ob, table: store.Tables{Schema: schema}.Name("outbox", store.QuoteDouble)}
}

// write writes n messages to subject in transactions of up to 500.
func (d *db) write(tb testing.TB, subject, prefix string, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		var msgs []*outbox.Message
		for j := i; j < min(i+500, n); j++ {
			msgs = append(msgs, &outbox.Message{ID: fmt.Sprintf("%s-%d", prefix, j), Destination: subject,
				Key: fmt.Sprintf("k-%d", j%16), Type: "bench", Payload: make([]byte, 100)})
		}
		if err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return d.ob.Write(ctx, tx, msgs...) }); err != nil {
			tb.Fatal(err)
		}
	}
}

func (d *db) relay(tb testing.TB, pub broker.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	tb.Helper()
	cfg.Publish = outbox.ToBroker(pub)
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := outbox.NewRelay(context.Background(), d.driver, &cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// target is a broker destination: a publisher and a subject on it, and a
// way to count what arrived there.
type target struct {
	pub     broker.Publisher
	subject string
	source  func(tb testing.TB) broker.Source
}

func natsTarget(tb testing.TB) target {
	tb.Helper()
	ctx := context.Background()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		testenv.Unavailable(tb, "NATS at "+testenv.NATSURL(), err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	name := testenv.Name("OUTBOXTEST_")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return target{pub: pub, subject: name + ".events", source: func(tb testing.TB) broker.Source {
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "reader"})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { src.Close() })
		return src
	}}
}

func rabbitTarget(tb testing.TB) target {
	tb.Helper()
	ctx := context.Background()
	queue := testenv.Name("outboxtest_")
	cfg := &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue}
	if err := rabbitmq.Declare(ctx, cfg); err != nil {
		testenv.Unavailable(tb, "RabbitMQ at "+testenv.AMQPURL(), err)
	}
	pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: testenv.AMQPURL()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pub.Close() })
	tb.Cleanup(func() {
		if conn, err := amqp.Dial(testenv.AMQPURL()); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(queue, false, false, false)
			}
			_ = conn.Close()
		}
	})
	return target{pub: pub, subject: queue, source: func(tb testing.TB) broker.Source {
		src, err := rabbitmq.NewSource(ctx, cfg)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = src.Close() })
		return src
	}}
}

func kafkaTarget(tb testing.TB) target {
	tb.Helper()
	topic := "outbox-events"
	c, pub := kafkaCluster(tb, topic, 4)
	return target{pub: pub, subject: topic, source: func(tb testing.TB) broker.Source {
		src, err := kafka.NewSource(context.Background(), &kafka.Config{Brokers: c.ListenAddrs(), Topic: topic, Group: "reader"})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = src.Close() })
		return src
	}}
}

// kafkaCluster starts a kfake cluster of one broker with topic in
// partitions, and a Publisher to it; both end with tb.
func kafkaCluster(tb testing.TB, topic string, partitions int32) (*kfake.Cluster, broker.Publisher) {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	pub, err := kafka.NewPublisher(cl, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c, pub
}

// latencyRate is BenchmarkRelayLatency's writes per second.
var latencyRate = func() int {
	if n, err := strconv.Atoi(os.Getenv("INBOX_LATENCY_RATE")); err == nil && n > 0 {
		return n
	}
	return 1000
}()

func sqsTarget(tb testing.TB) target {
	tb.Helper()
	cl := sqsenv.Client()
	queue := sqsenv.Queue(tb, false)
	pub, err := sqs.NewPublisher(cl, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return target{pub: pub, subject: queue, source: func(tb testing.TB) broker.Source {
		src, err := sqs.NewSource(context.Background(), &sqs.Config{Client: cl, Queue: queue, WaitTime: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = src.Close() })
		return src
	}}
}

// TestMain makes the SQS emulator's queues before any traffic (see
// sqsenv).
func TestMain(m *testing.M) {
	if err := sqsenv.Precreate(8, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

var targets = []struct {
	name string
	open func(testing.TB) target
}{
	{"nats", natsTarget},
	{"rabbitmq", rabbitTarget},
	{"kafka", kafkaTarget},
	{"sqs", sqsTarget},
}

// What the relay publishes arrives at each broker once per ID, with its
// key and type, and in each key's order with Ordered (where the broker
// keeps order: not an SQS standard queue).
func TestRelayToBrokers(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			d, dst := openDB(t), tg.open(t)
			const n = 200
			d.write(t, dst.subject, "m", n)
			r := d.relay(t, dst.pub, outbox.RelayConfig{Ordered: true, Batch: 16})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			src := dst.source(t)
			seen := map[string]int{}
			last := map[string]int{}
			for len(seen) < n {
				nctx, ncancel := context.WithTimeout(ctx, 15*time.Second)
				dl, err := src.Next(nctx)
				ncancel()
				if err != nil {
					t.Fatalf("after %d of %d messages: %v", len(seen), n, err)
				}
				m := dl.Message()
				var i int
				if _, err := fmt.Sscanf(m.ID, "m-%d", &i); err != nil || m.Type != "bench" || len(m.Payload) != 100 {
					t.Fatalf("received %+v", m)
				}
				k := fmt.Sprintf("k-%d", i%16)
				if tg.name == "kafka" && m.Key != k {
					t.Fatalf("%s arrived with key %q, want %q", m.ID, m.Key, k)
				}
				// An SQS standard queue keeps no order: only the others
				// can show the relay's.
				if prev, ok := last[k]; ok && i < prev && seen[m.ID] == 0 && tg.name != "sqs" {
					t.Fatalf("%s arrived after m-%d: out of its key's order", m.ID, prev)
				}
				last[k] = i
				seen[m.ID]++
				if err := dl.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var dups []string
			for id, c := range seen {
				if c > 1 {
					dups = append(dups, id)
				}
			}
			slices.Sort(dups)
			if len(dups) > 0 {
				t.Fatalf("published twice without a crash: %q", dups)
			}
			var left int
			if err := d.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+d.table).Scan(&left); err != nil || left != 0 {
				t.Fatalf("%d rows left in the outbox (%v), want 0", left, err)
			}
		})
	}
}

// BenchmarkRelay measures the relay from PostgreSQL to each broker side by
// side with a loop that publishes the same messages directly (one at a
// time, each waiting for its ack), and the relay publishing one at a time
// (parallel=1). Each reports msgs/s: compare relay with direct.
func BenchmarkRelay(b *testing.B) {
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			d, dst := openDB(b), tg.open(b)
			ctx := context.Background()
			b.Run("direct", func(b *testing.B) {
				for i := range b.N {
					m := &broker.Message{ID: fmt.Sprintf("direct-%d-%d", b.N, i), Subject: dst.subject, Key: fmt.Sprintf("k-%d", i%16),
						Type: "bench", Payload: make([]byte, 100)}
					if err := dst.pub.Publish(ctx, m); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
			for _, parallel := range []int{1, outbox.DefaultParallel} {
				b.Run(fmt.Sprintf("relay/parallel=%d", parallel), func(b *testing.B) {
					b.StopTimer()
					d.write(b, dst.subject, fmt.Sprintf("relay-%d-%d", parallel, b.N), b.N)
					r := d.relay(b, dst.pub, outbox.RelayConfig{Parallel: parallel})
					b.StartTimer()
					published := 0
					for published < b.N {
						res, err := r.RelayOnce(ctx)
						if err != nil {
							b.Fatal(err)
						}
						if res.Claimed == 0 {
							b.Fatalf("%d of %d published, then nothing to claim", published, b.N)
						}
						published += res.Published
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				})
			}
		})
	}
}

// BenchmarkRelayLatency measures the time from a writer's COMMIT to the
// broker's ack of the relay's publication (p50, p99), with one relay woken
// by LISTEN/NOTIFY, while writers commit one message per transaction at a
// fixed rate: INBOX_LATENCY_RATE a second, default 1000 (about half of
// what one writer commits here, a third of 8 writers).
func BenchmarkRelayLatency(b *testing.B) {
	for _, tg := range targets[:2] {
		b.Run(tg.name, func(b *testing.B) {
			d, dst := openDB(b), tg.open(b)
			var mu sync.Mutex
			committed := map[string]time.Time{}
			var lat []time.Duration
			cfg := outbox.RelayConfig{Logger: slog.New(slog.DiscardHandler)}
			pub := outbox.ToBroker(dst.pub)
			cfg.Publish = func(ctx context.Context, m *outbox.Message) error {
				if err := pub(ctx, m); err != nil {
					return err
				}
				mu.Lock()
				if at, ok := committed[m.ID]; ok {
					lat = append(lat, time.Since(at))
				}
				mu.Unlock()
				return nil
			}
			r, err := outbox.NewRelay(context.Background(), d.driver, &cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			time.Sleep(100 * time.Millisecond)
			tick := time.NewTicker(time.Second / time.Duration(latencyRate))
			defer tick.Stop()
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range b.N {
				<-tick.C
				id := fmt.Sprintf("lat-%d-%d", b.N, i)
				wg.Go(func() {
					tx, err := d.pool.Begin(ctx)
					if err == nil {
						err = d.ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: dst.subject, Payload: make([]byte, 100)})
					}
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					committed[id] = time.Now() // just before COMMIT: the latency includes it
					mu.Unlock()
					if err := tx.Commit(ctx); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				n := len(lat)
				mu.Unlock()
				if n >= b.N || time.Now().After(deadline) {
					break
				}
			}
			b.StopTimer()
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			if len(lat) == 0 {
				b.Fatal("nothing published")
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
