package brokertest

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

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
