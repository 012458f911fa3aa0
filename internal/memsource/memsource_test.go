package memsource

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// A nacked message comes back after its delay; acks count once per
// delivery; nothing is pending once every delivery is acked.
func TestSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(2)
	s.Add(&broker.Message{ID: "a"}, &broker.Message{ID: "b"})
	a, _ := s.Next(ctx)
	b, _ := s.Next(ctx)
	if err := a.Nack(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = b.Ack(ctx)
	_ = b.Ack(ctx) // settled already: not counted again
	if n := s.Pending(); n != 1 {
		t.Fatalf("pending %d, want 1 (the nacked message)", n)
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	again, err := s.Next(tctx)
	if err != nil || again.Message().ID != "a" || again.Message().Deliveries != 2 {
		t.Fatalf("Next: %v %v, want a, delivered twice", again, err)
	}
	_ = again.Ack(ctx)
	// The nack's timer queued a again, then stops counting it as pending:
	// for a moment it counts twice (see Nack), never zero too early.
	for deadline := time.Now().Add(time.Second); s.Pending() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s.Acks() != 2 || s.Nacks() != 1 || s.Acked("a") != 1 || s.Acked("b") != 1 || s.Pending() != 0 {
		t.Fatalf("acks %d, nacks %d, a %d, b %d, pending %d; want 2, 1, 1, 1, 0", s.Acks(), s.Nacks(), s.Acked("a"), s.Acked("b"), s.Pending())
	}
}
