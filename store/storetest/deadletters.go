package storetest

import (
	"context"
	"errors"
	"fmt"
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

// DeadLetterList pages through one consumer's dead letters in ID order:
// each page starts after the AfterID given (the last ID of the page
// before, or one that was discarded), holds at most Limit, the last one is
// short (or empty when Limit divides the count), a page after the last ID
// is empty, and another consumer's dead letters, written in between, never
// show.
func testDeadLetterPaging[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	other := newInbox(t, env, inbox.Config{Consumer: "other"})
	permanent := func(context.Context, TTx, *inbox.Message) error { return inbox.Permanent(errors.New("no")) }
	var want []string
	for i := range 8 {
		id := fmt.Sprintf("dl-%d", i)
		if out, err := ib.Process(ctx, msg(id), permanent); out.Status != inbox.DeadLettered {
			t.Fatalf("%s: %v %v, want DeadLettered", id, out.Status, err)
		}
		want = append(want, id)
		if i%2 == 0 { // the other consumer's IDs fall between this one's
			if out, err := other.Process(ctx, msg("other-"+id), permanent); out.Status != inbox.DeadLettered {
				t.Fatalf("other-%s: %v %v, want DeadLettered", id, out.Status, err)
			}
		}
	}
	list := func(consumer string, after int64, limit int) []*store.DeadLetter {
		t.Helper()
		page, err := env.Driver.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: []byte(consumer), AfterID: after, Limit: limit})
		if err != nil {
			t.Fatalf("DeadLetterList(%s, after %d, limit %d): %v", consumer, after, limit, err)
		}
		return page
	}
	all := list("storetest", 0, 100)
	if len(all) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(all), len(want))
	}
	// A gap: the fourth one discarded. A page may start after its ID.
	gap := all[3].ID
	if err := ib.Discard(ctx, gap); err != nil {
		t.Fatal(err)
	}
	want = append(want[:3:3], want[4:]...)
	if page := list("storetest", gap, 2); len(page) != 2 || string(page[0].Key.MessageID) != "dl-4" || string(page[1].Key.MessageID) != "dl-5" {
		t.Fatalf("the page after the discarded dead letter's ID: %v, want dl-4 and dl-5", ids(page))
	}
	// Page through with several limits.
	pageAll := func(consumer string, limit int) (got []string, pages int) {
		t.Helper()
		var after int64
		for {
			page := list(consumer, after, limit)
			pages++
			if len(page) > limit || pages > 20 {
				t.Fatalf("%s, limit %d: page %d holds %v (after %d), want at most %d and at most 20 pages", consumer, limit, pages, ids(page), after, limit)
			}
			for _, dl := range page {
				if dl.ID <= after || string(dl.Key.Consumer) != consumer {
					t.Fatalf("%s, limit %d: page %d after ID %d holds %v of consumer %q, want IDs above %d in order, of %s only",
						consumer, limit, pages, after, ids(page), dl.Key.Consumer, after, consumer)
				}
				after = dl.ID
				got = append(got, string(dl.Key.MessageID))
			}
			if len(page) < limit {
				return got, pages
			}
		}
	}
	for _, limit := range []int{1, 2, 3, 7, 8, 100} {
		got, pages := pageAll("storetest", limit)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("limit %d: paged through %v, want %v", limit, got, want)
		}
		if wantPages := len(want)/limit + 1; pages != wantPages { // the last page short, or empty
			t.Fatalf("limit %d: %d pages for %d dead letters, want %d", limit, pages, len(want), wantPages)
		}
	}
	last := all[len(all)-1].ID
	if page := list("storetest", last, 10); len(page) != 0 {
		t.Fatalf("the page after the last ID: %v, want none", ids(page))
	}
	if got, _ := pageAll("other", 3); fmt.Sprint(got) != "[other-dl-0 other-dl-2 other-dl-4 other-dl-6]" {
		t.Fatalf("the other consumer's pages: %v, want its own 4 in order", got)
	}
	if page := list("nobody", 0, 10); len(page) != 0 {
		t.Fatalf("a consumer without dead letters: %v, want none", ids(page))
	}
	// The inbox passes its query's paging to the store.
	dls, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{AfterID: all[0].ID, Limit: 2})
	if err != nil || len(dls) != 2 || dls[0].Message.ID != "dl-1" || dls[1].Message.ID != "dl-2" {
		t.Fatalf("DeadLetters after the first, limit 2: %+v %v, want dl-1 and dl-2", dls, err)
	}
}

// ids lists the dead letters' IDs with their message IDs, for messages.
func ids(dls []*store.DeadLetter) []string {
	out := make([]string, len(dls))
	for i, dl := range dls {
		out[i] = fmt.Sprintf("%d:%s", dl.ID, dl.Key.MessageID)
	}
	return out
}
