// Package brokertest is the one conformance suite of the broker adapters.
//
// Each adapter's test file runs it against a real broker. The inbox is on
// SQLite, and the consumer runtime, inbox.Consume, sits in between. The
// Queued cases run inbox.ConsumeQueued with the inbox on PostgreSQL, through
// pgxstore. They skip without it, unless INBOX_REQUIRE_SERVICES=1.
//
//	func TestBroker(t *testing.T) { brokertest.Run(t, harness) }
package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// Features says what a broker or its harness can do. A case that needs
// what an adapter lacks skips, saying which feature is missing.
type Features struct {
	// Restart means that Env.Restart restarts the broker, an embedded server.
	Restart bool
	// Deliveries means that broker.Message.Deliveries counts a message's
	// deliveries. It is 1, then 2 after a Nack. Without it the adapter reports
	// 0.
	Deliveries bool
	// AckWait means that a delivery not acked within the ackWait given to
	// Harness.Open comes back while its consumer still runs, as with
	// JetStream's AckWait. Without it, Open's ackWait means nothing. An unacked
	// delivery then comes back only once its source is closed. RabbitMQ
	// requeues a closed channel's deliveries, and a Kafka group reads again
	// from its committed offset.
	AckWait bool
	// Lease means that Env.Source returns a broker.LeaseSource, and InProgress
	// starts a delivery's AckWait again. It needs AckWait. Without it a delivery
	// has no lease to extend, and the source must not be a LeaseSource.
	Lease bool
	// Dedup means that the broker drops a message published again with an ID
	// it has seen, as in JetStream's duplicate window. Without it the
	// re-publish is delivered, and the inbox skips it as a duplicate.
	Dedup bool
	// Keys means that broker.Message.Key arrives as published, as Kafka's
	// record key does. Without it the adapter ignores Key and delivers it
	// empty.
	Keys bool
	// PayloadLimit means that Publish refuses a payload over Env.MaxPayload
	// bytes.
	PayloadLimit bool
	// HeaderLimits means that the broker cannot carry some headers, which
	// Env.BadHeaders lists, and Publish refuses them.
	HeaderLimits bool
	// OwnHeaders means that the broker has headers of its own, which
	// Env.OwnHeaders lists and Env.PublishRaw sends. Sources leave them out of
	// broker.Message.Headers, and Publishers never send them. Without it every
	// header the broker delivers is the producer's.
	OwnHeaders bool
	// PublishTime means that broker.Message.Time is when the message was
	// published, within a second, since AMQP's timestamp has whole seconds.
	// Without it the adapter reports the zero time.
	PublishTime bool
}

// Env is one fresh destination on the broker, such as a stream or a queue.
type Env struct {
	// Source returns a new consumer of the destination, as a restarted process
	// would make. It shares the broker's state of the messages with the earlier
	// ones, such as what is acked and what is in flight.
	Source func(tb testing.TB) broker.Source
	// PrefetchSource, when set, returns a new consumer like Source's that holds
	// n deliveries ahead. RabbitMQ's prefetch and JetStream's pull batch do
	// that. Without it the suite uses Source.
	PrefetchSource func(tb testing.TB, n int) broker.Source
	// Publisher publishes to the destination. Subject is where.
	Publisher broker.Publisher
	Subject   string
	// Partitions is the number of partitions of the destination, over which
	// Publisher spreads messages round-robin. A value of 0 means one ordered
	// queue. Order holds within a partition only, so the ack check publishes
	// one marker per partition.
	Partitions int
	// PublishNoID publishes a payload without a producer ID.
	PublishNoID func(ctx context.Context, payload []byte) error
	// Restart stops and starts the broker. It is for Features.Restart only.
	Restart func(tb testing.TB)
	// Nowhere is a subject that Publisher's broker refuses. No stream captures
	// it, no queue is bound to it, or there is no such topic. Required.
	Nowhere string
	// MaxPayload is the size of the largest payload the broker takes. It is for
	// Features.PayloadLimit only.
	MaxPayload int
	// BadHeaders are headers the broker cannot carry, one case each. They are
	// for Features.HeaderLimits only.
	BadHeaders []map[string]string
	// OwnHeaders are headers of the broker's own, with values it takes from a
	// producer. They are for Features.OwnHeaders only.
	OwnHeaders map[string]string
	// PublishRaw publishes a message with ID id and headers as they are to
	// Subject. It uses the broker's own client rather than Publisher. It is for
	// Features.OwnHeaders only.
	PublishRaw func(ctx context.Context, id string, headers map[string]string) error
	// MaxHeaders is the most headers a message of the suite can carry besides
	// its ID and type. SQS takes ten message attributes in all. A value of 0
	// means no limit. The fields check then spreads its headers over several
	// messages.
	MaxHeaders int
}

