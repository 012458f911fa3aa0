package brokertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// queuedFixture is an inbox on PostgreSQL (pgxstore, the one store that
// runs queued statements) in a fresh schema, with a ledger of effects, for
// the cases of inbox.ConsumeQueued. SQLite, the suite's other inbox,
// cannot run them.
type queuedFixture struct {
	pool   *pgxpool.Pool
	ledger string
	Inbox  *inbox.Inbox[pgx.Tx]
}

// newQueuedFixture makes a queuedFixture; it skips t without PostgreSQL
// (fails it when INBOX_REQUIRE_SERVICES=1). cfg's zero fields get
// NewFixture's defaults.
func newQueuedFixture(t *testing.T, cfg inbox.Config) *queuedFixture {
	t.Helper()
	pool := pgenv.Pool(t, 8)
	ctx := context.Background()
	schema := testenv.Name("brokerq_")
	ledger := schema + ".ledger"
	// n's CHECK lets a case make a queued statement fail.
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+ledger+" (id text NOT NULL, n int NOT NULL DEFAULT 0 CHECK (n >= 0))"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "brokertest"
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = inbox.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	}
	ib, err := inbox.New(ctx, d, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &queuedFixture{pool: pool, ledger: ledger, Inbox: ib}
}

// Write queues the effect of m: it is a QueuedHandler.
func (f *queuedFixture) Write(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
	q.Add("INSERT INTO "+f.ledger+" (id) VALUES ($1)", m.ID)
	return nil
}

// Effects counts the effects of message id.
func (f *queuedFixture) Effects(t *testing.T, id string) int {
	t.Helper()
	return f.count(t, "SELECT count(*) FROM "+f.ledger+" WHERE id = $1", id)
}

// Count counts the distinct messages with an effect.
func (f *queuedFixture) Count(t *testing.T) int {
	t.Helper()
	return f.count(t, "SELECT count(DISTINCT id) FROM "+f.ledger)
}

