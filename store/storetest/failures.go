package storetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
)

// A handler that leaves a result set open makes pgx refuse the COMMIT
// ("conn busy"): a COMMIT that certainly did not happen is the handler's
// failure, and counts. (database/sql closes the rows before COMMIT.)
func testLeftRowsOpen[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	if env.LeaveRowsOpen == nil {
		t.Skip("the harness cannot leave a result set open (Env.LeaveRowsOpen)")
	}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2})
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		return env.LeaveRowsOpen(ctx, tx)
	}
	var out inbox.Outcome
	var err error
	for i := 0; i < 2 && !out.Ack(); i++ {
		out, err = ib.Process(context.Background(), msg("rows-open"), hd)
	}
	if !out.Ack() {
		t.Fatalf("after MaxAttempts deliveries: %v (%v), want Processed or DeadLettered", out.Status, err)
	}
	if want := map[inbox.Status]int{inbox.Processed: 1, inbox.DeadLettered: 0}[out.Status]; count(t, env, "rows-open") != want {
		t.Fatalf("%v with %d effects, want %d", out.Status, count(t, env, "rows-open"), want)
	}
	// ProcessTx: Processed only if the caller's COMMIT then succeeds. On
	// pgx the caller's connection cannot run a statement: ProcessTx ends
	// the transaction and counts the failure in one of its own.
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, msg("rows-open-tx"), hd)
		if out.Status == inbox.Processed {
			if err := env.Driver.Commit(ctx, tx); err != nil {
				_ = env.Driver.Rollback(ctx, tx) // releases the connection
				t.Fatalf("ProcessTx said Processed, then the caller's COMMIT failed: %v", err)
			}
			return
		}
		_ = env.Driver.Rollback(ctx, tx)
		want := []inbox.Status{inbox.Retry, inbox.DeadLettered}[i-1]
		if out.Status != want || out.Attempts != i || out.Commit() {
			t.Fatalf("ProcessTx, delivery %d: %v after %d attempts, commit=%v (%v); want Processed, or %v after %d with nothing to commit",
				i, out.Status, out.Attempts, out.Commit(), err, want, i)
		}
	}
	if n := count(t, env, "rows-open-tx"); n != 0 {
		t.Fatalf("ProcessTx: dead-lettered with %d effects, want 0", n)
	}
}

// A handler that commits or rolls back the inbox's transaction itself
// makes Process's COMMIT fail: Retry, counted as a handler failure, with
// an error that says what the handler did (not "tx is closed"). Its
// redelivery is a Duplicate when the handler committed, processed when it
// rolled back.
func testHandlerEndsTx[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		id      string
		end     func(context.Context, TTx) error
		effects int
		again   inbox.Status
	}{
		{"ends-commit", env.Driver.Commit, 1, inbox.Duplicate},
		{"ends-rollback", env.Driver.Rollback, 0, inbox.Processed},
	} {
		ends := func(ctx context.Context, tx TTx, m *inbox.Message) error {
			if err := env.Write(ctx, tx, key(m.ID)); err != nil {
				return err
			}
			return tc.end(ctx, tx)
		}
		out, err := ib.Process(ctx, msg(tc.id), ends)
		if out.Status != inbox.Retry || out.Attempts != 1 || !errors.Is(err, inbox.ErrTxEndedByHandler) || !errors.Is(out.Err, inbox.ErrTxEndedByHandler) {
			t.Fatalf("%s: %v after %d attempts (%v), want Retry after 1 with an error wrapping inbox.ErrTxEndedByHandler", tc.id, out.Status, out.Attempts, err)
		}
		if n := count(t, env, tc.id); n != tc.effects {
			t.Fatalf("%s: %d effects after the handler ended the transaction, want %d", tc.id, n, tc.effects)
		}
		out, err = ib.Process(ctx, msg(tc.id), func(ctx context.Context, tx TTx, m *inbox.Message) error {
			return env.Write(ctx, tx, key(m.ID))
		})
		if out.Status != tc.again || count(t, env, tc.id) != 1 {
			t.Fatalf("%s: redelivery %v (%v) with %d effects, want %v with 1", tc.id, out.Status, err, count(t, env, tc.id), tc.again)
		}
	}
}

// A database error that no retry fixes (the inbox's table dropped) is
// marked ErrUnrecoverable (brokertest checks that it stops Consume).
func testUnrecoverable[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	ib := newInbox(t, env, inbox.Config{})
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, tx, "DROP TABLE "+env.Tables.Name("inbox", quoteFor(env.Driver))); err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	out, err := ib.Process(ctx, msg("no-table"), writer(env))
	if out.Status != inbox.Retry || !errors.Is(err, inbox.ErrUnrecoverable) {
		t.Fatalf("Process without the inbox table: %v %v, want Retry with ErrUnrecoverable", out.Status, err)
	}
	// A batch says so too, also when only an invalid message's dead letter
	// met the missing table: Consume stops on the batch's error.
	for _, batch := range [][]inbox.Message{{msg("no-table")}, {{Payload: []byte("no id")}}} {
		outs, err := ib.ProcessBatch(ctx, batch, writer(env))
		if outs[0].Status != inbox.Retry || !errors.Is(err, inbox.ErrUnrecoverable) {
			t.Fatalf("ProcessBatch(%q) without the inbox table: %v %v, want Retry with ErrUnrecoverable", batch[0].ID, outs[0].Status, err)
		}
	}
}

// While the inbox's own statements keep failing (here: claims timing out
// behind a held one), the delays grow with the consecutive failures, one
// WARN line says so, and the first success resets them with an INFO line.
func testDatabaseErrorsBackOff[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	logs := &logtest.Buffer{}
	ib := newInbox(t, env, inbox.Config{LockTimeout: 100 * time.Millisecond, Backoff: noJitter,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	release, held := holdClaim(t, env, ib, "held")
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		out, err := ib.Process(ctx, msg("held"), writer(env))
		if out.Status != inbox.Retry || out.Delay != want {
			t.Fatalf("claim %d behind a held one: %v after %v (%v), want Retry after %v", i+1, out.Status, out.Delay, err, want)
		}
	}
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if out, err := ib.Process(ctx, msg("next"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("after the holder committed: %v %v", out.Status, err)
	}
	warn := strings.Count(logs.String(), "level=WARN msg=\"inbox: database error")
	info := strings.Count(logs.String(), "level=INFO msg=\"inbox: the database answers again\"")
	if warn != 1 || info != 1 || !strings.Contains(logs.String(), "failures=3") {
		t.Fatalf("want one WARN line for the 3 failures and one INFO line when they ended; the log:\n%s", logs)
	}
}
