package outboxcrash

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// The children's environment: what the parent tells each process.
const (
	envRole   = "INBOX_OUTBOXCRASH_ROLE"   // producer, relay1, relay2, consumer2, consumer3
	envSchema = "INBOX_OUTBOXCRASH_SCHEMA" // the test's schema
	envStream = "INBOX_OUTBOXCRASH_STREAM" // stage 1's JetStream stream
	envQueue  = "INBOX_OUTBOXCRASH_QUEUE"  // stage 2's RabbitMQ queue
	envTotal  = "INBOX_OUTBOXCRASH_TOTAL"  // orders the producer attempts
	envPoint  = "INBOX_OUTBOXCRASH_POINT"  // where this process dies
	envAt     = "INBOX_OUTBOXCRASH_AT"     // at the point's at-th occurrence
	envK      = "INBOX_OUTBOXCRASH_K"      // mid-batch: after k publications of the batch
	envDelay  = "INBOX_OUTBOXCRASH_DELAY"  // random: this long (ms) after the first work
)

// The table prefixes: the producer's outbox, and each consumer stage's
// inbox (and stage 2's outbox), as if they were three services' databases.
const (
	prefixProducer = "p_"
	prefixStage2   = "s2_"
	prefixStage3   = "s3_"
)

// childEnv is what a child reads from its environment.
type childEnv struct {
	schema, stream, queue string
	total                 int
	plan                  plan
}

func readEnv() childEnv {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	return childEnv{
		schema: os.Getenv(envSchema), stream: os.Getenv(envStream), queue: os.Getenv(envQueue), total: atoi(envTotal),
		plan: plan{point: os.Getenv(envPoint), at: atoi(envAt), k: atoi(envK), delay: time.Duration(atoi(envDelay)) * time.Millisecond},
	}
}

func (p plan) env() []string {
	return []string{envPoint + "=" + p.point, envAt + "=" + strconv.Itoa(p.at), envK + "=" + strconv.Itoa(p.k),
		envDelay + "=" + strconv.Itoa(int(p.delay.Milliseconds()))}
}

// plan says where a child kills itself with SIGKILL.
type plan struct {
	// point is one of the relay's (after-claim, after-publish, mid-batch),
	// the producer's before-commit, or random.
	point string
	// at: the point's at-th occurrence (a claim, a delete, a batch, a
	// transaction).
	at int
	// k: mid-batch, the publications of the batch before dying.
	k int
	// delay: random, the time from the process's first work to its death.
	delay time.Duration
}

// killer carries out a plan in the child.
type killer struct {
	plan
	mu        sync.Mutex
	hits      int // occurrences of plan.point so far
	batches   int // claims that returned rows
	batch     int // rows of the current claim
	published int // of the current claim
	arm       sync.Once
}

// die kills the process at once, as a power cut or the OOM killer would:
// no deferred function, no shutdown, no flush.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// started arms the random death on the process's first work, so that a
// child does some work before it dies whatever its start-up cost.
func (k *killer) started() {
	if k.point == "random" {
		k.arm.Do(func() { time.AfterFunc(k.delay, die) })
	}
}

// reached counts an occurrence of point and dies at the plan's.
func (k *killer) reached(point string) {
	if point != k.point {
		return
	}
	k.mu.Lock()
	k.hits++
	hit := k.hits >= k.at
	k.mu.Unlock()
	if hit {
		die()
	}
}

// claimed: a claim returned n rows, none published yet.
func (k *killer) claimed(n int) {
	k.started()
	k.mu.Lock()
	k.batches++
	k.batch, k.published = n, 0
	k.mu.Unlock()
	k.reached("after-claim")
}

// publishedOne: the broker confirmed one row of the current claim. Mid-
// batch dies after k of them, with at least one more left to publish.
func (k *killer) publishedOne() {
	if k.point != "mid-batch" {
		return
	}
	k.mu.Lock()
	k.published++
	hit := k.batches >= k.at && k.batch >= 2 && k.published == min(k.k, k.batch-1)
	k.mu.Unlock()
	if hit {
		die()
	}
}

