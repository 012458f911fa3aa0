package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// outboxEnv is an environment's outbox: the writer and the relay's store.
type outboxEnv[TTx any] struct {
	*Env[TTx]
	ob *outbox.Outbox[TTx]
	rs store.OutboxRelayer
}

func openOutbox[TTx any](t *testing.T, h Harness[TTx]) *outboxEnv[TTx] {
	t.Helper()
	env := open(t, h)
	rs, ok := any(env.Driver).(store.OutboxRelayer)
	if !ok {
		t.Fatalf("%T is not a store.OutboxRelayer", env.Driver)
	}
	return &outboxEnv[TTx]{Env: env, ob: newOutbox(t, env), rs: rs}
}

func newOutbox[TTx any](tb testing.TB, env *Env[TTx]) *outbox.Outbox[TTx] {
	tb.Helper()
	w, ok := any(env.Driver).(store.OutboxWriter[TTx])
	if !ok {
		tb.Fatalf("%T is not a store.OutboxWriter", env.Driver)
	}
	ob, err := outbox.New(context.Background(), w, nil)
	if err != nil {
		tb.Fatalf("outbox.New: %v", err)
	}
	return ob
}

// write writes msgs in a transaction with one business effect per
// message, and commits it (or rolls it back).
func (e *outboxEnv[TTx]) write(t *testing.T, commit bool, msgs ...*outbox.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := e.Write(ctx, tx, key("outbox:"+m.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ob.Write(ctx, tx, msgs...); err != nil {
		_ = e.Driver.Rollback(ctx, tx)
		t.Fatalf("Write: %v", err)
	}
	if !commit {
		if err := e.Driver.Rollback(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := e.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
}

// sink records what a relay published, in order.
type sink struct {
	mu   sync.Mutex
	msgs []*outbox.Message
	// fail, if set, decides a publication's error.
	fail func(m *outbox.Message) error
}

func (s *sink) publish(_ context.Context, m *outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(m); err != nil {
			return err
		}
	}
	s.msgs = append(s.msgs, m)
	return nil
}

func (s *sink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, m := range s.msgs {
		out = append(out, m.ID)
	}
	return out
}

func (e *outboxEnv[TTx]) relay(t *testing.T, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 1 // publications in sequence order, which cases check
	}
	r, err := outbox.NewRelay(context.Background(), e.rs, &cfg)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return r
}

// drain runs RelayOnce until a round claims nothing.
func drain(t *testing.T, r *outbox.Relay) outbox.RelayResult {
	t.Helper()
	var sum outbox.RelayResult
	for range 1000 {
		res, err := r.RelayOnce(context.Background())
		if err != nil {
			t.Fatalf("RelayOnce: %v", err)
		}
		if res.Claimed == 0 {
			return sum
		}
		sum.Claimed += res.Claimed
		sum.Published += res.Published
		sum.Failed += res.Failed
		sum.Parked += res.Parked
	}
	t.Fatal("RelayOnce still claims rows after 1000 rounds")
	return sum
}

func outMsg(id string) *outbox.Message {
	return &outbox.Message{ID: id, Destination: "storetest.out", Type: "storetest.event",
		Payload: []byte("payload of " + id), Headers: map[string]string{"trace": "t-1", "bin": "\x00\xff"}}
}

// What a committed transaction wrote is published once, as written and in
// order; what a rolled-back one wrote, never; published rows are deleted.
func testOutboxWriteRelay[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	want := []*outbox.Message{
		{ID: "o-1", Destination: "orders.placed", Key: "order-7", Type: "OrderPlaced", Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"traceparent": "00-abc-def-01", "bin": "\x00\xff\n"}},
		{ID: "o-2\x00\xff", Destination: "orders.placed", Payload: nil},
		{ID: "O-1", Destination: "other", Key: "k\x00", Type: "", Payload: []byte{0, 1, 2}},
	}
	e.write(t, false, outMsg("rolled-back"))
	e.write(t, true, want...)
	s := &sink{}
	res := drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish}))
	if res.Claimed != 3 || res.Published != 3 {
		t.Fatalf("relayed %+v, want 3 claimed and published", res)
	}
	if len(s.msgs) != len(want) {
		t.Fatalf("published %q, want %d messages", s.ids(), len(want))
	}
	for i, m := range s.msgs {
		w := want[i]
		if m.ID != w.ID || m.Destination != w.Destination || m.Key != w.Key || m.Type != w.Type ||
			string(m.Payload) != string(w.Payload) || fmt.Sprint(m.Headers) != fmt.Sprint(w.Headers) && len(w.Headers) > 0 {
			t.Fatalf("message %d published as %+v, want %+v", i, m, w)
		}
	}
	if n := count(t, e.Env, "outbox:rolled-back"); n != 0 {
		t.Fatalf("the rolled-back business write is there (%d)", n)
	}
	if res := drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish})); res.Claimed != 0 {
		t.Fatalf("a second relay found %+v: published rows were not deleted", res)
	}
}

