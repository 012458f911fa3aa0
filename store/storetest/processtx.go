package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

func testProcessTx[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	const lockTimeout = 3 * time.Second
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, LockTimeout: lockTimeout})
	// Failures are recorded in the caller's transaction, which must then
	// be committed.
	const failureCommits = true
	run := func(what string, m inbox.Message, hd inbox.Handler[TTx], want inbox.Status, wantCommit bool) inbox.Outcome {
		t.Helper()
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The caller's own write before ProcessTx.
		if err := env.Write(ctx, tx, key("caller-"+m.ID)); err != nil {
			t.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, m, hd)
		if (err != nil) != (out.Status == inbox.Retry) {
			_ = env.Driver.Rollback(ctx, tx)
			t.Fatalf("%s: %v with error %v: want an error exactly with Retry", what, out.Status, err)
		}
		if out.Status != want || out.Commit() != wantCommit {
			_ = env.Driver.Rollback(ctx, tx)
			t.Fatalf("%s: %v commit=%v, want %v commit=%v", what, out.Status, out.Commit(), want, wantCommit)
		}
		// The claim's lock timeout holds for the rest of tx, also after a
		// rollback to the savepoint (a failed handler).
		if env.LockTimeout != nil && m.ID != "" && out.Status != inbox.DeadLettered {
			if lt, err := env.LockTimeout(ctx, tx); err != nil || lt != lockTimeout {
				_ = env.Driver.Rollback(ctx, tx)
				t.Fatalf("%s: lock timeout %v (%v) in the caller's transaction after ProcessTx, want %v", what, lt, err, lockTimeout)
			}
		}
		if out.Commit() {
			err = env.Driver.Commit(ctx, tx)
		} else {
			err = env.Driver.Rollback(ctx, tx)
		}
		if err != nil {
			t.Fatalf("%s: ending the caller's transaction: %v", what, err)
		}
		return out
	}
	run("new", msg("tx-1"), writer(env), inbox.Processed, true)
	run("again", msg("tx-1"), writer(env), inbox.Duplicate, false)
	if n, c := count(t, env, "tx-1"), count(t, env, "caller-tx-1"); n != 1 || c != 1 {
		t.Fatalf("%d effects and %d caller writes, want 1 and 1", n, c)
	}
	failing := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		return errors.New("nope")
	}
	if out := run("failing", msg("tx-2"), failing, inbox.Retry, failureCommits); out.Attempts != 1 {
		t.Fatalf("failing: %d attempts, want 1", out.Attempts)
	}
	if n := count(t, env, "tx-2"); n != 0 {
		t.Fatalf("%d effects of a failed handler, want 0", n)
	}
	run("failing at MaxAttempts", msg("tx-2"), failing, inbox.DeadLettered, failureCommits)
	run("after dead letter", msg("tx-2"), writer(env), inbox.Duplicate, false)
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != "tx-2" || dls[0].Attempts != 2 {
		t.Fatalf("dead letters %+v %v, want tx-2 after 2 attempts", dls, err)
	}
	run("invalid", msg(""), writer(env), inbox.DeadLettered, failureCommits)
	run("invalid again", msg(""), writer(env), inbox.Duplicate, false)
	if dls, _ := ib.DeadLetters(ctx, nil); len(dls) != 2 {
		t.Fatalf("%d dead letters after an invalid message and its redelivery, want 2", len(dls))
	}
}

// A handler that swallows a failed statement leaves the caller's
// transaction aborted on PostgreSQL: ProcessTx must not call that
// Processed, or the caller's COMMIT rolls the claim back unnoticed. The
// invariant on every store: Processed means the claim commits.
func testProcessTxSwallowedError[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2})
	swallows := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		_ = env.Exec(ctx, tx, "SELECT * FROM inbox_storetest_no_such_table") // the handler's bug
		return nil
	}
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ib.ProcessTx(ctx, tx, msg("swallowed"), swallows)
	if out.Commit() {
		err = errors.Join(err, env.Driver.Commit(ctx, tx))
	} else {
		_ = env.Driver.Rollback(ctx, tx)
	}
	switch out.Status {
	case inbox.Processed: // the database did not abort the transaction (SQLite, MySQL)
		if err != nil {
			t.Fatalf("Processed, then the caller's COMMIT failed: %v", err)
		}
		if again, _ := ib.Process(ctx, msg("swallowed"), writer(env)); again.Status != inbox.Duplicate {
			t.Fatalf("Processed and committed, yet the redelivery is %v, want Duplicate", again.Status)
		}
	case inbox.Retry:
		if out.Attempts != 1 || !out.Commit() {
			t.Fatalf("Retry with %d attempts, commit %v; want the failure counted in the caller's transaction", out.Attempts, out.Commit())
		}
		if n := count(t, env, "swallowed"); n != 0 {
			t.Fatalf("%d effects of the aborted transaction, want 0", n)
		}
	default:
		t.Fatalf("ProcessTx: %v %v, want Processed or Retry", out.Status, err)
	}
}

// ProcessTx records a failure without a second connection: with every
// other connection of the pool taken, it neither hangs nor loses the
// count.
func testProcessTxPoolExhausted[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	if env.MaxConns == 0 {
		t.Skip("the pool is unbounded, or one transaction at a time writes (Env.MaxConns 0)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ib := newInbox(t, env, inbox.Config{})
	var held []TTx
	defer func() {
		for _, tx := range held {
			_ = env.Driver.Rollback(context.Background(), tx)
		}
	}()
	for range env.MaxConns {
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tx)
	}
	tx := held[len(held)-1] // the caller's, on the pool's last connection
	out, err := ib.ProcessTx(ctx, tx, msg("pool-full"), func(context.Context, TTx, *inbox.Message) error { return errors.New("nope") })
	if out.Status != inbox.Retry || out.Attempts != 1 || !out.Commit() {
		t.Fatalf("failing handler with the pool taken: %v after %d attempts, commit %v (%v); want Retry with 1 attempt to commit",
			out.Status, out.Attempts, out.Commit(), err)
	}
	held = held[:len(held)-1]
	if err := env.Driver.Commit(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	cancel()
	out, _ = ib.Process(context.Background(), msg("pool-full"), func(context.Context, TTx, *inbox.Message) error { return errors.New("nope") })
	if out.Attempts != 2 {
		t.Fatalf("next failure: %d attempts, want 2 (the first was committed)", out.Attempts)
	}
}
