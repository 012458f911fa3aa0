package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/store"
)

func testClaimThenDuplicate[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	calls := 0
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		calls++
		return env.Write(ctx, tx, key(m.ID))
	}
	out, err := process(t, ib, msg("m-1"), hd)
	if err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	wantStatus(t, "first delivery", out, inbox.Processed)
	if !out.Ack() {
		t.Fatal("a processed message must be acked")
	}
	for i := range 3 {
		out, err = process(t, ib, msg("m-1"), hd)
		if err != nil {
			t.Fatalf("redelivery %d: %v", i, err)
		}
		wantStatus(t, "redelivery", out, inbox.Duplicate)
	}
	if calls != 1 || count(t, env, "m-1") != 1 {
		t.Fatalf("handler ran %d times, %d effects; want 1 and 1", calls, count(t, env, "m-1"))
	}
}

func testHandlerErrorRollsBack[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	boom := errors.New("boom")
	out, err := process(t, ib, msg("m-2"), func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the handler's error", err)
	}
	wantStatus(t, "failing handler", out, inbox.Retry)
	if out.Ack() || out.Attempts != 1 || out.Delay <= 0 {
		t.Fatalf("outcome %+v: want no ack, 1 attempt, a delay", out)
	}
	if n := count(t, env, "m-2"); n != 0 {
		t.Fatalf("%d effects after a rollback, want 0", n)
	}
	out, err = process(t, ib, msg("m-2"), writer(env))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "redelivery after failure", out, inbox.Processed)
	if n := count(t, env, "m-2"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

func testIDs[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	invalid := []struct {
		name, id, reason string
	}{
		{"empty", "", "empty ID"},
		{"1025 bytes", strings.Repeat("x", 1025), "1025 bytes"},
	}
	for _, tc := range invalid {
		m := msg(tc.id)
		m.Type = "bad\xff\x00type"
		out, err := ib.Process(ctx, m, writer(env))
		var ime *inbox.InvalidMessageError
		if out.Status != inbox.DeadLettered || !out.Ack() || err != nil ||
			!errors.As(out.Err, &ime) || !strings.Contains(ime.Reason, tc.reason) || !errors.Is(out.Err, inbox.ErrInvalidMessage) {
			t.Fatalf("%s: %v %v (Outcome.Err %v), want DeadLettered, no error, and Outcome.Err naming %q", tc.name, out.Status, err, out.Err, tc.reason)
		}
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != len(invalid) {
		t.Fatalf("dead letters of invalid messages: %d, %v; want %d", len(dls), err, len(invalid))
	}
	for i, dl := range dls {
		if dl.Message.ID != invalid[i].id || string(dl.Message.Payload) != "payload of "+invalid[i].id ||
			dl.Message.Headers["bin"] != "\x00\xff" || !strings.Contains(dl.Error, invalid[i].reason) ||
			dl.Message.Type != "bad\uFFFD\\0type" {
			t.Fatalf("dead letter %d = %+v: want the message kept, with a storable type", i, dl)
		}
		if _, err := ib.Replay(ctx, dl.ID, writer(env)); !errors.Is(err, inbox.ErrInvalidMessage) {
			t.Fatalf("replay of an invalid message: %v, want ErrInvalidMessage", err)
		}
		if err := ib.Discard(ctx, dl.ID); err != nil {
			t.Fatalf("discard: %v", err)
		}
	}
	valid := []string{strings.Repeat("y", 1024), "a\x00b", "\x00", "\xff\xfe\xfd", "a", "A", "a ", " a", "ä", "a\x00"}
	for _, id := range valid {
		out, err := ib.Process(ctx, msg(id), writer(env))
		if err != nil || out.Status != inbox.Processed {
			t.Fatalf("ID %q: %v %v, want Processed", id, out.Status, err)
		}
	}
	for _, id := range valid {
		out, err := ib.Process(ctx, msg(id), writer(env))
		if err != nil || out.Status != inbox.Duplicate {
			t.Fatalf("ID %q again: %v %v, want Duplicate", id, out.Status, err)
		}
		if n := count(t, env, id); n != 1 {
			t.Fatalf("ID %q: %d effects, want 1: IDs must be distinct byte strings", id, n)
		}
	}
	for _, c := range []string{"", strings.Repeat("c", 129)} {
		if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: c}); !errors.Is(err, inbox.ErrInvalidConfig) {
			t.Fatalf("consumer of %d bytes: %v, want ErrInvalidConfig", len(c), err)
		}
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: strings.Repeat("c", 128)}); err != nil {
		t.Fatalf("consumer of 128 bytes: %v", err)
	}
}