// An ID already in the table is skipped, in one Write and across two.
func testOutboxDuplicateID[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	e.write(t, true, outMsg("d-1"), outMsg("d-1"), outMsg("d-2"))
	e.write(t, true, outMsg("d-2"))
	s := &sink{}
	drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish}))
	if got := s.ids(); !slices.Equal(got, []string{"d-1", "d-2"}) {
		t.Fatalf("published %q, want d-1 and d-2 once each", got)
	}
}

// Bad messages are refused with a typed error naming the reason, and
// nothing of the call is written.
func testOutboxInvalid[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	long := string(make([]byte, 1025))
	for _, tc := range []struct {
		name string
		m    *outbox.Message
	}{
		{"nil", nil},
		{"empty ID", &outbox.Message{Destination: "d"}},
		{"ID too long", &outbox.Message{ID: long, Destination: "d"}},
		{"no destination", &outbox.Message{ID: "x"}},
		{"NUL in destination", &outbox.Message{ID: "x", Destination: "a\x00b"}},
		{"invalid UTF-8 destination", &outbox.Message{ID: "x", Destination: "\xff"}},
		{"key too long", &outbox.Message{ID: "x", Destination: "d", Key: long}},
		{"NUL in type", &outbox.Message{ID: "x", Destination: "d", Type: "a\x00"}},
	} {
		tx, err := e.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = e.ob.Write(ctx, tx, outMsg("valid-"+tc.name), tc.m)
		var ime *outbox.InvalidMessageError
		if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &ime) || ime.Index != 1 {
			t.Errorf("%s: Write error %v, want an *InvalidMessageError for message 1", tc.name, err)
		}
		if err := e.Driver.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	s := &sink{}
	if res := drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish})); res.Claimed != 0 {
		t.Fatalf("published %q: a refused call wrote something", s.ids())
	}
}

