package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// activity returns env's driver as a store.ActivityInspector, failing t
// when it is not one: every store of this repository implements it.
func activity[TTx any](t *testing.T, env *Env[TTx]) store.ActivityInspector {
	t.Helper()
	in, ok := env.Driver.(store.ActivityInspector)
	if !ok {
		t.Fatalf("%T does not implement store.ActivityInspector", env.Driver)
	}
	return in
}

// Throughput counts the inbox rows per consumer and minute of the window,
// dead ones too, and leaves out what was claimed before it.
func testActivityThroughput[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := activity(t, env)
	since := time.Now().Add(-time.Hour)
	if got, err := in.Throughput(ctx, &store.ThroughputParams{Since: since}); err != nil || len(got) != 0 {
		t.Fatalf("throughput of an empty inbox: %v, %v; want none", got, err)
	}
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	b := newInbox(t, env, inbox.Config{Consumer: "b"})
	for _, id := range []string{"a-1", "a-2", "a-3", "a-old"} {
		wantStatus(t, id, processID(t, a, id, writer(env)), inbox.Processed)
	}
	dead := func(context.Context, TTx, *inbox.Message) error { return inbox.Permanent(errors.New("no")) }
	wantStatus(t, "a-dead", processID(t, a, "a-dead", dead), inbox.DeadLettered)
	wantStatus(t, "b-1", processID(t, b, "b-1", writer(env)), inbox.Processed)
	if err := env.Backdate(ctx, store.Key{Consumer: []byte("a"), MessageID: []byte("a-old")}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}

	got, err := in.Throughput(ctx, &store.ThroughputParams{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	seen := map[string]bool{}
	for _, bk := range got {
		sums[string(bk.Consumer)] += bk.Count
		if bk.Minute.Second() != 0 || bk.Minute.Nanosecond() != 0 || bk.Minute.Location() != time.UTC {
			t.Errorf("bucket %v of %s: not the start of a minute in UTC", bk.Minute, bk.Consumer)
		}
		if bk.Minute.Before(since.Add(-time.Minute)) || bk.Minute.After(time.Now().Add(time.Minute)) {
			t.Errorf("bucket %v of %s: outside the window from %v", bk.Minute, bk.Consumer, since)
		}
		key := string(bk.Consumer) + bk.Minute.String()
		if seen[key] {
			t.Errorf("two buckets of %s at %v", bk.Consumer, bk.Minute)
		}
		seen[key] = true
	}
	if sums["a"] != 4 || sums["b"] != 1 || len(sums) != 2 {
		t.Errorf("rows in the window per consumer: %v, want a 4 (3 processed, 1 dead; the backdated one out), b 1", sums)
	}
	one, err := in.Throughput(ctx, &store.ThroughputParams{Consumer: []byte("b"), Since: since})
	if err != nil || len(one) != 1 || string(one[0].Consumer) != "b" || one[0].Count != 1 {
		t.Errorf("throughput of b: %v, %v; want one bucket of 1", one, err)
	}
	all, err := in.Throughput(ctx, &store.ThroughputParams{Consumer: []byte("a"), Since: since.Add(-2 * time.Hour)})
	var n int64
	for _, bk := range all {
		n += bk.Count
	}
	if err != nil || n != 5 {
		t.Errorf("throughput of a over 3 hours: %d rows, %v; want 5", n, err)
	}
}

// Retrying counts the messages with failed attempts and no inbox row: not
// those processed after a failure, nor those dead-lettered.
func testActivityRetrying[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := activity(t, env)
	if got, err := in.Retrying(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("retrying in an empty inbox: %v, %v; want none", got, err)
	}
	before := time.Now().Add(-time.Minute) // the database's clock may differ a little
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	b := newInbox(t, env, inbox.Config{Consumer: "b"})
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("timeout") }
	dead := func(context.Context, TTx, *inbox.Message) error { return inbox.Permanent(errors.New("no")) }
	for range 2 {
		wantStatus(t, "a-retry", processID(t, a, "a-retry", failing), inbox.Retry)
	}
	wantStatus(t, "a-later", processID(t, a, "a-later", failing), inbox.Retry)
	wantStatus(t, "a-later", processID(t, a, "a-later", writer(env)), inbox.Processed)
	wantStatus(t, "a-dead", processID(t, a, "a-dead", failing), inbox.Retry)
	wantStatus(t, "a-dead", processID(t, a, "a-dead", dead), inbox.DeadLettered)
	wantStatus(t, "b-retry", processID(t, b, "b-retry", failing), inbox.Retry)
	after := time.Now().Add(time.Minute)

	got, err := in.Retrying(ctx, nil)
	if err != nil || len(got) != 2 || string(got[0].Consumer) != "a" || string(got[1].Consumer) != "b" {
		t.Fatalf("retrying: %+v, %v; want a and b in order", got, err)
	}
	if got[0].Messages != 1 || got[0].Attempts != 2 || got[1].Messages != 1 || got[1].Attempts != 1 {
		t.Errorf("retrying: a %+v, b %+v; want a 1 message of 2 attempts, b 1 of 1", got[0], got[1])
	}
	for _, r := range got {
		if r.OldestFailedAt.Before(before) || r.OldestFailedAt.After(after) {
			t.Errorf("%s's oldest failure at %v, outside [%v, %v]", r.Consumer, r.OldestFailedAt, before, after)
		}
	}
	one, err := in.Retrying(ctx, []byte("b"))
	if err != nil || len(one) != 1 || string(one[0].Consumer) != "b" {
		t.Errorf("retrying of b: %+v, %v; want b alone", one, err)
	}
}

// Consumers lists every consumer with an inbox row or a dead letter, with
// its dead letters, in byte order: "B" (0x42) before "a" (0x61), which a
// case-insensitive order or the order of insertion would swap. c has
// inbox rows and no dead letter; d only a message in retry, no inbox
// row. A discarded dead letter no longer counts, though its inbox row
// stays marked dead.
func testActivityConsumers[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := activity(t, env)
	if got, err := in.Consumers(ctx); err != nil || len(got) != 0 {
		t.Fatalf("consumers of an empty inbox: %v, %v; want none", got, err)
	}
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	b := newInbox(t, env, inbox.Config{Consumer: "B"})
	c := newInbox(t, env, inbox.Config{Consumer: "c"})
	d := newInbox(t, env, inbox.Config{Consumer: "d"})
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("timeout") }
	dead := func(context.Context, TTx, *inbox.Message) error { return inbox.Permanent(errors.New("no")) }
	for _, id := range []string{"a-1", "a-2", "a-3", "a-4"} {
		wantStatus(t, id, processID(t, a, id, dead), inbox.DeadLettered)
	}
	wantStatus(t, "a-ok", processID(t, a, "a-ok", writer(env)), inbox.Processed)
	wantStatus(t, "b-1", processID(t, b, "b-1", dead), inbox.DeadLettered)
	wantStatus(t, "c-ok", processID(t, c, "c-ok", writer(env)), inbox.Processed)
	wantStatus(t, "c-retry", processID(t, c, "c-retry", failing), inbox.Retry)
	wantStatus(t, "d-retry", processID(t, d, "d-retry", failing), inbox.Retry)
	found, err := inspector(t, env).DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Consumer: []byte("a"), Limit: 1})
	if err != nil || len(found) != 1 {
		t.Fatalf("search of a's first dead letter: %v, %v", found, err)
	}
	if gone, err := inspector(t, env).DeadLetterDiscard(ctx, []int64{found[0].ID}); err != nil || len(gone) != 1 {
		t.Fatalf("discard of %d: %v, %v", found[0].ID, gone, err)
	}

	got, err := in.Consumers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, n := range got {
		s = append(s, fmt.Sprintf("%s:%d", n.Consumer, n.DeadLetters))
	}
	if want := []string{"B:1", "a:3", "c:0"}; !slices.Equal(s, want) {
		t.Errorf("consumers %q, want %q: B's 1, a's 4 less the one discarded, c with none, in byte order; d has no row", s, want)
	}
}

