package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

func testPermanentAndDiscard[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	bad := errors.New("unknown account")
	out, err := ib.Process(ctx, msg("perm"), func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(bad)
	})
	if err != nil {
		t.Fatalf("dead-lettered outcome returned error %v", err)
	}
	wantStatus(t, "permanent error", out, inbox.DeadLettered)
	if out.Attempts != 1 || !errors.Is(out.Err, bad) || !out.Ack() {
		t.Fatalf("outcome %+v: want 1 attempt, the error, an ack", out)
	}
	dls, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{Limit: 10})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v %v, want 1", dls, err)
	}
	if err := ib.Discard(ctx, dls[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := ib.Discard(ctx, dls[0].ID); !errors.Is(err, inbox.ErrDeadLetterNotFound) {
		t.Fatalf("second discard: %v, want ErrDeadLetterNotFound", err)
	}
	out, _ = ib.Process(ctx, msg("perm"), writer(env))
	wantStatus(t, "delivery after discard", out, inbox.Duplicate)
	// Another consumer sees neither the dead letter nor the row.
	other := newInbox(t, env, inbox.Config{Consumer: "other"})
	if dls, _ := other.DeadLetters(ctx, nil); len(dls) != 0 {
		t.Fatalf("other consumer lists %d dead letters", len(dls))
	}
	out, _ = other.Process(ctx, msg("perm"), writer(env))
	wantStatus(t, "same ID, other consumer", out, inbox.Processed)
}

// After a dead letter's inbox row is pruned, a redelivery processes the
// message; replaying the dead letter then must not run the handler again.
func testReplayAfterRedelivery[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	out, _ := ib.Process(ctx, msg("late"), func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(errors.New("bad"))
	})
	wantStatus(t, "permanent failure", out, inbox.DeadLettered)
	if err := env.Backdate(ctx, store.Key{Consumer: []byte("storetest"), MessageID: []byte("late")}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(ctx); err != nil || n < 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	out, err = ib.Process(ctx, msg("late"), writer(env))
	if err != nil || out.Status != inbox.Processed {
		t.Fatalf("redelivery after prune: %v %v", out.Status, err)
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %v %v", dls, err)
	}
	ran := false
	out, err = ib.Replay(ctx, dls[0].ID, func(ctx context.Context, tx TTx, m *inbox.Message) error {
		ran = true
		return env.Write(ctx, tx, key(m.ID))
	})
	if err != nil || out.Status != inbox.Duplicate || ran {
		t.Fatalf("replay of a message processed since: %v %v, handler ran: %v; want Duplicate without running it", out.Status, err, ran)
	}
	if n := count(t, env, "late"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if dls, _ := ib.DeadLetters(ctx, nil); len(dls) != 0 {
		t.Fatalf("%d dead letters left, want 0", len(dls))
	}
}

// A message without a valid ID is dead-lettered once with its payload;
// its redeliveries are duplicates, acked, with no new dead letter. The
// error is nil: the outcome is acked.
func testInvalidOnce[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	noID := inbox.Message{Type: "t", Payload: []byte("no ID"), Headers: map[string]string{"h": "1"}}
	other := noID
	other.Payload = []byte("another message without ID")
	for i, tc := range []struct {
		m    inbox.Message
		want inbox.Status
	}{{noID, inbox.DeadLettered}, {noID, inbox.Duplicate}, {noID, inbox.Duplicate}, {other, inbox.DeadLettered}} {
		out, err := ib.Process(ctx, tc.m, writer(env))
		if out.Status != tc.want || err != nil || !errors.Is(out.Err, inbox.ErrInvalidMessage) {
			t.Fatalf("delivery %d: %v %v (Outcome.Err %v), want %v, a nil error and ErrInvalidMessage in Outcome.Err",
				i+1, out.Status, err, out.Err, tc.want)
		}
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 2 || string(dls[0].Message.Payload) != "no ID" || dls[0].Message.ID != "" {
		t.Fatalf("dead letters %+v %v, want one per distinct invalid message, with its payload and empty ID", dls, err)
	}
}