// A failing row is retried with backoff without holding back the others,
// parked after MaxAttempts (at once for inbox.Permanent) with its error,
// listed, and published again after Unpark.
func testOutboxRetryAndPark[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	e.write(t, true, outMsg("bad"), outMsg("good-1"), outMsg("poison"), outMsg("good-2"), outMsg("oversized"))
	failing := true
	s := &sink{fail: func(m *outbox.Message) error {
		switch {
		case m.ID == "poison":
			return inbox.Permanent(errors.New("destination refused"))
		case m.ID == "oversized":
			return fmt.Errorf("%w: payload over the limit", broker.ErrInvalidMessage)
		case m.ID == "bad" && failing:
			return errors.New("broker down\x00\xff")
		}
		return nil
	}}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish, MaxAttempts: 3,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1}})
	var sum outbox.RelayResult
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		res, err := r.RelayOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sum.Published += res.Published
		sum.Failed += res.Failed
		sum.Parked += res.Parked
		if sum.Parked == 3 {
			break
		}
	}
	if got := s.ids(); !slices.Equal(got, []string{"good-1", "good-2"}) || sum.Failed != 2 || sum.Parked != 3 {
		t.Fatalf("published %q, %d failed, %d parked; want good-1, good-2, 2 failures of bad, and 3 parked", got, sum.Failed, sum.Parked)
	}
	parked, err := r.Parked(context.Background(), 0, 10)
	if err != nil || len(parked) != 3 {
		t.Fatalf("Parked: %d, %v; want 3", len(parked), err)
	}
	if p := parked[2]; p.Message.ID != "oversized" || p.Attempts != 1 {
		t.Fatalf("parked[2] = %+v, want oversized parked at its first attempt (broker.ErrInvalidMessage)", p)
	}
	if p := parked[0]; p.Message.ID != "bad" || p.Attempts != 3 || p.Error != "broker down\uFFFD\uFFFD" || p.ParkedAt.IsZero() ||
		string(p.Message.Payload) != "payload of bad" || p.Message.Headers["bin"] != "\x00\xff" {
		t.Fatalf("parked[0] = %+v %+v, want bad with 3 attempts, its error and its message", p, p.Message)
	}
	if p := parked[1]; p.Message.ID != "poison" || p.Attempts != 1 || p.Error != "destination refused" {
		t.Fatalf("parked[1] = %+v, want poison with 1 attempt", p)
	}
	if page, err := r.Parked(context.Background(), parked[0].Seq, 1); err != nil || len(page) != 1 || page[0].Message.ID != "poison" {
		t.Fatalf("Parked after %d, 1: %v %v, want poison alone", parked[0].Seq, page, err)
	}
	if res := drain(t, r); res.Claimed != 0 {
		t.Fatalf("parked rows were claimed: %+v", res)
	}
	failing = false
	if err := r.Unpark(context.Background(), parked[0].Seq); err != nil {
		t.Fatal(err)
	}
	if err := r.Unpark(context.Background(), parked[0].Seq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second Unpark: %v, want store.ErrNotFound", err)
	}
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"good-1", "good-2", "bad"}) {
		t.Fatalf("after Unpark published %q, want bad last", got)
	}
}

// A relay that claimed rows and died leaves them to the next relay once
// its lease ran out, not before; its late delete cannot remove what the
// next relay claimed. A relay that stops gives back what it did not
// publish at once.
func testOutboxLease[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	e.write(t, true, outMsg("l-1"))
	dead := []byte("dead relay token")
	// Long enough for the relay below to start and drain on a loaded
	// machine (500 ms was not, once, in CI).
	const lease = 3 * time.Second
	claimed := time.Now()
	recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: lease, Token: dead})
	if err != nil || len(recs) != 1 {
		t.Fatalf("claim: %d rows, %v", len(recs), err)
	}
	returned := time.Now() // the lease began (the database's clock) between claimed and returned
	s := &sink{}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish})
	if res := drain(t, r); res.Claimed != 0 {
		t.Fatalf("a leased row was claimed again within its lease (%v after the claim, lease %v): %+v", time.Since(claimed), lease, res)
	}
	time.Sleep(time.Until(returned.Add(lease + 100*time.Millisecond)))
	next := []byte("next relay token")
	if recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Minute, Token: next}); err != nil || len(recs) != 1 {
		t.Fatalf("claim after the lease: %d rows, %v; want the row", len(recs), err)
	}
	if n, err := e.rs.OutboxDelete(ctx, dead, []int64{recs[0].Seq}); err != nil || n != 0 {
		t.Fatalf("the dead relay's late delete deleted %d (%v), want 0", n, err)
	}
	if err := e.rs.OutboxFail(ctx, next, []store.OutboxFailure{{Seq: recs[0].Seq, Released: true}}); err != nil {
		t.Fatal(err)
	}
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"l-1"}) {
		t.Fatalf("published %q after the release, want l-1", got)
	}

	// Shutdown mid-batch: the unpublished rest is released at once.
	e.write(t, true, outMsg("s-1"), outMsg("s-2"), outMsg("s-3"))
	cctx, cancel := context.WithCancel(ctx)
	stopping := &sink{fail: func(m *outbox.Message) error {
		cancel() // the relay is told to stop while publishing s-1
		return nil
	}}
	res, err := e.relay(t, outbox.RelayConfig{Publish: stopping.publish}).RelayOnce(cctx)
	if err != nil || res.Claimed != 3 || res.Published != 1 {
		t.Fatalf("stopped relay: %+v %v, want 3 claimed, 1 published", res, err)
	}
	drain(t, r) // no lease to wait for
	if got := s.ids(); !slices.Equal(got, []string{"l-1", "s-2", "s-3"}) {
		t.Fatalf("published %q, want s-2 and s-3 released at once", got)
	}
}

