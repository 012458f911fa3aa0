package brokertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

// lastCommit closes done at the n-th Processed outcome: after its COMMIT,
// before its ack.
type lastCommit struct {
	n     int64
	count atomic.Int64
	once  sync.Once
	done  chan struct{}
}

func (l *lastCommit) OnProcessed(context.Context, *inbox.Event) {
	if l.count.Add(1) == l.n {
		l.once.Do(func() { close(l.done) })
	}
}

// Consumption stopped right after the last commit leaves nothing unacked,
// one message at a time and in batches, with the source holding a full
// batch per worker ahead: every ack sent before Consume returned reaches
// the broker, however many are in flight when the source closes. A fresh
// source then receives nothing but the ack check's markers.
func testShutdownAcks(t *testing.T, h Harness) {
	const n, workers, prefetch = 400, 4, 4 * 50
	for _, tc := range []struct {
		name  string
		batch int
	}{
		{"PerMessage", 1},
		{"Batch", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// JetStream's AckWait runs for the deliveries pulled ahead too.
			const ackWait = 5 * time.Second
			env := h.Open(t, ackWait)
			hooks := &inbox.Counts{}
			last := &lastCommit{n: n, done: make(chan struct{})}
			f := NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks, last}})
			for i := range n {
				publish(t, env, fmt.Sprintf("s-%03d", i))
			}
			var src broker.Source
			if env.PrefetchSource != nil {
				src = env.PrefetchSource(t, prefetch) // the same for both
			} else {
				src = env.Source(t)
			}
			stop := f.Consume(t, src, f.Write, &inbox.ConsumerConfig{Workers: workers, BatchSize: tc.batch})
			select {
			case <-last.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("after 60 s: not every message was committed (%v)", hooks)
			}
			if err := stop(); err != nil { // at once: the last acks are being sent
				t.Fatal(err)
			}
			// With an AckWait, a delivery waiting ahead of the workers under
			// load may come back, a duplicate, before its first is acked.
			dups := hooks.Duplicates.Load() != 0 && !h.Features.AckWait
			if hooks.Processed.Load() != n || hooks.Retries.Load() != 0 || hooks.DeadLettered.Load() != 0 || dups || f.Count(t) != n {
				t.Fatalf("outcomes: %v, %d messages with an effect; want %d processed and nothing else", hooks, f.Count(t), n)
			}
			requireAcked(t, h, env, ackWait)
		})
	}
}
