package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// markers numbers the ack check's markers: JetStream drops a publish whose
// ID it has seen.
var markers atomic.Int64

// redelivered returns the IDs that a fresh source of env receives, other
// than markers published now: the deliveries that the consumers before it
// (all stopped, their sources closed) did not ack. The broker's own
// redelivery bounds the wait. RabbitMQ puts the unacked deliveries of a
// closed channel back ahead of newer messages, and a Kafka group reads
// each partition again from its committed offset: either way they come
// before the markers, one per partition. With Features.AckWait they come
// back AckWait after their last delivery, so the source is read until
// ackWait, and half of it again for the broker's timer, has passed since
// the call.
func redelivered(t *testing.T, h Harness, env *Env, ackWait time.Duration) []string {
	t.Helper()
	stopped := time.Now()
	pending := map[string]bool{}
	for range max(env.Partitions, 1) {
		id := fmt.Sprintf("marker-%d", markers.Add(1))
		publish(t, env, id)
		pending[id] = true
	}
	var until time.Time
	if h.Features.AckWait {
		until = stopped.Add(ackWait * 3 / 2)
	}
	src := env.Source(t)
	defer src.Close()
	deadline := time.Now().Add(15 * time.Second)
	var again []string
	for len(pending) > 0 || time.Now().Before(until) {
		wait := deadline
		if len(pending) == 0 {
			wait = until
		}
		ctx, cancel := context.WithDeadline(context.Background(), wait)
		d, err := src.Next(ctx)
		cancel()
		if err != nil {
			if len(pending) == 0 && errors.Is(err, context.DeadlineExceeded) {
				break
			}
			t.Fatalf("the ack check's fresh source, %d of its markers not received (redelivered so far %q): %v", len(pending), again, err)
		}
		id := d.Message().ID
		if pending[id] {
			delete(pending, id)
			if err := d.Ack(context.Background()); err != nil {
				t.Fatalf("ack of marker %s: %v", id, err)
			}
			continue
		}
		again = append(again, id)
		// Acked, so that a source holding few deliveries ahead still
		// reaches the markers behind many of them.
		if err := d.Ack(context.Background()); err != nil {
			t.Fatalf("ack of redelivered %s: %v", id, err)
		}
	}
	return again
}

// requireAcked fails t when a delivery that the stopped consumers of env
// saw was not acked: a fresh source receives it again (see redelivered).
// Every source of env must be closed.
func requireAcked(t *testing.T, h Harness, env *Env, ackWait time.Duration) {
	t.Helper()
	if again := redelivered(t, h, env, ackWait); len(again) > 0 {
		t.Fatalf("a fresh source received %q after the consumers stopped: left unacked; want nothing but the markers", again)
	}
}

// The ack check can fail on this adapter: deliveries taken and never
// acked, one per partition, come back to a fresh source once their source
// is closed.
func testUnackedComesBack(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	var want []string
	for i := range max(env.Partitions, 1) {
		want = append(want, fmt.Sprintf("unacked-%d", i))
		publish(t, env, want[i])
	}
	src := env.Source(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for range want {
		if _, err := src.Next(ctx); err != nil {
			t.Fatalf("delivery: %v", err)
		}
	}
	src.Close() // dies without acking
	got := redelivered(t, h, env, time.Second)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("a fresh source received %q again, want the unacked %q", got, want)
	}
}