// Rows that commit out of their sequence order are all published: no
// cursor skips the one that committed late.
func testOutboxCommitOrder[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	if e.SingleWriter {
		t.Skip("one writer at a time (SQLite): sequence numbers commit in order")
	}
	early, err := e.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Driver.Rollback(ctx, early) }()
	if err := e.ob.Write(ctx, early, outMsg("first-written")); err != nil {
		t.Fatal(err)
	}
	e.write(t, true, outMsg("second-written"))
	s := &sink{}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish})
	drain(t, r)
	if err := e.Driver.Commit(ctx, early); err != nil {
		t.Fatal(err)
	}
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"second-written", "first-written"}) {
		t.Fatalf("published %q, want both, the late commit too", got)
	}
}

// Relays racing on one table publish every row, and none twice while
// their leases hold.
func testOutboxRelaysShare[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	const n = 300
	var batch []*outbox.Message
	for i := range n {
		batch = append(batch, outMsg(fmt.Sprintf("r-%03d", i)))
		if len(batch) == 50 {
			e.write(t, true, batch...)
			batch = nil
		}
	}
	s := &sink{}
	var wg sync.WaitGroup
	for range 4 {
		r := e.relay(t, outbox.RelayConfig{Publish: s.publish, Batch: 7, Parallel: 4})
		wg.Go(func() {
			for {
				res, err := r.RelayOnce(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, id := range s.ids() {
		seen[id]++
	}
	for i := range n {
		if id := fmt.Sprintf("r-%03d", i); seen[id] != 1 {
			t.Fatalf("%s published %d times, want once", id, seen[id])
		}
	}
}

// With Ordered, a key's messages go out one at a time in the order
// written: a failing one holds back its key's later ones (not other
// keys'), even with several relays.
func testOutboxOrdered[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	var msgs []*outbox.Message
	for i := range 30 {
		m := outMsg(fmt.Sprintf("k%d-%02d", i%3, i))
		m.Key = fmt.Sprintf("k%d", i%3)
		if i%3 == 2 {
			m.Key = "" // no key: never held back
		}
		msgs = append(msgs, m)
	}
	e.write(t, true, msgs...)
	failedOnce := false
	s := &sink{fail: func(m *outbox.Message) error {
		if m.ID == "k0-03" && !failedOnce {
			failedOnce = true
			return errors.New("once")
		}
		return nil
	}}
	var wg sync.WaitGroup
	for range 2 {
		r := e.relay(t, outbox.RelayConfig{Publish: s.publish, Ordered: true, Batch: 4, Parallel: 4,
			Backoff: inbox.Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1}})
		wg.Go(func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if _, err := r.RelayOnce(context.Background()); err != nil {
					t.Error(err)
					return
				}
				if len(s.ids()) == len(msgs) {
					return
				}
			}
		})
	}
	wg.Wait()
	got := s.ids()
	if len(got) != len(msgs) {
		t.Fatalf("published %d of %d: %q", len(got), len(msgs), got)
	}
	last := map[byte]string{}
	for _, id := range got {
		k := id[1]
		if k != '2' && id < last[k] {
			t.Fatalf("published %q: %s after %s, out of its key's order", got, id, last[k])
		}
		last[k] = id
	}
	// k0-03 failed once: k0's later messages waited for it, so it came
	// before them; keyless ones did not wait.
	if i, j := slices.Index(got, "k0-03"), slices.Index(got, "k0-06"); i > j {
		t.Fatalf("published %q: k0-06 overtook the failed k0-03", got)
	}
}

// A handler that writes to the outbox with DerivedID and fails after the
// write leaves nothing; its retry writes the same ID once; the message's
// redelivery writes nothing more.
func testOutboxFromHandler[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ib := newInbox(t, e.Env, inbox.Config{})
	ctx := context.Background()
	fail := true
	handler := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		err := e.ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("storetest", m.ID, "follow-up"),
			Destination: "storetest.follow-up", Payload: m.Payload})
		if err != nil {
			return err
		}
		if fail {
			fail = false
			return errors.New("after the write")
		}
		return nil
	}
	for i, want := range []inbox.Status{inbox.Retry, inbox.Processed, inbox.Duplicate} {
		if out, _ := ib.Process(ctx, msg("in-1"), handler); out.Status != want {
			t.Fatalf("delivery %d: %v, want %v", i+1, out.Status, want)
		}
	}
	s := &sink{}
	drain(t, e.relay(t, outbox.RelayConfig{Publish: s.publish}))
	want := outbox.DerivedID("storetest", "in-1", "follow-up")
	if got := s.ids(); !slices.Equal(got, []string{want}) {
		t.Fatalf("published %q, want %q once", got, want)
	}
	if other := outbox.DerivedID("shipping", "in-1", "follow-up"); other == want {
		t.Fatal("two consumers derive the same ID")
	}
}

