package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

// A consumer that dies after its commit, before its ack: the broker
// redelivers the message, and the inbox skips it as a duplicate.
func testRedeliveryAfterCrash(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	hooks := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	publish(t, env, "m-1")
	processThenDie(t, env, func(m inbox.Message) (inbox.Outcome, error) { return f.Inbox.Process(ctx, m, f.Write) })

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

// processThenDie takes the first delivery of a source, processes it, and
// closes the source before its ack, as a consumer that dies there.
func processThenDie(t *testing.T, env *Env, process func(inbox.Message) (inbox.Outcome, error)) {
	t.Helper()
	first := env.Source(t)
	nctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	d, err := first.Next(nctx)
	cancel()
	if err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	out, err := process(inbox.Message{ID: d.Message().ID, Payload: d.Message().Payload})
	if err != nil || out.Status != inbox.Processed {
		t.Fatalf("first processing: %v %v", out.Status, err)
	}
	first.Close() // dies before its ack
}