// IDs and consumers are bytes: no case folding, no PAD SPACE collation, no
// trimming, so each of these is its own message (or consumer).
func testCaseAndPadDistinct[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	variants := []string{"a", "A", "a ", "a  ", "\u00e1", "a\u0301"}
	for _, consumer := range []string{"svc", "SVC", "svc "} {
		ib := newInbox(t, env, inbox.Config{Consumer: consumer})
		for _, id := range variants {
			m := msg(id)
			out, err := ib.Process(ctx, m, func(ctx context.Context, tx TTx, m *inbox.Message) error {
				return env.Write(ctx, tx, key(consumer+"/"+m.ID))
			})
			if err != nil || out.Status != inbox.Processed {
				t.Fatalf("consumer %q, ID %q: %v %v, want Processed: IDs and consumers that differ in case or trailing spaces are distinct",
					consumer, id, out.Status, err)
			}
		}
	}
	for _, consumer := range []string{"svc", "SVC", "svc "} {
		for _, id := range variants {
			if n := count(t, env, consumer+"/"+id); n != 1 {
				t.Fatalf("consumer %q, ID %q: %d effects, want 1", consumer, id, n)
			}
		}
	}
}

type conflictHook struct {
	mu     sync.Mutex
	events []inbox.Event
}

func (c *conflictHook) OnFingerprintConflict(_ context.Context, e *inbox.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, *e)
}

func testFingerprintConflict[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	hook, counts := &conflictHook{}, &inbox.Counts{}
	ib := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{hook, counts}})
	m := msg("fp")
	if _, err := ib.Process(ctx, m, writer(env)); err != nil {
		t.Fatal(err)
	}
	if out, err := ib.Process(ctx, m, writer(env)); err != nil || out.Status != inbox.Duplicate || len(hook.events) != 0 {
		t.Fatalf("same payload: %v %v, %d conflicts; want a quiet duplicate", out.Status, err, len(hook.events))
	}
	changed := m
	changed.Payload = []byte("another payload")
	out, err := ib.Process(ctx, changed, writer(env))
	if err != nil || out.Status != inbox.Duplicate || len(hook.events) != 1 {
		t.Fatalf("changed payload: %v %v, %d conflicts; want a duplicate and 1 conflict", out.Status, err, len(hook.events))
	}
	if e := hook.events[0]; string(e.StoredFingerprint) == string(e.Fingerprint) || len(e.Fingerprint) != 32 {
		t.Fatalf("conflict event %+v: want two different SHA-256 fingerprints", e)
	}
	if !errors.Is(out.Err, inbox.ErrFingerprintConflict) || !out.Ack() {
		t.Fatalf("changed payload: Outcome.Err %v, want ErrFingerprintConflict with an ack", out.Err)
	}
	if n := count(t, env, "fp"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if got, want := counts.String(), "processed 1, duplicates 2, retries 0, dead-lettered 0, fingerprint conflicts 1"; got != want {
		t.Fatalf("inbox.Counts: %q, want %q", got, want)
	}
}

// typed is a message of type typ.
func typed(id, typ string) inbox.Message {
	m := msg(id)
	m.Type, m.Payload = typ, []byte(typ+" of "+id)
	return m
}