// Harness opens environments for the suite.
type Harness struct {
	Features Features
	// Open returns a fresh destination whose unacked deliveries come back after
	// ackWait. Without Features.AckWait, ackWait is ignored.
	Open func(tb testing.TB, ackWait time.Duration) *Env
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
		need func(Features) bool
	}{
		{"UnackedComesBack", testUnackedComesBack, nil},
		{"RedeliveryAfterCrashIsDuplicate", testRedeliveryAfterCrash, nil},
		{"RetryWithDelayThenSuccess", testRetryThenSuccess, nil},
		{"RetriesDoNotBlock", testRetriesDoNotBlock, nil},
		{"PoisonDeadLetteredAtMaxAttempts", testPoison, nil},
		{"MissingIDDeadLettered", testMissingID, nil},
		{"CustomIDFunc", testCustomID, nil},
		{"ShutdownMidHandlerDoesNotAck", testShutdown, nil},
		{"CrashMidHandlerLosesNothing", testCrashMidHandler, nil},
		{"LongHandlerKeepsLease", testLongHandler, nil},
		{"ShutdownGraceCommitsAndAcks", testShutdownGrace, nil},
		{"ShutdownAcksEveryCommit", testShutdownAcks, nil},
		{"BrokerRestart", testRestart, func(f Features) bool { return f.Restart }},
		{"LogsAtDefaultLevel", testLogsAtDefaultLevel, nil},
		{"UnrecoverableStopsConsume", testUnrecoverableStopsConsume, nil},
		{"HandlerSeesDelivery", testHandlerSeesDelivery, nil},
		{"HandlerSeesPublishTime", testHandlerSeesPublishTime, nil},
		{"PanickingHookStillAcks", testPanickingHook, nil},
		{"BatchConsume", testBatchConsume, nil},
		{"PrefetchWarning", testPrefetchWarning, nil},
		{"RepublishEffectOnce", testRepublish, nil},
		{"PublishedFieldsArrive", testFieldsArrive, nil},
		{"PublishedKeyArrives", testKeyArrives, nil},
		{"OwnHeadersNotForwarded", testOwnHeaders, nil},
		{"PublishRefusesNowhere", testPublishNowhere, nil},
		{"PublishRefusesOversizedPayload", testPublishOversized, nil},
		{"PublishRefusesBadHeaders", testPublishBadHeaders, nil},
		{"PublishHonoursCanceledContext", testPublishCanceled, nil},
		{"Queued/EffectOnceAfterCrash", testQueuedEffectOnce, nil},
		{"Queued/RedeliveryAfterCommitIsDuplicate", testQueuedRedeliveryIsDuplicate, nil},
		{"Queued/RetryThenSuccess", testQueuedRetryThenSuccess, nil},
		{"Queued/FailedStatementIsHandlerFailure", testQueuedFailedStatement, nil},
		{"Queued/ShutdownAcksEveryCommit", testQueuedShutdownAcks, nil},
	}
	for _, tc := range tests {
		if tc.need != nil && !tc.need(h.Features) {
			continue // another harness of the adapter has the feature
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// Fixture is an inbox on a fresh SQLite file with a ledger of effects, for
// adapters' own tests as well as the suite's.
type Fixture struct {
	DB    *sql.DB
	Inbox *inbox.Inbox[*sql.Tx]
}

// NewFixture makes a Fixture. The zero fields of cfg get the suite's
// defaults, the consumer "brokertest" and a backoff from 100 ms to 1 s.
func NewFixture(t *testing.T, cfg inbox.Config) *Fixture {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL)`); err != nil {
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
	return &Fixture{DB: db, Inbox: ib}
}

// Write records an effect of m in tx. It is a handler.
func (f *Fixture) Write(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id) VALUES (?)`, m.ID)
	return err
}

