package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
)

type outcomeHooks struct {
	mu     sync.Mutex
	counts map[inbox.Status]int
	bad    []string
}

func (o *outcomeHooks) record(e *inbox.Event, want inbox.Status) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[inbox.Status]int{}
	}
	o.counts[e.Outcome.Status]++
	if e.Outcome.Status != want || e.Duration <= 0 || e.Message == nil || e.Consumer != "storetest" {
		o.bad = append(o.bad, fmt.Sprintf("%v hook got %+v", want, e))
	}
}

func (o *outcomeHooks) OnProcessed(_ context.Context, e *inbox.Event) { o.record(e, inbox.Processed) }
func (o *outcomeHooks) OnDuplicate(_ context.Context, e *inbox.Event) { o.record(e, inbox.Duplicate) }
func (o *outcomeHooks) OnRetry(_ context.Context, e *inbox.Event)     { o.record(e, inbox.Retry) }
func (o *outcomeHooks) OnDeadLettered(_ context.Context, e *inbox.Event) {
	o.record(e, inbox.DeadLettered)
}

func testHooks[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	hooks, counts := &outcomeHooks{}, &inbox.Counts{}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Hooks: []any{hooks, counts}})
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("no") }
	_, _ = ib.Process(ctx, msg("h-1"), writer(env))  // processed
	_, _ = ib.Process(ctx, msg("h-1"), writer(env))  // duplicate
	_, _ = ib.Process(ctx, msg("h-2"), failing)      // retry
	_, _ = ib.Process(ctx, msg("h-2"), failing)      // dead-lettered
	_, _ = ib.Process(ctx, inbox.Message{}, failing) // invalid: dead-lettered
	want := map[inbox.Status]int{inbox.Processed: 1, inbox.Duplicate: 1, inbox.Retry: 1, inbox.DeadLettered: 2}
	if fmt.Sprint(hooks.counts) != fmt.Sprint(want) || len(hooks.bad) > 0 {
		t.Fatalf("hooks saw %v (%v), want %v", hooks.counts, hooks.bad, want)
	}
	if got, want := counts.String(), "processed 1, duplicates 1, retries 1, dead-lettered 2"; got != want || counts.Outcomes() != 5 {
		t.Fatalf("inbox.Counts: %q (%d outcomes), want %q (5)", got, counts.Outcomes(), want)
	}
}

// panicHooks panics in every hook.
type panicHooks struct{}

func (panicHooks) OnProcessed(context.Context, *inbox.Event)           { panic("hook boom") }
func (panicHooks) OnDuplicate(context.Context, *inbox.Event)           { panic("hook boom") }
func (panicHooks) OnRetry(context.Context, *inbox.Event)               { panic("hook boom") }
func (panicHooks) OnDeadLettered(context.Context, *inbox.Event)        { panic("hook boom") }
func (panicHooks) OnFingerprintConflict(context.Context, *inbox.Event) { panic("hook boom") }
func (panicHooks) OnPruned(context.Context, *inbox.PruneEvent)         { panic("hook boom") }

// A panicking hook runs after COMMIT and before the ack: it must neither
// kill the worker nor change the outcome, nor keep the hooks after it from
// running; it is logged at ERROR with the hook, consumer and message ID.
func testHookPanics[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	logs := &logtest.Buffer{}
	counted := &outcomeHooks{}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Logger: logs.Logger(), Hooks: []any{panicHooks{}, counted}})
	m := msg("hp-1")
	changed := m
	changed.Payload = []byte("another payload")
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("no") }
	steps := []struct {
		m    inbox.Message
		hd   inbox.Handler[TTx]
		want inbox.Status
		hook string
	}{
		{m, writer(env), inbox.Processed, "OnProcessed"},
		{m, writer(env), inbox.Duplicate, "OnDuplicate"},
		{changed, writer(env), inbox.Duplicate, "OnFingerprintConflict"},
		{msg("hp-2"), failing, inbox.Retry, "OnRetry"},
		{msg("hp-2"), failing, inbox.DeadLettered, "OnDeadLettered"},
	}
	for _, st := range steps {
		out, _ := ib.Process(ctx, st.m, st.hd)
		wantStatus(t, st.hook+" panics", out, st.want)
		if !logs.Has("level=ERROR", "hook="+st.hook, "consumer=storetest", st.m.ID, "hook boom") {
			t.Fatalf("no ERROR log naming %s, the consumer and %q; log:\n%s", st.hook, st.m.ID, logs)
		}
	}
	if n := count(t, env, "hp-1"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	want := map[inbox.Status]int{inbox.Processed: 1, inbox.Duplicate: 2, inbox.Retry: 1, inbox.DeadLettered: 1}
	if fmt.Sprint(counted.counts) != fmt.Sprint(want) {
		t.Fatalf("the hook after the panicking one saw %v, want %v", counted.counts, want)
	}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Logger: logs.Logger(), Hooks: []any{panicHooks{}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prune(ctx); err != nil {
		t.Fatalf("prune with a panicking hook: %v", err)
	}
	if !logs.Has("level=ERROR", "hook=OnPruned") {
		t.Fatalf("no ERROR log naming OnPruned; log:\n%s", logs)
	}
}
