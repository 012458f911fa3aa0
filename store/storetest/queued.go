package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// openQueued opens an environment whose store runs queued statements, or
// skips, after checking that ProcessQueued refuses a store that does not.
func openQueued[TTx any](t *testing.T, h Harness[TTx]) (*Env[TTx], *inbox.Inbox[TTx]) {
	t.Helper()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if _, ok := any(env.Driver).(store.QueuedClaimer); !ok {
		out, err := ib.ProcessQueued(context.Background(), msg("q"), func(context.Context, *inbox.Queue, *inbox.Message) error { return nil })
		if out.Status != inbox.Retry || !errors.Is(err, inbox.ErrNoQueued) {
			t.Fatalf("ProcessQueued on %T: %v %v, want Retry and ErrNoQueued", env.Driver, out.Status, err)
		}
		t.Skipf("%T does not run queued statements (ErrNoQueued, checked)", env.Driver)
	}
	if env.QueueWrite == nil {
		t.Fatal("the store runs queued statements, but the harness has no Env.QueueWrite")
	}
	return env, ib
}

func queuedWriter[TTx any](env *Env[TTx]) inbox.QueuedHandler {
	return func(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
		env.QueueWrite(q, key(m.ID))
		return nil
	}
}

// ProcessQueued: processed once, then duplicates (a changed payload is a
// fingerprint conflict), hooks told.
func testQueuedThenDuplicate[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openQueued(t, h)
	ctx := context.Background()
	counts := &inbox.Counts{}
	ib = newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{counts}})
	m := msg("q-1")
	for i, want := range []inbox.Status{inbox.Processed, inbox.Duplicate} {
		if out, err := ib.ProcessQueued(ctx, m, queuedWriter(env)); out.Status != want || err != nil {
			t.Fatalf("delivery %d: %v %v, want %v", i+1, out.Status, err, want)
		}
	}
	changed := m
	changed.Payload = []byte("other")
	out, err := ib.ProcessQueued(ctx, changed, queuedWriter(env))
	if out.Status != inbox.Duplicate || !errors.Is(out.Err, inbox.ErrFingerprintConflict) || err != nil {
		t.Fatalf("changed payload: %+v %v, want a duplicate with ErrFingerprintConflict", out, err)
	}
	if n := count(t, env, "q-1"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if got := counts.String(); got != "processed 1, duplicates 2, retries 0, dead-lettered 0, fingerprint conflicts 1" {
		t.Fatalf("hooks: %s", got)
	}
}

// A failing statement applies nothing (not the claim either) and counts an
// attempt; so does a handler error; at MaxAttempts the message is
// dead-lettered with its payload; a later good delivery of another message
// is unaffected.
func testQueuedFailures[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openQueued(t, h)
	ctx := context.Background()
	bad := func(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
		env.QueueWrite(q, key(m.ID))
		q.Add("SELECT 1/0") // fails after the write
		return nil
	}
	out, err := ib.ProcessQueued(ctx, msg("q-bad"), bad)
	var se *store.StatementError
	if out.Status != inbox.Retry || out.Attempts != 1 || !errors.As(err, &se) || se.Index != 1 {
		t.Fatalf("failing statement: %+v %v, want Retry after 1 attempt with a *store.StatementError at 1", out, err)
	}
	if n := count(t, env, "q-bad"); n != 0 {
		t.Fatalf("the write before the failing statement applied (%d)", n)
	}
	out, err = ib.ProcessQueued(ctx, msg("q-bad"), func(context.Context, *inbox.Queue, *inbox.Message) error {
		return errors.New("handler says no")
	})
	if out.Status != inbox.DeadLettered || out.Attempts != 2 || err != nil {
		t.Fatalf("second failure: %+v %v, want DeadLettered at 2 attempts", out, err)
	}
	if out, _ := ib.ProcessQueued(ctx, msg("q-bad"), queuedWriter(env)); out.Status != inbox.Duplicate {
		t.Fatalf("after its dead letter: %v, want Duplicate", out.Status)
	}
	dls, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{Limit: 10})
	if err != nil || len(dls) != 1 || string(dls[0].Message.Payload) != "payload of q-bad" {
		t.Fatalf("dead letters %v %v, want q-bad's with its payload", dls, err)
	}
	if out, err := ib.ProcessQueued(ctx, msg("q-good"), queuedWriter(env)); out.Status != inbox.Processed || err != nil {
		t.Fatalf("next message: %v %v", out.Status, err)
	}
	if out, err := ib.ProcessQueued(ctx, inbox.Message{}, queuedWriter(env)); out.Status != inbox.DeadLettered || err != nil {
		t.Fatalf("invalid message: %v %v, want DeadLettered", out.Status, err)
	}
}

// A delivery racing a claim held in an open transaction waits for it: a
// duplicate when the holder commits, processed when it rolls back.
func testQueuedRace[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openQueued(t, h)
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		id := map[bool]string{true: "race-commit", false: "race-abort"}[commit]
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := ib.ProcessTx(ctx, tx, msg(id), writer(env)); out.Status != inbox.Processed {
			t.Fatalf("holder: %v %v", out.Status, err)
		}
		var wg sync.WaitGroup
		var out inbox.Outcome
		var qerr error
		wg.Go(func() { out, qerr = ib.ProcessQueued(ctx, msg(id), queuedWriter(env)) })
		waitForLockWaits(t, env, 1)
		if commit {
			err = env.Driver.Commit(ctx, tx)
		} else {
			err = env.Driver.Rollback(ctx, tx)
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		want := map[bool]inbox.Status{true: inbox.Duplicate, false: inbox.Processed}[commit]
		if out.Status != want || qerr != nil {
			t.Fatalf("holder commits=%v: queued delivery %v %v, want %v", commit, out.Status, qerr, want)
		}
		if n := count(t, env, id); n != 1 {
			t.Fatalf("holder commits=%v: %d effects, want 1", commit, n)
		}
	}
}

// A queued statement that the database refuses to prepare (a syntax
// error, an unknown column) is the handler's failure, counted up to its
// dead letter: not an error of the inbox's own statements, and never one
// that stops the consumer (ErrUnrecoverable).
func testQueuedBadStatement[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openQueued(t, h)
	ctx := context.Background()
	for _, sql := range []string{"INSERT INTO inbox_storetest_no_such_table VALUES ($1", "SELECT no_such_column FROM (SELECT 1) AS t"} {
		bad := func(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
			env.QueueWrite(q, key(m.ID))
			q.Add(sql)
			return nil
		}
		for i, want := range []inbox.Status{inbox.Retry, inbox.DeadLettered} {
			out, err := ib.ProcessQueued(ctx, msg(sql), bad)
			var se *store.StatementError
			if out.Status != want || out.Attempts != i+1 || errors.Is(err, inbox.ErrUnrecoverable) || want == inbox.Retry && !errors.As(err, &se) {
				t.Fatalf("%q, delivery %d: %+v %v, want %v after %d attempts, a *store.StatementError", sql, i+1, out, err, want, i+1)
			}
		}
		if n := count(t, env, sql); n != 0 {
			t.Fatalf("%q: %d effects, want 0", sql, n)
		}
	}
}
