package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

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
	var longFailed, longAt time.Time
	failed := map[string]bool{}
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := delays[m.ID]; ok && !failed[m.ID] {
			failed[m.ID] = true
			if m.ID == "long" {
				longFailed = time.Now()
			}
			return inbox.RetryAfter(d, errors.New("later"))
		}
		order = append(order, m.ID)
		if m.ID == "long" {
			longAt = time.Now()
		}
		return f.Write(ctx, tx, m)
	}
	publish(t, env, "long")
	publish(t, env, "short")
	publish(t, env, "fresh")
	stop := f.Consume(t, env.Source(t), handler, &inbox.ConsumerConfig{Workers: 1})
	// The window is generous: a loaded machine may take seconds to join a
	// consumer group. What proves that nothing waited is that the long
	// retry's effect is still missing when the other two are in.
	Eventually(t, 15*time.Second, "the short retry and the fresh message were never processed", func() bool {
		return f.Effects(t, "short") == 1 && f.Effects(t, "fresh") == 1
	})
	if f.Effects(t, "long") != 0 {
		t.Fatal("the long retry came back before the short retry and the fresh message were in")
	}
	Eventually(t, 15*time.Second, "the long retry never came back", func() bool { return f.Effects(t, "long") == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if d := longAt.Sub(longFailed); d < 4*time.Second {
		t.Fatalf("the long retry came back %v after its failure, want its 4 s delay", d)
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