// New and NewRelay refuse tables that were not migrated.
func testOutboxSchemaChecked[TTx any](t *testing.T, h Harness[TTx]) {
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, _ := any(env.Driver).(store.OutboxWriter[TTx])
	rs, _ := any(env.Driver).(store.OutboxRelayer)
	if w == nil || rs == nil {
		t.Fatalf("%T is not an outbox store", env.Driver)
	}
	if _, err := outbox.New(ctx, w, nil); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("New before Migrate: %v, want ErrNotMigrated", err)
	}
	s := &sink{}
	if _, err := outbox.NewRelay(ctx, rs, &outbox.RelayConfig{Publish: s.publish}); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("NewRelay before Migrate: %v, want ErrNotMigrated", err)
	}
}

// Run wakes on new rows where the database tells it (LISTEN/NOTIFY),
// long before its poll would have found them.
func testOutboxRunWakes[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	l, ok := e.rs.(store.OutboxListener)
	if !ok {
		t.Skip("the database cannot tell a relay of new rows: the relay polls")
	}
	n, err := l.OutboxListen(context.Background())
	if errors.Is(err, store.ErrNoNotifications) {
		t.Skipf("the relay polls: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	s := &sink{}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish, PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // Run's first round found nothing
	for i := range 3 {
		id := fmt.Sprintf("w-%d", i)
		e.write(t, true, outMsg(id))
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Contains(s.ids(), id) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not published 5 s after its commit, with an hour's poll", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// A relay publishes up to Parallel rows of a batch at once, never more.
func testOutboxParallel[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	var msgs []*outbox.Message
	for i := range 8 {
		msgs = append(msgs, outMsg(fmt.Sprintf("p-%d", i)))
	}
	e.write(t, true, msgs...)
	var mu sync.Mutex
	inFlight, most, arrived := 0, 0, 0
	waves := []chan struct{}{make(chan struct{}), make(chan struct{})}
	publish := func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		arrived++
		wave := waves[(arrived-1)/4%2]
		if arrived%4 == 0 {
			close(wave) // the wave's fourth: all four go
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		select {
		case <-wave:
			return nil
		case <-time.After(2 * time.Second):
			return errors.New("fewer than 4 publications in flight after 2 s")
		}
	}
	res := drain(t, e.relay(t, outbox.RelayConfig{Publish: publish, Parallel: 4}))
	if res.Published != 8 || most != 4 {
		t.Fatalf("relayed %+v with at most %d in flight, want 8 published, 4 at once", res, most)
	}
}

// With KeepPublished, published rows stay (marked) until they are older:
// never claimed again, their IDs still skipped by Write, not holding back
// their key's next row; then PrunePublished deletes them.
func testOutboxKeepPublished[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	first := outMsg("kept-1")
	first.Key = "k"
	e.write(t, true, first)
	s := &sink{}
	// A lease as short as allowed, so that a marked row outlives it: it
	// must stay unclaimed for being published, not for being leased.
	keep := e.relay(t, outbox.RelayConfig{Publish: s.publish, KeepPublished: time.Hour, Ordered: true,
		Lease: 20 * time.Millisecond, PublishTimeout: 10 * time.Millisecond})
	drain(t, keep)
	time.Sleep(30 * time.Millisecond)
	second := outMsg("kept-2")
	second.Key = "k"
	e.write(t, true, outMsg("kept-1"), second) // kept-1 again: skipped
	drain(t, keep)
	if got := s.ids(); !slices.Equal(got, []string{"kept-1", "kept-2"}) {
		t.Fatalf("published %q, want kept-1 once, then kept-2 (its key's older row is published, not holding it back)", got)
	}
	if err := keep.PrunePublished(ctx); err != nil {
		t.Fatal(err)
	}
	e.write(t, true, outMsg("kept-1"))
	if drain(t, keep); len(s.ids()) != 2 {
		t.Fatalf("published %q: a kept row was pruned within KeepPublished, or its ID written again", s.ids())
	}
	time.Sleep(20 * time.Millisecond)
	short := e.relay(t, outbox.RelayConfig{Publish: s.publish, KeepPublished: 10 * time.Millisecond})
	if err := short.PrunePublished(ctx); err != nil {
		t.Fatal(err)
	}
	e.write(t, true, outMsg("kept-1")) // its kept row is gone: written and published again
	drain(t, short)
	if got := s.ids(); !slices.Equal(got, []string{"kept-1", "kept-2", "kept-1"}) {
		t.Fatalf("published %q, want kept-1 again after its kept row was pruned", got)
	}
}

// While the broker takes nothing (every publication fails, none succeeded
// for OutageAfter), failures are not counted: an outage parks nothing,
// and the rows keep their last error. Once the broker takes messages
// again, a row that still fails is counted and parked.
func testOutboxOutage[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	e.write(t, true, outMsg("o-1"), outMsg("o-2"))
	down := true
	s := &sink{fail: func(m *outbox.Message) error {
		if down || m.ID == "o-2" {
			return errors.New("connection refused")
		}
		return nil
	}}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish, MaxAttempts: 2, OutageAfter: time.Hour,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1}})
	for range 6 { // a fresh relay that never published: an outage from the start
		if _, err := r.RelayOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	if parked, err := r.Parked(ctx, 0, 10); err != nil || len(parked) != 0 {
		t.Fatalf("parked during the outage: %d %v, want none", len(parked), err)
	}
	recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Millisecond, Token: []byte("peek")})
	if err != nil || len(recs) != 2 || recs[0].Attempts != 0 || recs[0].LastError != "connection refused" {
		t.Fatalf("rows after the outage: %d %v (first %+v), want both, 0 attempts, the last error kept", len(recs), err, recs)
	}
	time.Sleep(5 * time.Millisecond) // the peek's lease
	down = false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(3 * time.Millisecond) {
		if _, err := r.RelayOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if parked, _ := r.Parked(ctx, 0, 10); len(parked) == 1 {
			if parked[0].Message.ID != "o-2" || parked[0].Attempts != 2 || !slices.Equal(s.ids(), []string{"o-1"}) {
				t.Fatalf("parked %+v, published %q; want o-2 after 2 counted attempts, o-1 published", parked[0], s.ids())
			}
			return
		}
	}
	t.Fatalf("o-2 never parked once the broker took o-1 (published %q)", s.ids())
}

