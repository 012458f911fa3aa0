package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/store"
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
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Hooks: []inbox.Hook{hooks, counts}})
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
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Logger: logs.Logger(), Hooks: []inbox.Hook{panicHooks{}, counted}})
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
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Logger: logs.Logger(), Hooks: []inbox.Hook{panicHooks{}}})
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

// startKey carries, in the context a StartHook returns, the message's ID.
type startKey struct{}

// startHooks stamps each message's context in OnStart and checks that
// the outcome hooks get the stamped context; each OnStart must be paired
// with one outcome hook.
type startHooks struct {
	mu      sync.Mutex
	started map[string]int // OnStart calls per message ID
	ended   map[string]int // outcome hook calls per message ID
	bad     []string
}

func (s *startHooks) OnStart(ctx context.Context, e *inbox.Event) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started == nil {
		s.started, s.ended = map[string]int{}, map[string]int{}
	}
	s.started[e.Message.ID]++
	return context.WithValue(ctx, startKey{}, e.Message.ID)
}

func (s *startHooks) end(ctx context.Context, e *inbox.Event, outcome bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := ctx.Value(startKey{}); got != e.Message.ID {
		s.bad = append(s.bad, fmt.Sprintf("%v of %q got the context of %v", e.Outcome.Status, e.Message.ID, got))
	}
	if outcome {
		s.ended[e.Message.ID]++
	}
}

func (s *startHooks) OnProcessed(ctx context.Context, e *inbox.Event)    { s.end(ctx, e, true) }
func (s *startHooks) OnDuplicate(ctx context.Context, e *inbox.Event)    { s.end(ctx, e, true) }
func (s *startHooks) OnRetry(ctx context.Context, e *inbox.Event)        { s.end(ctx, e, true) }
func (s *startHooks) OnDeadLettered(ctx context.Context, e *inbox.Event) { s.end(ctx, e, true) }
func (s *startHooks) OnFingerprintConflict(ctx context.Context, e *inbox.Event) {
	s.end(ctx, e, false)
}

// startOnly implements StartHook alone: Config.Hooks must take it.
type startOnly struct{}

func (startOnly) OnStart(ctx context.Context, _ *inbox.Event) context.Context { return ctx }

// panicStart panics in OnStart.
type panicStart struct{}

func (panicStart) OnStart(context.Context, *inbox.Event) context.Context { panic("start boom") }

// stamped is a handler that fails unless its context is the one OnStart
// made for its message, then runs next.
func stamped[TTx any](next inbox.Handler[TTx]) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if got := ctx.Value(startKey{}); got != m.ID {
			return inbox.Permanent(fmt.Errorf("handler of %q got the context of %v", m.ID, got))
		}
		return next(ctx, tx, m)
	}
}

// A StartHook's context reaches the handler and the outcome hooks of its
// message, in every way of processing, and each OnStart is followed by one
// outcome hook; a panicking OnStart changes nothing but a log line.
func testStartHook[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	hooks := &startHooks{}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Hooks: []inbox.Hook{hooks}})
	failing := func(context.Context, TTx, *inbox.Message) error { return errors.New("no") }
	changed := msg("s-1")
	changed.Payload = []byte("another payload")
	steps := []struct {
		m    inbox.Message
		hd   inbox.Handler[TTx]
		want inbox.Status
	}{
		{msg("s-1"), stamped(writer(env)), inbox.Processed},
		{msg("s-1"), stamped(writer(env)), inbox.Duplicate},
		{changed, stamped(writer(env)), inbox.Duplicate}, // and a fingerprint conflict
		{msg("s-2"), stamped(failing), inbox.Retry},
		{msg("s-2"), stamped(failing), inbox.DeadLettered},
		{inbox.Message{Payload: []byte("no ID")}, stamped(writer(env)), inbox.DeadLettered},
	}
	for _, st := range steps {
		out, _ := ib.Process(ctx, st.m, st.hd)
		wantStatus(t, "Process "+st.m.ID, out, st.want)
	}
	// Replay: a failure is told as Retry, a success as Processed.
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var replayed bool
	for _, dl := range dls {
		if dl.Message.ID != "s-2" {
			continue
		}
		out, _ := ib.Replay(ctx, dl.ID, stamped(failing))
		wantStatus(t, "failing Replay", out, inbox.Retry)
		out, _ = ib.Replay(ctx, dl.ID, stamped(writer(env)))
		wantStatus(t, "Replay", out, inbox.Processed)
		replayed = true
	}
	if !replayed {
		t.Fatalf("no dead letter of s-2 among %+v", dls)
	}
	// ProcessTx, in the caller's transaction.
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ib.ProcessTx(ctx, tx, msg("s-3"), stamped(writer(env)))
	wantStatus(t, "ProcessTx", out, inbox.Processed)
	if err := env.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"s-1": 3, "s-2": 4, "": 1, "s-3": 1}
	// ProcessBatch, where the store claims batches: each message's handler
	// gets its own context, also when the batch is run again message by
	// message (s-5 fails).
	if _, ok := any(env.Driver).(store.BatchClaimer[TTx]); ok {
		hd := stamped(func(ctx context.Context, tx TTx, m *inbox.Message) error {
			if m.ID == "s-5" {
				return errors.New("no")
			}
			return env.Write(ctx, tx, key(m.ID))
		})
		outs, err := ib.ProcessBatch(ctx, []inbox.Message{msg("s-4"), msg("s-5"), msg("s-4"), msg("s-1")}, hd)
		if err != nil || len(outs) != 4 || outs[0].Status != inbox.Processed || outs[1].Status != inbox.Retry {
			t.Fatalf("ProcessBatch: %+v %v, want s-4 processed, s-5 retried", outs, err)
		}
		want["s-4"], want["s-5"], want["s-1"] = 2, 1, want["s-1"]+1
	}
	// ProcessQueued, where the store runs queued statements.
	if _, ok := any(env.Driver).(store.QueuedClaimer); ok {
		out, err := ib.ProcessQueued(ctx, msg("s-6"), func(ctx context.Context, q *inbox.Queue, m *inbox.Message) error {
			if got := ctx.Value(startKey{}); got != m.ID {
				return inbox.Permanent(fmt.Errorf("queued handler of %q got the context of %v", m.ID, got))
			}
			env.QueueWrite(q, key(m.ID))
			return nil
		})
		wantStatus(t, fmt.Sprintf("ProcessQueued (%v)", err), out, inbox.Processed)
		want["s-6"] = 1
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	if len(hooks.bad) > 0 {
		t.Fatalf("hooks got the wrong context: %v", hooks.bad)
	}
	if fmt.Sprint(hooks.started) != fmt.Sprint(want) || fmt.Sprint(hooks.ended) != fmt.Sprint(want) {
		t.Fatalf("OnStart calls %v, outcome hook calls %v; want both %v", hooks.started, hooks.ended, want)
	}

	// A StartHook alone is a hook; one that panics is logged and the
	// message processed as without it.
	logs := &logtest.Buffer{}
	counts := &inbox.Counts{}
	ib2 := newInbox(t, env, inbox.Config{Consumer: "storetest-start", Logger: logs.Logger(), Hooks: []inbox.Hook{startOnly{}, panicStart{}, counts}})
	out, err = ib2.Process(ctx, msg("s-7"), writer(env))
	wantStatus(t, fmt.Sprintf("Process with a panicking StartHook (%v)", err), out, inbox.Processed)
	if counts.Processed.Load() != 1 || !logs.Has("level=ERROR", "hook=OnStart", "consumer=storetest-start", "s-7", "start boom") {
		t.Fatalf("%v; want processed 1 and an ERROR log naming OnStart, the consumer and s-7; log:\n%s", counts, logs)
	}
}

