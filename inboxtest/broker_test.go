package inboxtest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
)

func next(t *testing.T, src broker.Source) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := src.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return d
}

func publish(t *testing.T, b *inboxtest.Broker, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := b.Publish(context.Background(), &broker.Message{ID: id, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
}

// A lost ack returns nil, and the message comes again, counted as its
// second delivery; the second ack settles it.
func TestBrokerLosesAck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{LoseAck: func(m *broker.Message) bool { return m.Deliveries == 1 }})
	publish(t, b, "a")
	src := b.Source()
	defer src.Close()
	if err := next(t, src).Ack(ctx); err != nil {
		t.Fatalf("a lost ack returned %v, want nil", err)
	}
	d := next(t, src)
	if d.Message().ID != "a" || d.Message().Deliveries != 2 {
		t.Fatalf("got %q delivery %d, want a's second delivery", d.Message().ID, d.Message().Deliveries)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	if got, lost := b.Acked(), b.LostAcks(); !slices.Equal(got, []string{"a"}) || !slices.Equal(lost, []string{"a"}) {
		t.Fatalf("acked %q, lost %q; want [a] and [a]", got, lost)
	}
}

// A duplicated message is delivered twice at once, to two consumers, and
// is settled when both copies are.
func TestBrokerDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{Duplicate: func(m *broker.Message) bool { return m.ID == "twice" }})
	publish(t, b, "twice", "once")
	s1, s2 := b.Source(), b.Source()
	defer s1.Close()
	defer s2.Close()
	d1, d2 := next(t, s1), next(t, s2)
	if d1.Message().ID != "twice" || d2.Message().ID != "twice" {
		t.Fatalf("got %q and %q in flight at once, want twice and twice", d1.Message().ID, d2.Message().ID)
	}
	if err := d1.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Unsettled(); !slices.Equal(got, []string{"twice", "once"}) {
		t.Fatalf("unsettled %q, want [twice once]", got)
	}
	if err := d2.Term(ctx, "duplicate"); err != nil {
		t.Fatal(err)
	}
	if err := next(t, s1).Nack(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := b.Nacks(); len(got) != 1 || got[0] != (inboxtest.Nack{ID: "once", Delivery: 1, Delay: time.Hour}) {
		t.Fatalf("nacks %+v, want once's first delivery with 1h", got)
	}
	if got := b.Terms(); len(got) != 1 || got[0] != (inboxtest.Term{ID: "twice", Reason: "duplicate"}) {
		t.Fatalf("terms %+v, want twice's", got)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.WaitSettled(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitSettled with a nacked message waiting 1h returned %v, want the deadline", err)
	}
}

// A delivery whose lease expired is stale: the message went to another
// consumer, and the stale delivery can no longer settle it. A closed
// source's deliveries fail with broker.ErrSourceClosed.
func TestBrokerStaleDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{AckWait: 50 * time.Millisecond})
	publish(t, b, "a")
	s1, s2 := b.Source(), b.Source()
	defer s2.Close()
	old := next(t, s1)
	again := next(t, s2) // after the lease
	if again.Message().Deliveries != 2 {
		t.Fatalf("redelivery counted %d, want 2", again.Message().Deliveries)
	}
	if err := old.Ack(ctx); !errors.Is(err, inboxtest.ErrStaleDelivery) {
		t.Fatalf("ack of an expired delivery returned %v, want ErrStaleDelivery", err)
	}
	s2.Close()
	if err := again.Ack(ctx); !errors.Is(err, broker.ErrSourceClosed) {
		t.Fatalf("ack after Close returned %v, want broker.ErrSourceClosed", err)
	}
	if _, err := s2.Next(ctx); !errors.Is(err, broker.ErrSourceClosed) {
		t.Fatalf("Next after Close returned %v, want broker.ErrSourceClosed", err)
	}
	s1.Close()
}

// Bad input is an error or ignored, never a panic.
func TestBrokerBadInput(t *testing.T) {
	t.Parallel()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{Subjects: []string{"s"}})
	ctx := context.Background()
	for _, tc := range []struct {
		msg  *broker.Message
		want error
	}{
		{nil, broker.ErrInvalidMessage},
		{&broker.Message{Subject: "s"}, broker.ErrInvalidMessage},
		{&broker.Message{ID: "a", Subject: "elsewhere"}, inboxtest.ErrNoSubject},
	} {
		if err := b.Publish(ctx, tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("Publish(%+v) returned %v, want %v", tc.msg, err, tc.want)
		}
	}
	b.Enqueue(nil)
	if got := b.Unsettled(); len(got) != 0 {
		t.Fatalf("unsettled %q after bad input, want none", got)
	}
}
