package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/store"
)

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

// A message without a valid ID is dead-lettered once with its payload;
// its redeliveries are duplicates, acked, with no new dead letter. The
// error is nil: the outcome is acked.
func testInvalidOnce[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	noID := inbox.Message{Type: "t", Payload: []byte("no ID"), Headers: map[string]string{"h": "1"}}
	other := noID
	other.Payload = []byte("another message without ID")
	for i, tc := range []struct {
		m    inbox.Message
		want inbox.Status
	}{{noID, inbox.DeadLettered}, {noID, inbox.Duplicate}, {noID, inbox.Duplicate}, {other, inbox.DeadLettered}} {
		out, err := ib.Process(ctx, tc.m, writer(env))
		if out.Status != tc.want || err != nil || !errors.Is(out.Err, inbox.ErrInvalidMessage) {
			t.Fatalf("delivery %d: %v %v (Outcome.Err %v), want %v, a nil error and ErrInvalidMessage in Outcome.Err",
				i+1, out.Status, err, out.Err, tc.want)
		}
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 2 || string(dls[0].Message.Payload) != "no ID" || dls[0].Message.ID != "" {
		t.Fatalf("dead letters %+v %v, want one per distinct invalid message, with its payload and empty ID", dls, err)
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

// New refuses tables that are not migrated.
func testSchemaChecked[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"}); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("New on tables not migrated: %v, want ErrNotMigrated", err)
	}
	if v, err := env.Driver.SchemaVersion(ctx); v != 0 || err != nil {
		t.Fatalf("SchemaVersion before Migrate: %d %v, want 0", v, err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ms := env.Driver.Migrations()
	if v, err := env.Driver.SchemaVersion(ctx); v != ms[len(ms)-1].Version || err != nil {
		t.Fatalf("SchemaVersion after Migrate: %d %v, want %d", v, err, ms[len(ms)-1].Version)
	}
	if _, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"}); err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}
	if env.Exec == nil || len(ms) < 2 {
		return
	}
	// Tables one migration behind the code, as after a deploy that did not
	// migrate.
	last := ms[len(ms)-1].Version
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, tx, fmt.Sprintf("DELETE FROM %s WHERE version = %d", env.Tables.Name("inbox_migrations", quoteFor(env.Driver)), last)); err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	_, err = inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "c"})
	if !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), fmt.Sprintf("needs %d", last)) {
		t.Fatalf("New on tables one version behind: %v, want ErrNotMigrated naming version %d", err, last)
	}
}

// quoteFor returns the identifier quoting of d's dialect.
func quoteFor[TTx any](d store.Driver[TTx]) func(string) string {
	if d.Dialect() == "mysql" {
		return store.QuoteBacktick
	}
	return store.QuoteDouble
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
	started, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := ib.Process(ctx, msg("held"), func(ctx context.Context, tx TTx, m *inbox.Message) error {
			close(started)
			<-release
			return env.Write(ctx, tx, key(m.ID))
		})
		held <- err
	}()
	<-started
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		out, err := ib.Process(ctx, msg("held"), writer(env))
		if out.Status != inbox.Retry || out.Delay != want {
			close(release)
			t.Fatalf("claim %d behind a held one: %v after %v (%v), want Retry after %v", i+1, out.Status, out.Delay, err, want)
		}
	}
	close(release)
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
