package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

func testAttemptsAndDeadLetter[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	cfg := inbox.Config{MaxAttempts: 3}
	m := msg("poison")
	failing := func(i int) inbox.Handler[TTx] {
		return func(ctx context.Context, tx TTx, m *inbox.Message) error {
			if err := env.Write(ctx, tx, key(m.ID)); err != nil {
				return err
			}
			return fmt.Errorf("boom %d", i)
		}
	}
	for i := 1; i <= 3; i++ {
		ib := newInbox(t, env, cfg) // a new Inbox each time: a restarted process
		out, _ := ib.Process(ctx, m, failing(i))
		want := inbox.Retry
		if i == 3 {
			want = inbox.DeadLettered
		}
		wantStatus(t, fmt.Sprintf("attempt %d", i), out, want)
		if out.Attempts != i {
			t.Fatalf("attempt %d: outcome counts %d attempts", i, out.Attempts)
		}
	}
	ib := newInbox(t, env, cfg)
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Message.ID != m.ID || string(dl.Message.Payload) != string(m.Payload) || dl.Message.Type != m.Type ||
		dl.Message.Headers["bin"] != "\x00\xff" || dl.Message.Headers["trace"] != "t-1" ||
		dl.Attempts != 3 || !strings.Contains(dl.Error, "boom 3") || dl.FailedAt.IsZero() {
		t.Fatalf("dead letter %+v does not keep the message, 3 attempts and the last error", dl)
	}
	out, err := ib.Process(ctx, m, writer(env))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "delivery after dead letter", out, inbox.Duplicate)
	if n := count(t, env, m.ID); n != 0 {
		t.Fatalf("%d effects before replay, want 0", n)
	}
	// A failing replay changes nothing.
	if out, err := ib.Replay(ctx, dl.ID, failing(4)); err == nil || out.Status != inbox.Retry {
		t.Fatalf("failing replay: %v %v, want an error", out, err)
	}
	if dls, _ := ib.DeadLetters(ctx, nil); len(dls) != 1 {
		t.Fatalf("%d dead letters after a failed replay, want 1", len(dls))
	}
	out, err = ib.Replay(ctx, dl.ID, writer(env))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "replay", out, inbox.Processed)
	if n := count(t, env, m.ID); n != 1 {
		t.Fatalf("%d effects after replay, want 1", n)
	}
	if dls, _ := ib.DeadLetters(ctx, nil); len(dls) != 0 {
		t.Fatalf("%d dead letters after replay, want 0", len(dls))
	}
	if _, err := ib.Replay(ctx, dl.ID, writer(env)); !errors.Is(err, inbox.ErrDeadLetterNotFound) {
		t.Fatalf("second replay: %v, want ErrDeadLetterNotFound", err)
	}
	out, _ = ib.Process(ctx, m, writer(env))
	wantStatus(t, "delivery after replay", out, inbox.Duplicate)
	if n := count(t, env, m.ID); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// After a replay the attempts are forgotten: a new consumer-scoped
	// failure of another message starts at 1 (and the replayed one is done).
	other := newInbox(t, env, inbox.Config{Consumer: "other", MaxAttempts: 3})
	out, _ = other.Process(ctx, m, failing(1))
	if out.Status != inbox.Retry || out.Attempts != 1 {
		t.Fatalf("another consumer's first failure: %+v, want Retry with 1 attempt", out)
	}
}

// A handler failing with an error it marked retryable is retried past
// MaxAttempts without a counted attempt, never dead-lettered, and acked
// once it succeeds.
func testRetryableHandlerError[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2})
	deadlock := store.Retryable(errors.New("deadlock detected"))
	for i := 1; i <= 4; i++ {
		out, err := ib.Process(ctx, msg("contended"), func(context.Context, TTx, *inbox.Message) error { return deadlock })
		if out.Status != inbox.Retry || out.Attempts != 0 || !inbox.IsRetryable(err) {
			t.Fatalf("attempt %d: %+v %v, want Retry without a counted attempt", i, out, err)
		}
	}
	if out, err := ib.Process(ctx, msg("contended"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("after the contention: %v %v", out.Status, err)
	}
}

func testHandlerPanic[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	out, err := ib.Process(ctx, msg("panic"), func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		panic("handler bug")
	})
	var pe *inbox.PanicError
	if !errors.As(err, &pe) || out.Status != inbox.Retry || out.Attempts != 1 {
		t.Fatalf("panicking handler: %v %v, want Retry with a *PanicError", out.Status, err)
	}
	if n := count(t, env, "panic"); n != 0 {
		t.Fatalf("%d effects after a panic, want 0", n)
	}
	if out, err := ib.Process(ctx, msg("panic"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("after panic: %v %v", out.Status, err)
	}
}