// Effects counts the effects of message id.
func (f *Fixture) Effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.DB.QueryRow(`SELECT count(*) FROM ledger WHERE id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Consume runs inbox.Consume in the background until the test ends or stop
// is called. stop waits for it and returns its error.
func (f *Fixture) Consume(t *testing.T, src broker.Source, h inbox.Handler[*sql.Tx], cfg *inbox.ConsumerConfig) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(ctx, f.Inbox, src, h, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Consume did not return 30 s after its context was canceled")
			}
			src.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Eventually polls cond until it holds or the time is up.
func Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// await waits for a signal on ch, failing t after 15 s.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("after 15 s: %s", what)
	}
}

func publish(t *testing.T, env *Env, id string) {
	t.Helper()
	err := env.Publisher.Publish(context.Background(), &broker.Message{ID: id, Subject: env.Subject, Type: "test", Payload: []byte("payload of " + id)})
	if err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

// A consumer that dies after its commit, before its ack: the broker
// redelivers the message, and the inbox skips it as a duplicate.
func testRedeliveryAfterCrash(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	publish(t, env, "m-1")

	first := env.Source(t)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	d, err := first.Next(nctx)
	cancel()
	if err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	out, err := f.Inbox.Process(ctx, inbox.Message{ID: d.Message().ID, Payload: d.Message().Payload}, f.Write)
	if err != nil || out.Status != inbox.Processed {
		t.Fatalf("first processing: %v %v", out.Status, err)
	}
	first.Close() // dies before its ack

	stop := f.Consume(t, env.Source(t), f.Write, nil)
	Eventually(t, 15*time.Second, "the redelivery was not skipped as a duplicate", func() bool { return hooks.Duplicates.Load() >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second) // the duplicate
	if n := f.Effects(t, "m-1"); n != 1 || hooks.Duplicates.Load() != 1 {
		t.Fatalf("%d effects, %d duplicates; want 1 and 1", n, hooks.Duplicates.Load())
	}
}

// A failing handler is retried after the backoff's delay and then succeeds.
func testRetryThenSuccess(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	f := NewFixture(t, inbox.Config{Backoff: inbox.Backoff{Initial: 300 * time.Millisecond, Max: time.Second, Jitter: -1}})
	var mu sync.Mutex
	var calls []time.Time
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		mu.Lock()
		calls = append(calls, time.Now())
		n := len(calls)
		mu.Unlock()
		if n < 3 {
			return fmt.Errorf("transient failure %d", n)
		}
		return f.Write(ctx, tx, m)
	}
	publish(t, env, "m-2")
	stop := f.Consume(t, env.Source(t), handler, nil)
	Eventually(t, 15*time.Second, "the message was never processed", func() bool { return f.Effects(t, "m-2") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("handler ran %d times, want 3", len(calls))
	}
	// Backoff: 300 ms after the first failure, 600 ms after the second.
	if d := calls[1].Sub(calls[0]); d < 250*time.Millisecond {
		t.Fatalf("second attempt %v after the first, want the 300 ms delay", d)
	}
	if d := calls[2].Sub(calls[1]); d < 500*time.Millisecond {
		t.Fatalf("third attempt %v after the second, want the 600 ms delay", d)
	}
}

// A message waiting for a long retry holds back neither a message
// waiting for a shorter retry nor a fresh message: each comes back after
// its own delay.
func testRetriesDoNotBlock(t *testing.T, h Harness) {
	env := h.Open(t, 10*time.Second)
	f := NewFixture(t, inbox.Config{})
	delays := map[string]time.Duration{"long": 4 * time.Second, "short": 300 * time.Millisecond}
	var mu sync.Mutex
	var order []string
	var longAt time.Time
	failed := map[string]bool{}
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := delays[m.ID]; ok && !failed[m.ID] {
			failed[m.ID] = true
			return inbox.RetryAfter(d, errors.New("later"))
		}
		order = append(order, m.ID)
		if m.ID == "long" {
			longAt = time.Now()
		}
		return f.Write(ctx, tx, m)
	}
	start := time.Now()
	publish(t, env, "long")
	publish(t, env, "short")
	publish(t, env, "fresh")
	stop := f.Consume(t, env.Source(t), handler, &inbox.ConsumerConfig{Workers: 1})
	Eventually(t, 3*time.Second, "the short retry and the fresh message waited behind the long retry", func() bool {
		return f.Effects(t, "short") == 1 && f.Effects(t, "fresh") == 1
	})
	if f.Effects(t, "long") != 0 {
		t.Fatalf("the long retry came back after %v, before its 4 s delay", time.Since(start))
	}
	Eventually(t, 15*time.Second, "the long retry never came back", func() bool { return f.Effects(t, "long") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if d := longAt.Sub(start); d < 4*time.Second {
		t.Fatalf("the long retry came back after %v, want its 4 s delay", d)
	}
	if fmt.Sprint(order) != "[fresh short long]" {
		t.Fatalf("processed in order %v, want [fresh short long]", order)
	}
}

// A message that always fails is dead-lettered at exactly MaxAttempts,
// with its payload, and acked: it does not come back.
func testPoison(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	f := NewFixture(t, inbox.Config{MaxAttempts: 3, Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}})
	var calls atomic.Int32
	handler := func(context.Context, *sql.Tx, *inbox.Message) error {
		calls.Add(1)
		return errors.New("poison")
	}
	publish(t, env, "m-3")
	stop := f.Consume(t, env.Source(t), handler, nil)
	var dls []inbox.DeadLetter
	Eventually(t, 15*time.Second, "the poison message was never dead-lettered", func() bool {
		var err error
		dls, err = f.Inbox.DeadLetters(ctx, nil)
		return err == nil && len(dls) == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	if calls.Load() != 3 || dls[0].Attempts != 3 || string(dls[0].Message.Payload) != "payload of m-3" || dls[0].Message.ID != "m-3" {
		t.Fatalf("handler ran %d times, dead letter %+v; want 3 attempts and the message kept", calls.Load(), dls[0])
	}
}

// A message without a producer ID is a dead letter that keeps its payload,
// and it is acked: no silent loss, no hot loop.
func testMissingID(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	var calls atomic.Int32
	handler := func(context.Context, *sql.Tx, *inbox.Message) error { calls.Add(1); return nil }
	if err := env.PublishNoID(ctx, []byte("no id here")); err != nil {
		t.Fatal(err)
	}
	src := env.Source(t)
	stop := f.Consume(t, src, handler, nil)
	Eventually(t, 15*time.Second, "the message without ID was never dead-lettered", func() bool { return hooks.DeadLettered.Load() >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second) // a redelivery's ID would be "" in the failure
	dls, err := f.Inbox.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || string(dls[0].Message.Payload) != "no id here" || hooks.DeadLettered.Load() != 1 || calls.Load() != 0 {
		t.Fatalf("dead letters %+v (%v), %d dead-lettered, handler ran %d times; want one dead letter with the payload",
			dls, err, hooks.DeadLettered.Load(), calls.Load())
	}
	want := "ConsumerConfig.ID"
	if mi, ok := src.(broker.MissingIDer); ok {
		want = mi.MissingID(&broker.Message{}) + "; set it when publishing, or derive an ID with ConsumerConfig.ID"
	}
	if !strings.Contains(dls[0].Error, want) {
		t.Fatalf("dead letter's error %q, want it to say where the ID comes from: %q", dls[0].Error, want)
	}
}

// Shutting down while a handler runs does not ack it: after the shutdown
// timeout its context is canceled, nothing commits, and the next consumer
// processes the message.
func testShutdown(t *testing.T, h Harness) {
	env := h.Open(t, 2*time.Second)
	f := NewFixture(t, inbox.Config{})
	started := make(chan struct{}, 1)
	blocking := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if err := f.Write(ctx, tx, m); err != nil {
			return err
		}
		started <- struct{}{}
		<-ctx.Done() // the shutdown timeout cancels it
		return ctx.Err()
	}
	publish(t, env, "m-5")
	stop := f.Consume(t, env.Source(t), blocking, &inbox.ConsumerConfig{ShutdownTimeout: 200 * time.Millisecond})
	await(t, started, "the handler never started")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := f.Effects(t, "m-5"); n != 0 {
		t.Fatalf("%d effects of an interrupted handler, want 0", n)
	}
	stop = f.Consume(t, env.Source(t), f.Write, nil)
	Eventually(t, 15*time.Second, "the interrupted message was not delivered again", func() bool { return f.Effects(t, "m-5") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, 2*time.Second)
}

// A consumer whose connection dies while a handler runs, before COMMIT,
// loses nothing: the broker gives the message to the next consumer. Unlike
// a graceful shutdown, nothing can nack it: on RabbitMQ a delayed Nack
// republishes the message, which would hide an ack sent too early.
func testCrashMidHandler(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	f := NewFixture(t, inbox.Config{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	blocking := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if err := f.Write(ctx, tx, m); err != nil {
			return err
		}
		started <- struct{}{}
		<-release
		return errors.New("the process died before its COMMIT")
	}
	publish(t, env, "m-crash")
	src := env.Source(t)
	stop := f.Consume(t, src, blocking, nil)
	await(t, started, "the handler never started")
	src.Close() // the connection dies under the handler
	close(release)
	if err := stop(); err != nil && !errors.Is(err, broker.ErrSourceClosed) {
		t.Fatalf("Consume returned %v, want nil or broker.ErrSourceClosed", err)
	}
	if n := f.Effects(t, "m-crash"); n != 0 {
		t.Fatalf("%d effects of a handler that did not commit, want 0", n)
	}
	stop = f.Consume(t, env.Source(t), f.Write, nil)
	Eventually(t, 15*time.Second, "the message was lost: the next consumer did not get it", func() bool { return f.Effects(t, "m-crash") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
}

// The broker restarts while messages are consumed, some in flight:
// consumption resumes and every message is processed exactly once.
func testRestart(t *testing.T, h Harness) {
	env := h.Open(t, 2*time.Second)
	f := NewFixture(t, inbox.Config{})
	const n = 40
	for i := range n / 2 {
		publish(t, env, fmt.Sprintf("r-%d", i))
	}
	slow := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		time.Sleep(50 * time.Millisecond) // keep messages in flight across the restart
		return f.Write(ctx, tx, m)
	}
	stop := f.Consume(t, env.Source(t), slow, &inbox.ConsumerConfig{Workers: 2})
	Eventually(t, 15*time.Second, "the first messages were not processed", func() bool { return f.Count(t) >= 4 })
	env.Restart(t)
	if c := f.Count(t); c >= n/2 {
		t.Fatalf("all %d published messages were processed before the restart: the test restarts too late", c)
	}
	for i := n / 2; i < n; i++ {
		publish(t, env, fmt.Sprintf("r-%d", i))
	}
	Eventually(t, 60*time.Second, "not every message was processed after the restart", func() bool { return f.Count(t) == n })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, 2*time.Second)
	for i := range n {
		if e := f.Effects(t, fmt.Sprintf("r-%d", i)); e != 1 {
			t.Fatalf("message r-%d has %d effects, want 1", i, e)
		}
	}
}

// Count counts the distinct messages with an effect.
func (f *Fixture) Count(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.DB.QueryRow(`SELECT count(DISTINCT id) FROM ledger`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A handler that runs longer than the broker's ack wait keeps its lease
// (InProgress): the message is not redelivered to another worker meanwhile.
func testLongHandler(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	probe := env.Source(t)
	_, lease := probe.(broker.LeaseSource)
	probe.Close()
	switch {
	case lease != h.Features.Lease:
		t.Fatalf("the source is a broker.LeaseSource: %v, Features.Lease: %v; want them equal", lease, h.Features.Lease)
	case !lease:
		t.Skipf("Features.Lease is false: %T gives a delivery no lease to extend (it comes back only once its source closes)", probe)
	case !h.Features.AckWait:
		t.Fatal("Features.Lease without Features.AckWait: a lease is the AckWait started again")
	}
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	var calls atomic.Int32
	slow := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		calls.Add(1)
		time.Sleep(2500 * time.Millisecond)
		return f.Write(ctx, tx, m)
	}
	publish(t, env, "long")
	stop := f.Consume(t, env.Source(t), slow, &inbox.ConsumerConfig{Workers: 2})
	Eventually(t, 15*time.Second, "the long message was never processed", func() bool { return f.Effects(t, "long") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	if calls.Load() != 1 || hooks.Duplicates.Load() != 0 || hooks.Retries.Load() != 0 {
		t.Fatalf("handler ran %d times, %d duplicates, %d retries: the delivery was redelivered while in progress",
			calls.Load(), hooks.Duplicates.Load(), hooks.Retries.Load())
	}
}

// A handler that finishes within the shutdown timeout after Consume's
// context is done is committed and acked: it does not come back.
func testShutdownGrace(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	started := make(chan struct{}, 1)
	slow := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond) // ignores ctx: finishes inside the grace period
		return f.Write(ctx, tx, m)
	}
	publish(t, env, "grace")
	stop := f.Consume(t, env.Source(t), slow, &inbox.ConsumerConfig{ShutdownTimeout: 5 * time.Second})
	await(t, started, "the handler never started")
	if err := stop(); err != nil { // cancels while the handler runs
		t.Fatal(err)
	}
	if n := f.Effects(t, "grace"); n != 1 || hooks.Processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed after a graceful shutdown, want 1 and 1", n, hooks.Processed.Load())
	}
	requireAcked(t, h, env, time.Second)
}

// ConsumerConfig.ID picks the message ID; one that panics leaves the ID
// empty: a dead letter with the payload, and the worker lives on.
func testCustomID(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	id := func(m *broker.Message) string {
		if string(m.Payload) == "payload of boom" {
			panic("bad header")
		}
		return "custom-" + m.ID
	}
	publish(t, env, "boom")
	publish(t, env, "fine")
	stop := f.Consume(t, env.Source(t), f.Write, &inbox.ConsumerConfig{ID: id, Workers: 1})
	Eventually(t, 15*time.Second, "the two messages were not settled", func() bool {
		return hooks.Processed.Load() == 1 && hooks.DeadLettered.Load() == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	dls, err := f.Inbox.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || string(dls[0].Message.Payload) != "payload of boom" || f.Effects(t, "custom-fine") != 1 {
		t.Fatalf("dead letters %+v %v, %d effects of custom-fine; want boom dead-lettered and fine processed under its custom ID",
			dls, err, f.Effects(t, "custom-fine"))
	}
}

// The handler sees where the message was published and, where the broker
// counts them, its deliveries: 1, then 2 after a failure.
func testHandlerSeesDelivery(t *testing.T, h Harness) {
	env := h.Open(t, 5*time.Second)
	f := NewFixture(t, inbox.Config{})
	var mu sync.Mutex
	var seen []inbox.Message
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		mu.Lock()
		seen = append(seen, *m)
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			return inbox.RetryAfter(100*time.Millisecond, errors.New("fails once"))
		}
		return f.Write(ctx, tx, m)
	}
	publish(t, env, "m-seen")
	stop := f.Consume(t, env.Source(t), handler, nil)
	Eventually(t, 15*time.Second, "the message was never processed", func() bool { return f.Effects(t, "m-seen") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("handler ran %d times, want 2", len(seen))
	}
	for i, m := range seen {
		if m.Subject != env.Subject || m.ID != "m-seen" || m.Type != "test" {
			t.Fatalf("call %d saw subject %q ID %q type %q, want %q %q %q", i+1, m.Subject, m.ID, m.Type, env.Subject, "m-seen", "test")
		}
	}
	got := []int{seen[0].Deliveries, seen[1].Deliveries}
	if !h.Features.Deliveries {
		if got[0] != 0 || got[1] != 0 {
			t.Fatalf("deliveries %v from an adapter without Features.Deliveries, want 0 (unknown)", got)
		}
		t.Skip("the adapter does not count deliveries (Features.Deliveries is false): Message.Deliveries is 0")
	}
	if got[0] != 1 || got[1] != 2 {
		t.Fatalf("deliveries %v, want [1 2]", got)
	}
}

// The handler sees when the message was published (the adapter's
// broker.Message.Time, passed on by Consume), between the moments before
// and after Publish, give or take the second that AMQP's timestamp drops
// and a little clock skew; and which broker delivered it.
func testHandlerSeesPublishTime(t *testing.T, h Harness) {
	env := h.Open(t, 5*time.Second)
	f := NewFixture(t, inbox.Config{})
	seen := make(chan inbox.Message, 1)
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		select {
		case seen <- *m:
		default:
		}
		return f.Write(ctx, tx, m)
	}
	before := time.Now()
	publish(t, env, "m-time")
	after := time.Now()
	stop := f.Consume(t, env.Source(t), handler, nil)
	var m inbox.Message
	select {
	case m = <-seen:
	case <-time.After(15 * time.Second):
		t.Fatal("the message was never handled")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if system := m.System; system == "" || strings.TrimSpace(system) != system {
		t.Errorf("Message.System %q, want the broker's name (broker.System* for this project's adapters)", system)
	}
	if !h.Features.PublishTime {
		if !m.Time.IsZero() {
			t.Fatalf("Message.Time %v from an adapter without Features.PublishTime, want zero (unknown)", m.Time)
		}
		t.Skip("the adapter does not report the publish time (Features.PublishTime is false): Message.Time is zero")
	}
	const slack = 2 * time.Second // AMQP's whole seconds, the broker's clock
	if m.Time.Before(before.Add(-slack)) || m.Time.After(after.Add(slack)) {
		t.Fatalf("Message.Time %v, want between %v and %v (published then, ±%v)", m.Time, before, after, slack)
	}
}

// panickingHook panics after every processed and duplicate outcome.
type panickingHook struct{}

func (panickingHook) OnProcessed(context.Context, *inbox.Event) { panic("hook boom") }
func (panickingHook) OnDuplicate(context.Context, *inbox.Event) { panic("hook boom") }

// A hook that panics after COMMIT, before the ack, kills no worker: the
// message is acked (a new consumer sees no redelivery) and the next one is
// processed; the panic is logged at ERROR.
func testPanickingHook(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	logs := &logtest.Buffer{}
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Logger: logs.Logger(), Hooks: []inbox.Hook{panickingHook{}, hooks}})
	publish(t, env, "m-hook-1")
	stop := f.Consume(t, env.Source(t), f.Write, &inbox.ConsumerConfig{Workers: 1})
	Eventually(t, 15*time.Second, "the first message was never processed", func() bool { return hooks.Processed.Load() == 1 })
	publish(t, env, "m-hook-2")
	Eventually(t, 15*time.Second, "the worker did not survive the hook's panic", func() bool { return hooks.Processed.Load() == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireAcked(t, h, env, time.Second)
	if f.Effects(t, "m-hook-1") != 1 || f.Effects(t, "m-hook-2") != 1 {
		t.Fatalf("effects %d and %d, want 1 each", f.Effects(t, "m-hook-1"), f.Effects(t, "m-hook-2"))
	}
	if !logs.Has("level=ERROR", "hook=OnProcessed", "consumer=brokertest", "m-hook-1") {
		t.Fatalf("no ERROR log naming OnProcessed, the consumer and m-hook-1; log:\n%s", logs)
	}
}