// Without ScopeIDByType a producer that numbers each type on its own gets
// its second type skipped: the duplicate's warning names both types.
func testIDNotScopedByType[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	logs := &logtest.Buffer{}
	hook := &conflictHook{}
	ib := newInbox(t, env, inbox.Config{Logger: logs.Logger(), Hooks: []inbox.Hook{hook}})
	if out, err := ib.Process(ctx, typed("order-123", "OrderCreated"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("OrderCreated: %v %v, want Processed", out.Status, err)
	}
	if out, err := ib.Process(ctx, typed("order-123", "OrderShipped"), writer(env)); err != nil || out.Status != inbox.Duplicate {
		t.Fatalf("OrderShipped: %v %v, want Duplicate (the key is the ID alone)", out.Status, err)
	}
	if !logs.Has("level=WARN", "stored_type=OrderCreated", "type=OrderShipped", "order-123") {
		t.Fatalf("no WARN naming the stored type OrderCreated and the new type OrderShipped; log:\n%s", logs)
	}
	if len(hook.events) != 1 || hook.events[0].StoredType != "OrderCreated" || hook.events[0].Message.Type != "OrderShipped" {
		t.Fatalf("conflict events %+v, want one with StoredType OrderCreated and Message.Type OrderShipped", hook.events)
	}
}

// With ScopeIDByType the key is the type and the ID together, through
// Process, ProcessTx and a replay, and no two (type, ID) pairs collide.
func testScopeIDByType[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	logs := &logtest.Buffer{}
	ib := newInbox(t, env, inbox.Config{ScopeIDByType: true, Logger: logs.Logger()})
	// Pairs whose plain concatenation, or a NUL separator, would collide.
	msgs := []inbox.Message{
		typed("order-123", "OrderCreated"), typed("order-123", "OrderShipped"), typed("order-123", ""),
		typed("bc", "a"), typed("c", "ab"), typed("b\x00c", "a"), typed("c", "a\x00b"), typed("\xff", "\x00\xff"),
	}
	for _, m := range msgs {
		if out, err := ib.Process(ctx, m, writer(env)); err != nil || out.Status != inbox.Processed {
			t.Fatalf("type %q ID %q: %v %v, want Processed (scoped by type)", m.Type, m.ID, out.Status, err)
		}
	}
	for _, m := range msgs {
		if out, err := ib.Process(ctx, m, writer(env)); err != nil || out.Status != inbox.Duplicate {
			t.Fatalf("type %q ID %q again: %v %v, want Duplicate", m.Type, m.ID, out.Status, err)
		}
	}
	if n := count(t, env, "order-123"); n != 3 {
		t.Fatalf("%d effects of order-123, want 3 (one per type)", n)
	}
	if logs.Has("level=WARN") {
		t.Fatalf("scoped IDs gave a warning:\n%s", logs)
	}
	// ProcessTx uses the same key.
	processTx := func(m inbox.Message) inbox.Status {
		t.Helper()
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, m, writer(env))
		if err == nil && out.Commit() {
			err = env.Driver.Commit(ctx, tx)
		} else {
			_ = env.Driver.Rollback(ctx, tx)
		}
		if err != nil {
			t.Fatalf("ProcessTx type %q ID %q: %v", m.Type, m.ID, err)
		}
		return out.Status
	}
	if st := processTx(typed("order-123", "OrderShipped")); st != inbox.Duplicate {
		t.Fatalf("ProcessTx of a processed (type, ID): %v, want Duplicate", st)
	}
	if st := processTx(typed("order-123", "OrderPaid")); st != inbox.Processed {
		t.Fatalf("ProcessTx of a new type: %v, want Processed", st)
	}
	// The scoped key must fit in MaxIDLen.
	long := typed(strings.Repeat("i", inbox.MaxIDLen-10), strings.Repeat("t", 10))
	if out, err := ib.Process(ctx, long, writer(env)); !errors.Is(out.Err, inbox.ErrInvalidMessage) || err != nil || out.Status != inbox.DeadLettered {
		t.Fatalf("ID and type over MaxIDLen: %v %v (Outcome.Err %v), want DeadLettered with ErrInvalidMessage in Outcome.Err", out.Status, err, out.Err)
	}
	// A dead letter replays under its scoped key, with its type as it came.
	dead := typed("dl", "Dead\xff")
	if out, _ := ib.Process(ctx, dead, func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(errors.New("no"))
	}); out.Status != inbox.DeadLettered {
		t.Fatalf("permanent failure: %v, want DeadLettered", out.Status)
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	for _, dl := range dls {
		if dl.Message.ID == dead.ID {
			id = dl.ID
			if dl.Message.Type != dead.Type {
				t.Fatalf("dead letter type %q, want %q", dl.Message.Type, dead.Type)
			}
		}
	}
	if id == 0 {
		t.Fatalf("dead letters %+v: none with ID %q", dls, dead.ID)
	}
	if out, err := ib.Replay(ctx, id, writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("replay: %v %v, want Processed", out.Status, err)
	}
	if out, err := ib.Process(ctx, dead, writer(env)); err != nil || out.Status != inbox.Duplicate {
		t.Fatalf("redelivery after the replay: %v %v, want Duplicate", out.Status, err)
	}
}

// With Config.NoFingerprint no fingerprint is stored or compared: an ID
// reused for another payload is a plain duplicate, whichever of the two
// deliveries (Process or a batch) had none.
func testNoFingerprint[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	hook, counts := &conflictHook{}, &inbox.Counts{}
	plain := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{hook, counts}})
	bare := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{hook, counts}, NoFingerprint: true})
	batchOf := func(ib *inbox.Inbox[TTx]) func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
		return func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
			outs, err := ib.ProcessBatch(ctx, []inbox.Message{m}, writer(env))
			if len(outs) != 1 {
				return inbox.Outcome{}, fmt.Errorf("%d outcomes for 1 message: %w", len(outs), err)
			}
			return outs[0], err
		}
	}
	processOf := func(ib *inbox.Inbox[TTx]) func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
		return func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
			return ib.Process(ctx, m, writer(env))
		}
	}
	if _, ok := any(env.Driver).(store.BatchClaimer[TTx]); !ok {
		batchOf = processOf
	}
	for _, tc := range []struct {
		name          string
		first, second func(ctx context.Context, m inbox.Message) (inbox.Outcome, error)
	}{
		{"stored without, compared with", processOf(bare), processOf(plain)},
		{"stored with, compared without", processOf(plain), processOf(bare)},
		{"batch stored without, compared with", batchOf(bare), batchOf(plain)},
		{"batch stored with, compared without", batchOf(plain), batchOf(bare)},
	} {
		m := msg("nofp-" + tc.name)
		if out, err := tc.first(ctx, m); err != nil || out.Status != inbox.Processed {
			t.Fatalf("%s: first delivery %v %v, want processed", tc.name, out.Status, err)
		}
		changed := m
		changed.Payload = []byte("another payload")
		if out, err := tc.second(ctx, changed); err != nil || out.Status != inbox.Duplicate || out.Err != nil {
			t.Fatalf("%s: reused ID: %v %v (Outcome.Err %v), want a plain duplicate", tc.name, out.Status, err, out.Err)
		}
		if n := count(t, env, m.ID); n != 1 {
			t.Fatalf("%s: %d effects, want 1", tc.name, n)
		}
	}
	if len(hook.events) != 0 || counts.FingerprintConflicts.Load() != 0 {
		t.Fatalf("%d conflicts reported (%s), want none without a fingerprint on one side", len(hook.events), counts)
	}
}
