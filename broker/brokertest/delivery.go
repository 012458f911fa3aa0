package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

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
