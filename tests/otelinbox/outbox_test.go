package otelinbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
)

// publishHook records the errors its end functions get; it panics in
// OnPublish when told to.
type publishHook struct {
	mu    sync.Mutex
	ends  []error
	panic bool
}

func (p *publishHook) OnPublish(ctx context.Context, m *outbox.Message) (context.Context, func(error)) {
	if p.panic {
		panic("publish hook boom")
	}
	m.Headers["hooked"] = "yes"
	return ctx, func(err error) { p.mu.Lock(); p.ends = append(p.ends, err); p.mu.Unlock() }
}

// The outbox's hooks: values that are not hooks are refused; a publish
// hook's headers are published and its end function gets Publish's error;
// a panicking publish hook is logged and parks nothing.
func TestOutboxHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, d := openInbox(t, inbox.Config{Consumer: "c"})
	if _, err := outbox.New(ctx, d, &outbox.Config{Hooks: []outbox.Hook{42}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("outbox.New with a non-hook: %v, want ErrInvalidConfig", err)
	}
	noop := func(context.Context, *outbox.Message) error { return nil }
	if _, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: noop, Hooks: []outbox.Hook{"x"}}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Fatalf("outbox.NewRelay with a non-hook: %v, want ErrInvalidConfig", err)
	}
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeRow := func(id string) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: "d", Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	got := map[string]string{} // ID: its "hooked" header
	fail := true
	publish := func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return errors.New("broker says no")
		}
		got[m.ID] = m.Headers["hooked"]
		return nil
	}
	hook := &publishHook{}
	relay, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: publish, Hooks: []outbox.Hook{hook}, Backoff: inbox.Backoff{Initial: 1, Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	writeRow("o-1")
	for range 2 { // fails, then publishes
		if _, err := relay.RelayOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got["o-1"] != "yes" || len(hook.ends) != 2 || hook.ends[0] == nil || hook.ends[1] != nil {
		t.Fatalf("published %v, end errors %v; want o-1 with the hook's header, ends [error, nil]", got, hook.ends)
	}

	var logs bytes.Buffer
	panicky, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: publish, Hooks: []outbox.Hook{&publishHook{panic: true}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	writeRow("o-2")
	res, err := panicky.RelayOnce(ctx)
	if err != nil || res.Published != 1 || res.Parked != 0 {
		t.Fatalf("RelayOnce with a panicking hook: %+v %v, want 1 published, none parked", res, err)
	}
	if _, ok := got["o-2"]; !ok || !strings.Contains(logs.String(), "publish hook boom") {
		t.Fatalf("published %v; log %q; want o-2 published and the panic logged", got, logs.String())
	}
}

// detachedPublishHook returns, from OnPublish, a context made from
// context.Background(), not from the one it was given.
type detachedPublishHook struct{}

type hookKey struct{}

func (detachedPublishHook) OnPublish(context.Context, *outbox.Message) (context.Context, func(error)) {
	return context.WithValue(context.Background(), hookKey{}, "hook"), nil
}

// RelayConfig.PublishTimeout bounds Publish even when a PublishHook
// returns a context that does not derive from its own: Publish gets the
// hook's context with the timeout, and a Publish that waits for its
// context's end fails after PublishTimeout, not never.
func TestPublishTimeoutAfterHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db, d := openInbox(t, inbox.Config{Consumer: "c"})
	ob, err := outbox.New(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Write(ctx, tx, &outbox.Message{ID: "t-1", Destination: "d", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	var value any
	var hasDeadline bool
	publish := func(ctx context.Context, _ *outbox.Message) error { // a broker that never answers
		value = ctx.Value(hookKey{})
		_, hasDeadline = ctx.Deadline()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("Publish's context was not cancelled after PublishTimeout")
		}
	}
	relay, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: publish, PublishTimeout: timeout,
		Hooks: []outbox.Hook{detachedPublishHook{}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, err := relay.RelayOnce(ctx)
	took := time.Since(began)
	if err != nil || res.Failed != 1 {
		t.Fatalf("RelayOnce: %+v %v, want the publication failed", res, err)
	}
	if !hasDeadline || value != "hook" || took > 3*time.Second {
		t.Fatalf("Publish got deadline %v, value %v, and RelayOnce took %v; want a deadline (PublishTimeout %v), the hook's value, and well under 5 s",
			hasDeadline, value, took, timeout)
	}
}
