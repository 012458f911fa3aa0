package brokertest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

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