// relayDriver is pgxstore's driver with the relay's kill points: after a
// claim (rows leased, none published) and before the delete of published
// rows. Embedding keeps its other methods, OutboxListen included.
type relayDriver struct {
	*pgxstore.Driver
	k *killer
}

func (d *relayDriver) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*store.OutboxRecord, error) {
	recs, err := d.Driver.OutboxClaim(ctx, p)
	if err == nil && len(recs) > 0 {
		d.k.claimed(len(recs))
	}
	return recs, err
}

func (d *relayDriver) OutboxDelete(ctx context.Context, token []byte, seqs []int64) (int, error) {
	d.k.reached("after-publish")
	return d.Driver.OutboxDelete(ctx, token, seqs)
}

func child(role string) error {
	e := readEnv()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgenv.DSN())
	if err != nil {
		return err
	}
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	k := &killer{plan: e.plan}
	if role == "producer" {
		return produce(ctx, pool, e, k)
	}
	// Everyone else runs until the parent says stop.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for ctx.Err() == nil {
			var stopped bool
			if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+e.schema+".ctl WHERE k = 'stop')").Scan(&stopped); err == nil && stopped {
				stop()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	switch role {
	case "relay1":
		return relay(ctx, pool, e, 1, k)
	case "relay2":
		return relay(ctx, pool, e, 2, k)
	case "consumer2":
		return consume(ctx, pool, e, 2, k)
	case "consumer3":
		return consume(ctx, pool, e, 3, k)
	}
	return fmt.Errorf("unknown role %q", role)
}

func driver(pool *pgxpool.Pool, schema, prefix string) (*pgxstore.Driver, error) {
	return pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema, Prefix: prefix}})
}

// produce writes the orders from where the last producer's committed ones
// end: each transaction inserts its orders into the ledger and their
// messages into the outbox, or rolls them all back (the groups the
// parent knows to expect nowhere).
func produce(ctx context.Context, pool *pgxpool.Pool, e childEnv, k *killer) error {
	d, err := driver(pool, e.schema, prefixProducer)
	if err != nil {
		return err
	}
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		return err
	}
	var start int
	if err := pool.QueryRow(ctx, "SELECT coalesce(max(n) + 1, 0) FROM "+e.schema+".orders").Scan(&start); err != nil {
		return err
	}
	for i := start; i < e.total; {
		size, rollback := group(i)
		size = min(size, e.total-i)
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			msgs := make([]*outbox.Message, 0, size)
			for j := i; j < i+size; j++ {
				id := orderID(j)
				if _, err := tx.Exec(ctx, "INSERT INTO "+e.schema+".orders (id, n) VALUES ($1, $2)", id, j); err != nil {
					return err
				}
				msgs = append(msgs, &outbox.Message{ID: id, Destination: e.stream + ".orders", Type: "OrderPlaced", Payload: []byte(id)})
			}
			if err := ob.Write(ctx, tx, msgs...); err != nil {
				return err
			}
			k.reached("before-commit")
			if rollback {
				return errRollback
			}
			return nil
		}); err != nil && !errors.Is(err, errRollback) {
			return err
		}
		i += size
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond) // orders arrive over time, as relays run
	}
	_, err = pool.Exec(ctx, "INSERT INTO "+e.schema+".ctl (k) VALUES ('produced') ON CONFLICT DO NOTHING")
	return err
}

var errRollback = errors.New("rolled back on purpose")

