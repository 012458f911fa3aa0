package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
)

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