// Discard deletes a parked row, and only a parked one. While the row is
// parked a Write with its ID is skipped; after the discard the key's
// later rows flow (Ordered), and a corrected Write with the ID is written
// and published.
func testOutboxDiscard[TTx any](t *testing.T, h Harness[TTx]) {
	e := openOutbox(t, h)
	ctx := context.Background()
	bad, next, other := outMsg("k-1"), outMsg("k-2"), outMsg("x")
	bad.Key, next.Key, other.Key = "k", "k", "x"
	bad.Payload = []byte("bad")
	e.write(t, true, bad, next, other)
	peek := []byte("peek")
	recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Minute, Token: peek})
	if err != nil || len(recs) != 3 {
		t.Fatalf("claim: %d rows, %v; want 3", len(recs), err)
	}
	var back []store.OutboxFailure
	for _, rec := range recs {
		back = append(back, store.OutboxFailure{Seq: rec.Seq, Released: true})
	}
	if err := e.rs.OutboxFail(ctx, peek, back); err != nil {
		t.Fatal(err)
	}
	s := &sink{fail: func(m *outbox.Message) error {
		if string(m.Payload) == "bad" {
			return inbox.Permanent(errors.New("refused"))
		}
		return nil
	}}
	r := e.relay(t, outbox.RelayConfig{Publish: s.publish, Ordered: true})
	if err := r.Discard(ctx, recs[1].Seq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Discard of a row that is not parked: %v, want store.ErrNotFound", err)
	}
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("published %q, want x alone: k-1 parked, k-2 held back by it", got)
	}
	fixed := outMsg("k-1")
	fixed.Key = "k"
	e.write(t, true, fixed)
	drain(t, r)
	parked, err := r.Parked(ctx, 0, 10)
	if err != nil || len(parked) != 1 || string(parked[0].Message.Payload) != "bad" || len(s.ids()) != 1 {
		t.Fatalf("after a Write with the parked row's ID: parked %v (%v), published %q; want the bad k-1 parked, the Write skipped",
			parked, err, s.ids())
	}
	if err := r.Discard(ctx, parked[0].Seq); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	if err := r.Discard(ctx, parked[0].Seq); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second Discard: %v, want store.ErrNotFound", err)
	}
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"x", "k-2"}) {
		t.Fatalf("after Discard published %q, want x, then k-2 (its key no longer held back)", got)
	}
	e.write(t, true, fixed)
	drain(t, r)
	if got := s.ids(); !slices.Equal(got, []string{"x", "k-2", "k-1"}) || string(s.msgs[2].Payload) != "payload of k-1" {
		t.Fatalf("after Discard and a corrected Write published %q, want the corrected k-1 last", got)
	}
	if parked, err := r.Parked(ctx, 0, 10); err != nil || len(parked) != 0 {
		t.Fatalf("parked after all: %d %v, want none", len(parked), err)
	}
}

