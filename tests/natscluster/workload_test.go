package natscluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/killcount"
	"github.com/inboxkit/inbox/tests/internal/natscluster"
)

const (
	// durable is the one durable consumer that every inbox consumer shares.
	durable = "ledger"
	// consumerName is the inbox's Config.Consumer, the same in every one.
	consumerName = "ledger"
	// ackWait is the durable consumer's AckWait: what a delivery lost
	// with a node (or an ack lost with it) waits before its redelivery.
	ackWait = 5 * time.Second
	// dupWindow is the stream's duplicate window. The producer publishes
	// some IDs again after it, so that JetStream stores them twice and
	// the inbox must skip the second copy.
	dupWindow = time.Second
	// directEvery and outboxEvery pace the producer and the outbox writer,
	// at most 100 messages and 60 rows a second, so that the run spans the
	// kills.
	directEvery = 10 * time.Millisecond
	outboxEvery = 40 * time.Millisecond
)

// run is one test's cluster, schema, stream and what its parts observed.
type run struct {
	c      *natscluster.Cluster
	pool   *pgxpool.Pool // the checker's
	js     jetstream.JetStream
	schema string
	stream string
	direct int // messages the producer publishes at least
	outbox int // outbox rows the writer writes at least
	kills  int // leader kills
	logs   *logCounter
	log    *slog.Logger
	stop   chan struct{} // closed when the kills are done: producers may end

	mu        sync.Mutex
	directIDs []string        // acked by the stream
	outboxIDs []string        // committed
	relayed   map[string]int  // the relays' publications per ID
	outcomes  []time.Time     // of every Processed outcome
	counts    []*inbox.Counts // one per inbox consumer

	published   atomic.Int64 // publications that returned nil, direct and relayed
	repeats     atomic.Int64 // IDs published again after the duplicate window
	immediate   atomic.Int64 // IDs published again at once, within the window
	redelivered atomic.Int64 // deliveries with Message.Deliveries > 1
	maxStored   atomic.Int64 // the latest stream time of a processed message, Unix ns
	pubErrors   killcount.Counter
	relayErrors killcount.Counter
}