// detachedStart returns, from OnStart, a context made from
// context.Background(), not from the one it was given, as a tracer given
// the wrong parent does; its outcome hooks record what they got.
type detachedStart struct {
	mu  sync.Mutex
	bad []string
}

type callerKey struct{}

func (d *detachedStart) OnStart(_ context.Context, e *inbox.Event) context.Context {
	return context.WithValue(context.Background(), startKey{}, e.Message.ID)
}

func (d *detachedStart) OnProcessed(ctx context.Context, e *inbox.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ctx.Value(startKey{}) != e.Message.ID {
		d.bad = append(d.bad, fmt.Sprintf("OnProcessed of %q got the context of %v", e.Message.ID, ctx.Value(startKey{})))
	}
}

// A StartHook whose context does not derive from the caller's cannot
// take the caller's deadline and cancellation from the handler (it would
// outlive the consumer's shutdown): the handler sees the caller's
// deadline and values and the hook's values, and a WARN says so once.
func testStartHookDetached[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	logs := &logtest.Buffer{}
	hook := &detachedStart{}
	ib := newInbox(t, env, inbox.Config{Consumer: "storetest-detached", Logger: logs.Logger(), Hooks: []inbox.Hook{hook}})
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callerKey{}, "caller"), time.Hour)
	defer cancel()
	want, _ := ctx.Deadline()
	for _, id := range []string{"sd-1", "sd-2"} {
		out, err := ib.Process(ctx, msg(id), func(hctx context.Context, tx TTx, m *inbox.Message) error {
			dl, ok := hctx.Deadline()
			switch {
			case !ok || !dl.Equal(want) || hctx.Done() == nil:
				return inbox.Permanent(fmt.Errorf("the handler's context has deadline %v (%v), want the caller's %v", dl, ok, want))
			case hctx.Value(startKey{}) != m.ID || hctx.Value(callerKey{}) != "caller":
				return inbox.Permanent(fmt.Errorf("the handler's context carries %v and %v, want the hook's %q and the caller's %q",
					hctx.Value(startKey{}), hctx.Value(callerKey{}), m.ID, "caller"))
			}
			return env.Write(hctx, tx, key(m.ID))
		})
		wantStatus(t, fmt.Sprintf("Process %s (%v)", id, err), out, inbox.Processed)
	}
	// Cancelled while the handler runs: it must see the cancellation
	// through the hook's context.
	cctx, cancelNow := context.WithCancel(ctx)
	defer cancelNow()
	out, err := ib.Process(cctx, msg("sd-3"), func(hctx context.Context, tx TTx, m *inbox.Message) error {
		cancelNow()
		select {
		case <-hctx.Done():
			return hctx.Err()
		case <-time.After(5 * time.Second):
			return inbox.Permanent(errors.New("the handler's context was not cancelled with the caller's"))
		}
	})
	if out.Status != inbox.Retry || !errors.Is(errors.Join(err, out.Err), context.Canceled) {
		t.Fatalf("Process cancelled in the handler: %v (%v, %v), want a retry with context.Canceled", out.Status, out.Err, err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.bad) > 0 {
		t.Fatalf("outcome hooks got the wrong context: %v", hook.bad)
	}
	if n := len(logs.Lines("level=WARN", "does not derive from the one it was given")); n != 1 {
		t.Fatalf("%d WARN lines about the StartHook's context, want 1; log:\n%s", n, logs)
	}
}