// processID runs message id through ib with h and returns the outcome.
func processID[TTx any](t *testing.T, ib *inbox.Inbox[TTx], id string, h inbox.Handler[TTx]) inbox.Outcome {
	t.Helper()
	out, _ := process(t, ib, msg(id), h)
	return out
}

// RetryingList lists the messages Retrying counts, in key byte order
// ("B" before "a"), a page at a time after the last key, and of one
// consumer; a message processed or dead-lettered after its failures is
// not listed.
func testActivityRetryingList[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	in := activity(t, env)
	if got, err := in.RetryingList(ctx, &store.RetryingListParams{Limit: 10}); err != nil || len(got) != 0 {
		t.Fatalf("retrying list of an empty inbox: %v, %v; want none", got, err)
	}
	before := time.Now().Add(-time.Minute) // the database's clock may differ a little
	a := newInbox(t, env, inbox.Config{Consumer: "a"})
	b := newInbox(t, env, inbox.Config{Consumer: "B"})
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("timeout") }
	dead := func(context.Context, TTx, *inbox.Message) error { return inbox.Permanent(errors.New("no")) }
	for _, id := range []string{"r-3", "r-1", "r-2"} {
		wantStatus(t, id, processID(t, a, id, failing), inbox.Retry)
	}
	wantStatus(t, "r-1", processID(t, a, "r-1", failing), inbox.Retry)
	wantStatus(t, "ok", processID(t, a, "ok", failing), inbox.Retry)
	wantStatus(t, "ok", processID(t, a, "ok", writer(env)), inbox.Processed)
	wantStatus(t, "gone", processID(t, a, "gone", failing), inbox.Retry)
	wantStatus(t, "gone", processID(t, a, "gone", dead), inbox.DeadLettered)
	wantStatus(t, "r-9", processID(t, b, "r-9", failing), inbox.Retry)

	var keys []string
	p := &store.RetryingListParams{Limit: 2}
	for range 5 {
		page, err := in.RetryingList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			keys = append(keys, fmt.Sprintf("%s/%s:%d", m.Key.Consumer, m.Key.MessageID, m.Attempts))
			if m.LastError != "timeout" || m.FirstFailedAt.Before(before) || m.LastFailedAt.Before(m.FirstFailedAt) {
				t.Errorf("%s: error %q, failures %v .. %v; want timeout, after %v", m.Key.MessageID, m.LastError, m.FirstFailedAt, m.LastFailedAt, before)
			}
		}
		p.After = page[len(page)-1].Key
	}
	if want := []string{"B/r-9:1", "a/r-1:2", "a/r-2:1", "a/r-3:1"}; !slices.Equal(keys, want) {
		t.Errorf("retrying list, 2 a page: %q, want %q", keys, want)
	}
	one, err := in.RetryingList(ctx, &store.RetryingListParams{Consumer: []byte("B"), Limit: 10})
	if err != nil || len(one) != 1 || string(one[0].Key.MessageID) != "r-9" {
		t.Errorf("retrying list of B: %+v, %v; want r-9 alone", one, err)
	}
}