// RelayConfig.Probe tells an outage from a bad row whatever the other
// traffic: a row the receiver refuses while it answers is parked after
// MaxAttempts, though nothing else was ever published; while the probe
// fails, nothing is counted, even just after a success; the probe runs
// once a round.
func testOutboxProbe[TTx any](t *testing.T, h Harness[TTx]) {
	for _, tc := range []struct {
		name     string
		first    bool  // publish a row successfully first
		probeErr error // the probe's answer
		parked   bool
	}{
		{name: "refused while the receiver answers", probeErr: nil, parked: true},
		{name: "outage", probeErr: errors.New("connection refused"), parked: false},
		{name: "outage just after a success", first: true, probeErr: errors.New("connection refused"), parked: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := openOutbox(t, h)
			ctx := context.Background()
			var mu sync.Mutex
			probes := 0
			s := &sink{fail: func(m *outbox.Message) error {
				if m.ID == "ok" {
					return nil
				}
				return errors.New("nats: no responders available for request")
			}}
			r := e.relay(t, outbox.RelayConfig{Publish: s.publish, MaxAttempts: 3, OutageAfter: time.Hour,
				Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1},
				Probe: func(context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					probes++
					return tc.probeErr
				}})
			if tc.first {
				e.write(t, true, outMsg("ok"))
				if res := drain(t, r); res.Published != 1 {
					t.Fatalf("first row: %+v, want it published", res)
				}
			}
			e.write(t, true, outMsg("refused-1"), outMsg("refused-2"))
			rounds := 0
			var parked []*outbox.Parked
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && rounds < 20; time.Sleep(3 * time.Millisecond) {
				res, err := r.RelayOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if res.Claimed > 0 {
					rounds++
				}
				if parked, err = r.Parked(ctx, 0, 10); err != nil {
					t.Fatal(err)
				}
				if len(parked) == 2 {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if probes == 0 || probes > rounds {
				t.Fatalf("%d probes in %d rounds, want one a round that failed", probes, rounds)
			}
			if !tc.parked {
				recs, err := e.rs.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Minute, Token: []byte("peek")})
				if len(parked) != 0 || err != nil || len(recs) != 2 || recs[0].Attempts != 0 || recs[1].Attempts != 0 {
					t.Fatalf("after %d rounds with the probe failing: %d parked; rows %+v (%v); want none parked, 0 attempts counted", rounds, len(parked), recs, err)
				}
				return
			}
			if len(parked) != 2 || parked[0].Attempts != 3 || parked[0].Error != "nats: no responders available for request" {
				t.Fatalf("after %d rounds with the probe answering: parked %+v, want both rows after 3 attempts, the only traffic", rounds, parked)
			}
		})
	}
}