// relay relays a stage's outbox: stage 1's (the producer's) to JetStream,
// stage 2's (the first consumer's follow-ups) to RabbitMQ.
func relay(ctx context.Context, pool *pgxpool.Pool, e childEnv, stage int, k *killer) error {
	prefix := prefixProducer
	if stage == 2 {
		prefix = prefixStage2
	}
	inner, err := driver(pool, e.schema, prefix)
	if err != nil {
		return err
	}
	var pub broker.Publisher
	if stage == 1 {
		js, closeNATS, err := jetStream()
		if err != nil {
			return err
		}
		defer closeNATS()
		if pub, err = natsjs.NewPublisher(js, nil); err != nil {
			return err
		}
	} else {
		rp, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: testenv.AMQPURL()})
		if err != nil {
			return err
		}
		defer func() { _ = rp.Close() }()
		pub = rp
	}
	publish := outbox.ToBroker(pub)
	r, err := outbox.NewRelay(ctx, &relayDriver{Driver: inner, k: k}, &outbox.RelayConfig{
		Publish: func(ctx context.Context, m *outbox.Message) error {
			if err := publish(ctx, m); err != nil {
				return err
			}
			k.publishedOne()
			return nil
		},
		Batch: relayBatch, Lease: relayLease, PublishTimeout: relayLease / 2, PollInterval: 200 * time.Millisecond,
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// consume applies a stage's messages through its inbox: stage 2 records a
// payment and, in the same transaction, writes the follow-up to its
// outbox with a derived ID; stage 3 records a shipment.
func consume(ctx context.Context, pool *pgxpool.Pool, e childEnv, stage int, k *killer) error {
	prefix, name := prefixStage3, "stage3"
	if stage == 2 {
		prefix, name = prefixStage2, "stage2"
	}
	d, err := driver(pool, e.schema, prefix)
	if err != nil {
		return err
	}
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: name, Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		Hooks: []inbox.Hook{&events{pool: pool, schema: e.schema, stage: name}}})
	if err != nil {
		return err
	}
	var (
		src broker.Source
		h   inbox.Handler[pgx.Tx]
	)
	if stage == 2 {
		ob, err := outbox.New(ctx, d, nil)
		if err != nil {
			return err
		}
		js, closeNATS, err := jetStream()
		if err != nil {
			return err
		}
		defer closeNATS()
		if src, err = natsjs.NewSource(ctx, js, &natsjs.Config{Stream: e.stream, Durable: name, AckWait: time.Second}); err != nil {
			return err
		}
		h = func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
			k.started()
			if _, err := tx.Exec(ctx, "INSERT INTO "+e.schema+".payments (order_id, message_id) VALUES ($1, $2)", string(m.Payload), m.ID); err != nil {
				return err
			}
			return ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID(name, m.ID, "ship"), Destination: e.queue,
				Type: "ShipOrder", Payload: m.Payload})
		}
	} else {
		if src, err = rabbitmq.NewSource(ctx, rabbitConfig(e.queue)); err != nil {
			return err
		}
		h = func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
			k.started()
			_, err := tx.Exec(ctx, "INSERT INTO "+e.schema+".shipments (order_id, message_id) VALUES ($1, $2)", string(m.Payload), m.ID)
			return err
		}
	}
	defer func() { _ = src.Close() }()
	return inbox.Consume(ctx, ib, src, h, &inbox.ConsumerConfig{Workers: 4, ShutdownTimeout: 2 * time.Second})
}

// events records the inbox's duplicates and fingerprint conflicts, best
// effort and outside its transactions, so that the parent can tell that
// redeliveries were deduplicated (and that no ID came with another
// payload).
type events struct {
	pool          *pgxpool.Pool
	schema, stage string
}

func (e *events) record(kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = e.pool.Exec(ctx, "INSERT INTO "+e.schema+".events (stage, kind) VALUES ($1, $2)", e.stage, kind)
}

func (e *events) OnDuplicate(context.Context, *inbox.Event) { e.record("duplicate") }
func (e *events) OnFingerprintConflict(context.Context, *inbox.Event) {
	e.record("fingerprint-conflict")
}

func jetStream() (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// rabbitConfig is stage 3's queue, the same for the parent's declaration
// and the consumers': a quorum queue with a delivery limit far above what
// the kills cause (RabbitMQ 4 drops a message after 20 returns by
// default, and each kill returns every prefetched delivery).
func rabbitConfig(queue string) *rabbitmq.Config {
	return &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue, DeliveryLimit: 10000}
}