func testRetryAfterAndCanceled[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	out, _ := ib.Process(context.Background(), msg("ra"), func(context.Context, TTx, *inbox.Message) error {
		return inbox.RetryAfter(42*time.Millisecond, errors.New("rate limited"))
	})
	if out.Status != inbox.Retry || out.Delay != 42*time.Millisecond || out.Attempts != 1 {
		t.Fatalf("RetryAfter: %+v, want Retry after 42ms", out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, err := ib.Process(ctx, msg("cancel"), func(ctx context.Context, tx TTx, m *inbox.Message) error {
		cancel()
		return ctx.Err()
	})
	if out.Status != inbox.Retry || out.Attempts != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled handler: %+v %v, want Retry without a counted attempt", out, err)
	}
	out, err = ib.Process(context.Background(), msg("cancel"), writer(env))
	if err != nil || out.Status != inbox.Processed {
		t.Fatalf("after cancel: %v %v", out.Status, err)
	}
	// A shutdown while the handler finishes: database/sql rolls the
	// transaction back when its context ends, so COMMIT finds it over.
	// That is not the handler ending it (ErrTxEndedByHandler), and it
	// does not count.
	ctx, cancel = context.WithCancel(context.Background())
	out, err = ib.Process(ctx, msg("shutdown"), func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	if out.Status != inbox.Retry || out.Attempts != 0 || errors.Is(err, inbox.ErrTxEndedByHandler) {
		t.Fatalf("shutdown before COMMIT: %+v %v, want Retry without a counted attempt, not blamed on the handler", out, err)
	}
}

// noJitter spaces retries exactly: 1 s, 2 s, 4 s...
var noJitter = inbox.Backoff{Initial: time.Second, Max: time.Hour, Jitter: -1}

// Transient failures (a deadlock in the handler's own queries, as the
// database reports it) do not count towards MaxAttempts; their retries
// back off on their own count, and MaxTransientFailures ends them.
func testTransientFailures[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.Transient == nil {
		t.Skip("the harness cannot make the database fail transiently (Env.Transient)")
	}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 3, MaxTransientFailures: 5, Backoff: noJitter})
	transient := func(ctx context.Context, tx TTx, _ *inbox.Message) error { return env.Transient(ctx, tx) }
	ordinary := func(context.Context, TTx, *inbox.Message) error { return errors.New("ordinary failure") }
	steps := []struct {
		h        inbox.Handler[TTx]
		status   inbox.Status
		attempts int
		delay    time.Duration
	}{
		{transient, inbox.Retry, 0, time.Second},
		{transient, inbox.Retry, 0, 2 * time.Second},
		{transient, inbox.Retry, 0, 4 * time.Second},
		{ordinary, inbox.Retry, 1, time.Second}, // the first failure that counts, not the fourth
		{transient, inbox.Retry, 1, 8 * time.Second},
		{transient, inbox.DeadLettered, 1, 0}, // the fifth transient failure
	}
	for i, s := range steps {
		out, err := ib.Process(ctx, msg("deadlocked"), s.h)
		if out.Status != s.status || out.Attempts != s.attempts || out.Delay != s.delay {
			t.Fatalf("step %d: %v after %d attempts, delay %v (%v); want %v after %d, delay %v",
				i+1, out.Status, out.Attempts, out.Delay, err, s.status, s.attempts, s.delay)
		}
		if transientStep := i != 3 && s.status == inbox.Retry; transientStep != inbox.IsRetryable(err) {
			t.Fatalf("step %d: IsRetryable(%v) = %v, want %v", i+1, err, !transientStep, transientStep)
		}
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || !strings.Contains(dls[0].Error, "5 transient failures") {
		t.Fatalf("dead letters %+v %v, want one that names the 5 transient failures", dls, err)
	}
}

// A handler's own timeout (an HTTP call's deadline) is an ordinary
// failure: it counts, and the message is dead-lettered at MaxAttempts.
func testHandlerTimeoutCounts[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2})
	timesOut := func(ctx context.Context, _ TTx, _ *inbox.Message) error {
		ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		<-ctx.Done()
		return fmt.Errorf("payment API: %w", ctx.Err())
	}
	for i, want := range []inbox.Status{inbox.Retry, inbox.DeadLettered} {
		out, err := ib.Process(context.Background(), msg("slow-api"), timesOut)
		if out.Status != want || out.Attempts != i+1 {
			t.Fatalf("delivery %d: %v after %d attempts (%v), want %v after %d", i+1, out.Status, out.Attempts, err, want, i+1)
		}
	}
}
