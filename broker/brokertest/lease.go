package brokertest

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

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