// connect opens a connection for one part of the run (a consumer, a
// relay), as a process of its own would: all three URLs, nats.go's
// reconnect defaults otherwise.
func (r *run) connect(t *testing.T, name string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(r.c.URLs(), nats.Name(name))
	if err != nil {
		t.Fatalf("connect %s to %s: %v", name, r.c.URLs(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (r *run) driver(t *testing.T, conns int32) (*pgxpool.Pool, *pgxstore.Driver) {
	t.Helper()
	pool := pgenv.Pool(t, conns)
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: r.schema}})
	if err != nil {
		t.Fatal(err)
	}
	return pool, d
}

// observer is an inbox hook that records redeliveries, the times of
// Processed outcomes and the stream time of the latest processed message.
type observer struct{ r *run }

func (o observer) OnStart(ctx context.Context, e *inbox.Event) context.Context {
	if e.Message.Deliveries > 1 {
		o.r.redelivered.Add(1)
	}
	return ctx
}

func (o observer) OnProcessed(_ context.Context, e *inbox.Event) {
	now := time.Now()
	o.r.mu.Lock()
	o.r.outcomes = append(o.r.outcomes, now)
	o.r.mu.Unlock()
	stored := e.Message.Time.UnixNano()
	for {
		cur := o.r.maxStored.Load()
		if stored <= cur || o.r.maxStored.CompareAndSwap(cur, stored) {
			return
		}
	}
}

// consumer prepares one inbox consumer on the shared durable: per message
// with four workers, or in batches of up to 16 with two. It returns the
// function that runs it until ctx ends.
func (r *run) consumer(ctx context.Context, t *testing.T, name string, batch bool) func(context.Context) error {
	t.Helper()
	_, d := r.driver(t, 6)
	counts := &inbox.Counts{}
	r.mu.Lock()
	r.counts = append(r.counts, counts)
	r.mu.Unlock()
	ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: consumerName, Hooks: []inbox.Hook{counts, observer{r}},
		Logger: r.log.With("consumer", name)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &natsjs.Config{Stream: r.stream, Durable: durable, AckWait: ackWait, Logger: r.log.With("source", name)}
	cc := &inbox.ConsumerConfig{Workers: 4, ShutdownTimeout: 5 * time.Second, Logger: r.log.With("consume", name)}
	if batch {
		cc.Workers, cc.BatchSize, cfg.PullBatch = 2, 16, 32
	}
	src, err := natsjs.NewSource(ctx, r.connect(t, name), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ledger := `INSERT INTO ` + r.schema + `.ledger (message_id, consumer, deliveries) VALUES ($1, $2, $3)`
	h := func(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
		_, err := tx.Exec(ctx, ledger, m.ID, name, m.Deliveries)
		return err
	}
	return func(ctx context.Context) error {
		defer func() { _ = src.Close() }()
		return inbox.Consume(ctx, ib, src, h, cc)
	}
}

// relay prepares one outbox relay, with its own pool and connection as a
// process of its own would have, and the library's defaults.
func (r *run) relay(ctx context.Context, t *testing.T, name string) func(context.Context) error {
	t.Helper()
	_, d := r.driver(t, 4)
	pub, err := natsjs.NewPublisher(r.connect(t, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	publish := outbox.ToBroker(pub)
	rl, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{
		Publish: func(ctx context.Context, m *outbox.Message) error {
			r.mu.Lock()
			r.relayed[m.ID]++
			r.mu.Unlock()
			err := publish(ctx, m)
			if err != nil {
				r.relayErrors.Add(errorKind(err))
			} else {
				r.published.Add(1)
			}
			return err
		},
		Logger: r.log.With("relay", name),
	})
	if err != nil {
		t.Fatal(err)
	}
	return rl.Run
}

// errorKind names a publication's failure without its ID.
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no stream response"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	case errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return "reconnecting"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// stopped reports whether the kills are done.
func (r *run) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// produce publishes the direct messages, at least r.direct and until the
// kills are done, retrying each until the stream acks it, as a producer
// does. Some go out twice at once (JetStream's duplicate window drops the
// second), some again after the window (the stream keeps both; the inbox
// must skip the second).
func (r *run) produce(ctx context.Context, t *testing.T) func(context.Context) error {
	t.Helper()
	pub, err := natsjs.NewPublisher(r.connect(t, "producer"), nil)
	if err != nil {
		t.Fatal(err)
	}
	type repeat struct {
		id  string
		due time.Time
	}
	return func(ctx context.Context) error {
		tick := time.NewTicker(directEvery)
		defer tick.Stop()
		var later []repeat
		for i := 0; i < r.direct || !r.stopped() || len(later) > 0; i++ {
			if i < r.direct || !r.stopped() {
				id := fmt.Sprintf("direct-%06d", i)
				if err := r.publish(ctx, pub, id); err != nil {
					return err
				}
				r.mu.Lock()
				r.directIDs = append(r.directIDs, id)
				r.mu.Unlock()
				switch i % 20 {
				case 7:
					if err := r.publish(ctx, pub, id); err != nil {
						return err
					}
					r.immediate.Add(1)
				case 13:
					later = append(later, repeat{id: id, due: time.Now().Add(dupWindow + 500*time.Millisecond)})
				}
			}
			for len(later) > 0 && time.Now().After(later[0].due) {
				if err := r.publish(ctx, pub, later[0].id); err != nil {
					return err
				}
				r.repeats.Add(1)
				later = later[1:]
			}
			<-tick.C
		}
		return nil
	}
}

// publish publishes id until the stream acks it, 2 s a try.
func (r *run) publish(ctx context.Context, pub *natsjs.Publisher, id string) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := pub.Publish(pctx, &broker.Message{ID: id, Subject: r.stream + ".direct", Type: "Direct", Payload: []byte(id)})
		cancel()
		if err == nil {
			r.published.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.pubErrors.Add(errorKind(err))
		time.Sleep(100 * time.Millisecond)
	}
}

// writeOutbox writes the outbox rows, one to four a transaction, at least
// r.outbox and until the kills are done.
func (r *run) writeOutbox(ctx context.Context, t *testing.T) func(context.Context) error {
	t.Helper()
	pool, d := r.driver(t, 2)
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) error {
		tick := time.NewTicker(outboxEvery)
		defer tick.Stop()
		for i := 0; i < r.outbox || !r.stopped(); {
			size := 1 + i%4
			msgs := make([]*outbox.Message, size)
			ids := make([]string, size)
			for j := range msgs {
				ids[j] = fmt.Sprintf("outbox-%06d", i+j)
				msgs[j] = &outbox.Message{ID: ids[j], Destination: r.stream + ".outbox", Type: "Outbox", Payload: []byte(ids[j])}
			}
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ob.Write(ctx, tx, msgs...) }); err != nil {
				return fmt.Errorf("outbox write: %w", err)
			}
			r.mu.Lock()
			r.outboxIDs = append(r.outboxIDs, ids...)
			r.mu.Unlock()
			i += size
			<-tick.C
		}
		return nil
	}
}