func (f *queuedFixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Consume runs inbox.ConsumeQueued in the background until the test ends
// or stop is called; stop waits for it, closes src and returns its error.
func (f *queuedFixture) Consume(t *testing.T, src broker.Source, h inbox.QueuedHandler, cfg *inbox.ConsumerConfig) (stop func() error) {
	t.Helper()
	return inBackground(t, src, "ConsumeQueued", func(ctx context.Context) error { return inbox.ConsumeQueued(ctx, f.Inbox, src, h, cfg) })
}

// A consumer stopped abruptly in the middle of a run, its handlers
// canceled after a tiny ShutdownTimeout, loses nothing and applies
// nothing twice: a new consumer on a new source finishes the run, and
// every message, republished ones included, has exactly one effect.
func testQueuedEffectOnce(t *testing.T, h Harness) {
	const n, workers, crashAt = 60, 4, 20
	const ackWait = 2 * time.Second
	env := h.Open(t, ackWait)
	hooks := &inbox.Counts{}
	f := newQueuedFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	for i := range n {
		publish(t, env, fmt.Sprintf("q-%02d", i))
	}
	for i := range n / 2 { // dropped by a broker with Features.Dedup
		publish(t, env, fmt.Sprintf("q-%02d", i))
	}
	// From the crashAt-th call on, a handler hangs until the shutdown
	// cancels it: the crash finds deliveries in flight.
	var calls atomic.Int32
	hung := make(chan struct{}, n)
	crashing := func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
		if calls.Add(1) >= crashAt {
			hung <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return f.Write(ctx, q, m)
	}
	stop := f.Consume(t, env.Source(t), crashing, &inbox.ConsumerConfig{Workers: workers, ShutdownTimeout: time.Millisecond})
	for range workers {
		await(t, hung, "the handlers never reached the crash")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c := f.Count(t); c >= n {
		t.Fatalf("all %d messages had an effect before the crash: the test crashes too late", c)
	}

	// Every delivery is acked once it is Processed or a Duplicate: wait
	// for all of them, as a republished copy may take effect before a
	// nacked original comes back.
	deliveries := int64(n + n/2)
	if h.Features.Dedup {
		deliveries = n
	}
	stop = f.Consume(t, env.Source(t), f.Write, &inbox.ConsumerConfig{Workers: workers})
	Eventually(t, 30*time.Second, "not every delivery was processed or skipped after the crash", func() bool {
		return hooks.Processed.Load()+hooks.Duplicates.Load() >= deliveries
	})
	if c := f.Count(t); c != n {
		t.Fatalf("%d messages with an effect after the crash, want %d (outcomes: %v)", c, n, hooks)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, ackWait)
	for i := range n {
		if e := f.Effects(t, fmt.Sprintf("q-%02d", i)); e != 1 {
			t.Fatalf("message q-%02d has %d effects, want 1 (outcomes: %v)", i, e, hooks)
		}
	}
	if hooks.DeadLettered.Load() != 0 {
		t.Fatalf("outcomes: %v; want no dead letter", hooks)
	}
}

// A consumer that dies after its commit, before its ack: the broker
// redelivers the message, ConsumeQueued skips it as a duplicate and acks
// it, and its statements apply nothing.
func testQueuedRedeliveryIsDuplicate(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := newQueuedFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	publish(t, env, "q-dup")
	processThenDie(t, env, func(m inbox.Message) (inbox.Outcome, error) { return f.Inbox.ProcessQueued(ctx, m, f.Write) })

	var calls atomic.Int32
	counting := func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
		calls.Add(1)
		return f.Write(ctx, q, m)
	}
	stop := f.Consume(t, env.Source(t), counting, nil)
	Eventually(t, 15*time.Second, "the redelivery was not skipped as a duplicate", func() bool { return hooks.Duplicates.Load() >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second) // the duplicate
	if n := f.Effects(t, "q-dup"); n != 1 || hooks.Duplicates.Load() != 1 || calls.Load() != 1 {
		t.Fatalf("%d effects, %d duplicates, the handler ran %d times for the redelivery; want 1, 1 and 1 (it runs before the claim)",
			n, hooks.Duplicates.Load(), calls.Load())
	}
}

// A QueuedHandler that fails is retried after the backoff's delay, and
// then succeeds; its effect applies once.
func testQueuedRetryThenSuccess(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := newQueuedFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}, Backoff: inbox.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Jitter: -1}})
	var calls atomic.Int32
	handler := func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
		if err := f.Write(ctx, q, m); err != nil {
			return err
		}
		if n := calls.Add(1); n < 3 {
			return fmt.Errorf("transient failure %d", n) // what it queued is dropped
		}
		return nil
	}
	publish(t, env, "q-retry")
	stop := f.Consume(t, env.Source(t), handler, nil)
	Eventually(t, 15*time.Second, "the message was never processed", func() bool { return hooks.Processed.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	if c, e := calls.Load(), f.Effects(t, "q-retry"); c != 3 || e != 1 || hooks.Retries.Load() != 2 {
		t.Fatalf("handler ran %d times, %d effects, outcomes %v; want 3 runs, 1 effect, 2 retries and 1 processed", c, e, hooks)
	}
}

// A queued statement that fails (a CHECK violation) is the handler's
// failure: nothing of its round trip applies, not even the statements
// before it, and the message is retried; one that always fails is
// dead-lettered at MaxAttempts with its payload, and acked.
func testQueuedFailedStatement(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := newQueuedFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}, MaxAttempts: 3,
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}})
	var mu sync.Mutex
	calls := map[string]int{}
	handler := func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		first := calls[m.ID] == 1
		mu.Unlock()
		q.Add("INSERT INTO "+f.ledger+" (id) VALUES ($1)", m.ID)
		if m.ID == "q-poison" || first {
			q.Add("INSERT INTO "+f.ledger+" (id, n) VALUES ($1, -1)", m.ID) // violates the CHECK
		}
		return nil
	}
	publish(t, env, "q-check")
	publish(t, env, "q-poison")
	stop := f.Consume(t, env.Source(t), handler, nil)
	Eventually(t, 15*time.Second, "the two messages were not settled", func() bool {
		return hooks.Processed.Load() == 1 && hooks.DeadLettered.Load() == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	mu.Lock()
	defer mu.Unlock()
	if e := f.Effects(t, "q-check"); e != 1 || calls["q-check"] != 2 {
		t.Fatalf("q-check: handler ran %d times, %d effects; want 2 runs (the first failed) and 1 effect", calls["q-check"], e)
	}
	if e := f.Effects(t, "q-poison"); e != 0 || calls["q-poison"] != 3 {
		t.Fatalf("q-poison: handler ran %d times, %d effects; want 3 runs (MaxAttempts) and no effect", calls["q-poison"], e)
	}
	dls, err := f.Inbox.DeadLetters(context.Background(), nil)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != "q-poison" || dls[0].Attempts != 3 || string(dls[0].Message.Payload) != "payload of q-poison" {
		t.Fatalf("dead letters %+v (%v); want q-poison's, after 3 attempts, with its payload", dls, err)
	}
	if hooks.Retries.Load() != 3 {
		t.Fatalf("outcomes %v; want 3 retries: q-check's first attempt and q-poison's first two", hooks)
	}
}

// ConsumeQueued stopped right after its last commit leaves nothing
// unacked, with the source holding deliveries ahead: a fresh source
// receives nothing but the ack check's markers (see testShutdownAcks).
func testQueuedShutdownAcks(t *testing.T, h Harness) {
	const n, workers, prefetch = 200, 4, 64
	const ackWait = 5 * time.Second
	env := h.Open(t, ackWait)
	hooks := &inbox.Counts{}
	last := &lastCommit{n: n, done: make(chan struct{})}
	f := newQueuedFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks, last}})
	for i := range n {
		publish(t, env, fmt.Sprintf("qs-%03d", i))
	}
	var src broker.Source
	if env.PrefetchSource != nil {
		src = env.PrefetchSource(t, prefetch)
	} else {
		src = env.Source(t)
	}
	stop := f.Consume(t, src, f.Write, &inbox.ConsumerConfig{Workers: workers})
	select {
	case <-last.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("after 60 s: not every message was committed (%v)", hooks)
	}
	if err := stop(); err != nil { // at once: the last acks are being sent
		t.Fatal(err)
	}
	dups := hooks.Duplicates.Load() != 0 && !h.Features.AckWait
	if hooks.Processed.Load() != n || hooks.Retries.Load() != 0 || hooks.DeadLettered.Load() != 0 || dups || f.Count(t) != n {
		t.Fatalf("outcomes: %v, %d messages with an effect; want %d processed and nothing else", hooks, f.Count(t), n)
	}
	requireAcked(t, h, env, ackWait)
}
