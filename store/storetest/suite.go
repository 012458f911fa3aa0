package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/store"
)

// Run runs the conformance suite against the store that h opens.
func Run[TTx any](t *testing.T, h Harness[TTx]) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness[TTx])
	}{
		{"ClaimThenDuplicate", testClaimThenDuplicate[TTx]},
		{"HandlerErrorRollsBack", testHandlerErrorRollsBack[TTx]},
		{"RaceFirstCommits", func(t *testing.T, h Harness[TTx]) { testRace(t, h, true) }},
		{"RaceFirstAborts", func(t *testing.T, h Harness[TTx]) { testRace(t, h, false) }},
		{"AttemptsSurviveRestartAndDeadLetter", testAttemptsAndDeadLetter[TTx]},
		{"PermanentAndDiscard", testPermanentAndDiscard[TTx]},
		{"IDs", testIDs[TTx]},
		{"LockTimeoutIsRetryable", testLockTimeout[TTx]},
		{"PruneBoundary", testPruneBoundary[TTx]},
		{"PruneBatches", testPruneBatches[TTx]},
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"HostileTableNames", testHostileTables[TTx]},
		{"Prefix", testPrefix[TTx]},
		{"FingerprintConflict", testFingerprintConflict[TTx]},
		{"ProcessTx", testProcessTx[TTx]},
		{"HandlerPanic", testHandlerPanic[TTx]},
		{"RetryAfterAndCanceled", testRetryAfterAndCanceled[TTx]},
		{"Durability", testDurability[TTx]},
		{"Hooks", testHooks[TTx]},
		{"ReplayAfterRedelivery", testReplayAfterRedelivery[TTx]},
		{"RetryableHandlerError", testRetryableHandlerError[TTx]},
		{"ThreeRaceHolderRollsBack", testThreeRaceHolderRollsBack[TTx]},
		{"CaseAndPadDistinct", testCaseAndPadDistinct[TTx]},
		{"TransientFailuresDoNotCount", testTransientFailures[TTx]},
		{"HandlerTimeoutCounts", testHandlerTimeoutCounts[TTx]},
		{"ConnBusyCommitCounts", testLeftRowsOpen[TTx]},
		{"InvalidMessageDeadLetteredOnce", testInvalidOnce[TTx]},
		{"ProcessTxSwallowedError", testProcessTxSwallowedError[TTx]},
		{"ProcessTxPoolExhausted", testProcessTxPoolExhausted[TTx]},
		{"SchemaChecked", testSchemaChecked[TTx]},
		{"UnrecoverableError", testUnrecoverable[TTx]},
		{"DatabaseErrorsBackOff", testDatabaseErrorsBackOff[TTx]},
		{"HookPanics", testHookPanics[TTx]},
		{"IDsScopedByType", testScopeIDByType[TTx]},
		{"IDsNotScopedByType", testIDNotScopedByType[TTx]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

func process[TTx any](t *testing.T, ib *inbox.Inbox[TTx], m inbox.Message, hd inbox.Handler[TTx]) (inbox.Outcome, error) {
	t.Helper()
	return ib.Process(context.Background(), m, hd)
}

func wantStatus(t *testing.T, what string, got inbox.Outcome, want inbox.Status) {
	t.Helper()
	if got.Status != want {
		t.Fatalf("%s: status %v, want %v (outcome %+v)", what, got.Status, want, got)
	}
}

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

// deliver processes m as a broker would: again after a Retry, until the
// delivery may be acked.
func deliver[TTx any](ctx context.Context, ib *inbox.Inbox[TTx], m inbox.Message, hd inbox.Handler[TTx]) (inbox.Outcome, error) {
	for i := 0; ; i++ {
		out, err := ib.Process(ctx, m, hd)
		if out.Ack() || i >= 200 {
			return out, err
		}
		time.Sleep(min(out.Delay, 20*time.Millisecond))
	}
}

func testRace[TTx any](t *testing.T, h Harness[TTx], firstCommits bool) {
	const n = 50
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 1000, LockTimeout: 30 * time.Second,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	var calls atomic.Int32
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // let the others pile up behind the claim
			if !firstCommits {
				return errors.New("first attempt aborts")
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[inbox.Status]int{}
	var errs []error
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, err := deliver(context.Background(), ib, msg("race"), hd)
			mu.Lock()
			defer mu.Unlock()
			statuses[out.Status]++
			if !out.Ack() {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d deliveries never settled; first error: %v", len(errs), errs[0])
	}
	if got := count(t, env, "race"); got != 1 {
		t.Fatalf("%d effects after %d racing deliveries, want exactly 1", got, n)
	}
	if statuses[inbox.Processed] != 1 || statuses[inbox.Duplicate] != n-1 {
		t.Fatalf("outcomes %v, want 1 processed and %d duplicates", statuses, n-1)
	}
	if !firstCommits && calls.Load() < 2 {
		t.Fatalf("handler ran %d times; after the first aborted another must run", calls.Load())
	}
}

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

func testPermanentAndDiscard[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	bad := errors.New("unknown account")
	out, err := ib.Process(ctx, msg("perm"), func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(bad)
	})
	if err != nil {
		t.Fatalf("dead-lettered outcome returned error %v", err)
	}
	wantStatus(t, "permanent error", out, inbox.DeadLettered)
	if out.Attempts != 1 || !errors.Is(out.Err, bad) || !out.Ack() {
		t.Fatalf("outcome %+v: want 1 attempt, the error, an ack", out)
	}
	dls, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{Limit: 10})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v %v, want 1", dls, err)
	}
	if err := ib.Discard(ctx, dls[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := ib.Discard(ctx, dls[0].ID); !errors.Is(err, inbox.ErrDeadLetterNotFound) {
		t.Fatalf("second discard: %v, want ErrDeadLetterNotFound", err)
	}
	out, _ = ib.Process(ctx, msg("perm"), writer(env))
	wantStatus(t, "delivery after discard", out, inbox.Duplicate)
	// Another consumer sees neither the dead letter nor the row.
	other := newInbox(t, env, inbox.Config{Consumer: "other"})
	if dls, _ := other.DeadLetters(ctx, nil); len(dls) != 0 {
		t.Fatalf("other consumer lists %d dead letters", len(dls))
	}
	out, _ = other.Process(ctx, msg("perm"), writer(env))
	wantStatus(t, "same ID, other consumer", out, inbox.Processed)
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

func testLockTimeout[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{LockTimeout: 300 * time.Millisecond})
	// The contender claims the held ID with Process, or with ProcessTx in
	// a transaction of the application's (the claim sets the lock timeout
	// there too); it rolls that back.
	processTx := func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			return inbox.Outcome{}, err
		}
		defer func() { _ = env.Driver.Rollback(ctx, tx) }()
		return ib.ProcessTx(ctx, tx, m, writer(env))
	}
	process := func(ctx context.Context, m inbox.Message) (inbox.Outcome, error) {
		return ib.Process(ctx, m, writer(env))
	}
	for name, contend := range map[string]func(context.Context, inbox.Message) (inbox.Outcome, error){"Process": process, "ProcessTx": processTx} {
		id := "stuck-" + name
		started, release := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			out, err := ib.Process(ctx, msg(id), func(ctx context.Context, tx TTx, m *inbox.Message) error {
				close(started)
				<-release
				return env.Write(ctx, tx, key(m.ID))
			})
			if err == nil && out.Status != inbox.Processed {
				err = fmt.Errorf("holder: %v", out.Status)
			}
			held <- err
		}()
		<-started
		begin := time.Now()
		out, err := contend(ctx, msg(id))
		waited := time.Since(begin)
		close(release)
		if out.Ack() || out.Status != inbox.Retry || !(inbox.IsRetryable(err) || env.Driver.Retryable(err)) {
			t.Fatalf("%s: racing duplicate behind a held claim: %v %v, want Retry with a retryable error", name, out.Status, err)
		}
		if waited > 4*time.Second {
			t.Fatalf("%s: waited %v for the lock, want about the lock timeout", name, waited)
		}
		if err := <-held; err != nil {
			t.Fatalf("%s: holder: %v", name, err)
		}
		out, err = contend(ctx, msg(id))
		if err != nil || out.Status != inbox.Duplicate {
			t.Fatalf("%s: redelivery: %v %v, want Duplicate", name, out.Status, err)
		}
		if n := count(t, env, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", name, n)
		}
	}
}

type pruneHook struct{ deleted atomic.Int64 }

func (p *pruneHook) OnPruned(_ context.Context, e *inbox.PruneEvent) { p.deleted.Add(int64(e.Deleted)) }

func testPruneBoundary[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	for _, id := range []string{"younger", "older", "fresh"} {
		if out, err := ib.Process(ctx, msg(id), writer(env)); err != nil || out.Status != inbox.Processed {
			t.Fatalf("%s: %v %v", id, out.Status, err)
		}
	}
	k := func(id string) store.Key { return store.Key{Consumer: []byte("storetest"), MessageID: []byte(id)} }
	if err := env.Backdate(ctx, k("younger"), time.Hour-time.Second); err != nil {
		t.Fatal(err)
	}
	if err := env.Backdate(ctx, k("older"), time.Hour+time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: 59 * time.Minute}); !errors.Is(err, inbox.ErrInvalidConfig) {
		t.Fatalf("retention under an hour: %v, want ErrInvalidConfig", err)
	}
	hook := &pruneHook{}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour, Hooks: []any{hook}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Prune(ctx)
	if err != nil || n != 1 || hook.deleted.Load() != 1 {
		t.Fatalf("prune: %d rows (hook %d), %v; want 1", n, hook.deleted.Load(), err)
	}
	for id, want := range map[string]inbox.Status{"younger": inbox.Duplicate, "older": inbox.Processed, "fresh": inbox.Duplicate} {
		out, err := ib.Process(ctx, msg(id), writer(env))
		if err != nil || out.Status != want {
			t.Fatalf("%s after prune: %v %v, want %v", id, out.Status, err, want)
		}
	}
}

func testPruneBatches[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	for i := range 7 {
		id := fmt.Sprintf("old-%d", i)
		if _, err := ib.Process(ctx, msg(id), writer(env)); err != nil {
			t.Fatal(err)
		}
		if err := env.Backdate(ctx, store.Key{Consumer: []byte("storetest"), MessageID: []byte(id)}, 2*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour, BatchSize: 2, Pause: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(ctx); err != nil || n != 7 {
		t.Fatalf("prune in batches of 2: %d, %v; want 7", n, err)
	}
	if n, err := p.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("second prune: %d, %v; want 0", n, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.Run(runCtx); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}

func testMigrateConcurrently[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- env.Driver.Migrate(ctx) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	ms := env.Driver.Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || !strings.Contains(ms[0].SQL, "inbox") {
		t.Fatalf("migrations %v: want version 1 creating the inbox", ms)
	}
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("after-migrate"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("process after migrate: %v %v", out.Status, err)
	}
}

func testHostileTables[TTx any](t *testing.T, h Harness[TTx]) {
	hostile := []string{`x"; DROP TABLE y; --`, "a'b", "a;b", "1abc", "a b", "a`b", "a-b", strings.Repeat("p", 200), "ä"}
	for _, s := range hostile {
		for _, tables := range []store.Tables{{Prefix: s}, {Schema: s}} {
			_, err := h.Open(t, tables)
			if !errors.Is(err, store.ErrInvalidTables) {
				t.Fatalf("tables %+v: %v, want ErrInvalidTables", tables, err)
			}
		}
	}
}

func testPrefix[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, err := h.Open(t, store.Tables{Prefix: "svc_"})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(env.Driver.Migrations()[0].SQL, "svc_inbox") {
		t.Fatal("migration SQL does not name the prefixed table")
	}
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("p"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("%v %v", out.Status, err)
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
	hook := &conflictHook{}
	ib := newInbox(t, env, inbox.Config{Hooks: []any{hook}})
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
}

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

// After a dead letter's inbox row is pruned, a redelivery processes the
// message; replaying the dead letter then must not run the handler again.
func testReplayAfterRedelivery[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{})
	out, _ := ib.Process(ctx, msg("late"), func(context.Context, TTx, *inbox.Message) error {
		return inbox.Permanent(errors.New("bad"))
	})
	wantStatus(t, "permanent failure", out, inbox.DeadLettered)
	if err := env.Backdate(ctx, store.Key{Consumer: []byte("storetest"), MessageID: []byte("late")}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(ctx); err != nil || n < 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	out, err = ib.Process(ctx, msg("late"), writer(env))
	if err != nil || out.Status != inbox.Processed {
		t.Fatalf("redelivery after prune: %v %v", out.Status, err)
	}
	dls, err := ib.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %v %v", dls, err)
	}
	ran := false
	out, err = ib.Replay(ctx, dls[0].ID, func(ctx context.Context, tx TTx, m *inbox.Message) error {
		ran = true
		return env.Write(ctx, tx, key(m.ID))
	})
	if err != nil || out.Status != inbox.Duplicate || ran {
		t.Fatalf("replay of a message processed since: %v %v, handler ran: %v; want Duplicate without running it", out.Status, err, ran)
	}
	if n := count(t, env, "late"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if dls, _ := ib.DeadLetters(ctx, nil); len(dls) != 0 {
		t.Fatalf("%d dead letters left, want 0", len(dls))
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
}

func testDurability[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	w, err := env.Driver.DurabilityWarnings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 0 {
		t.Fatalf("durability warnings on the test database: %v", w)
	}
}

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
	hooks := &outcomeHooks{}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 2, Hooks: []any{hooks}})
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
}

// Three deliveries of one message on three connections: the first claims
// it, and its handler fails only once the two others wait behind its claim.
// On MySQL this is the documented deadlock of three inserts of one key with
// the first rolled back; whatever the database does, exactly one effect
// must commit, and every delivery must settle to an ack.
func testThreeRaceHolderRollsBack[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 1000,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	m := msg("three")
	holding, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			close(holding)
			<-release
			return errors.New("the holder fails")
		}
		return nil
	}
	type result struct {
		out inbox.Outcome
		err error
	}
	results := make(chan result, 3)
	run := func() {
		out, err := deliver(ctx, ib, m, hd)
		results <- result{out, err}
	}
	go run()
	select {
	case <-holding:
	case r := <-results:
		t.Fatalf("the first delivery never reached its handler: %+v %v", r.out, r.err)
	}
	go run()
	go run()
	waitForLockWaits(t, env, 2)
	close(release)
	statuses := map[inbox.Status]int{}
	for range 3 {
		r := <-results
		if !r.out.Ack() {
			t.Fatalf("a delivery never settled: %+v %v", r.out, r.err)
		}
		statuses[r.out.Status]++
	}
	if n := count(t, env, m.ID); n != 1 {
		t.Fatalf("%d effects after the holder rolled back, want exactly 1", n)
	}
	if statuses[inbox.Processed] != 1 || statuses[inbox.Duplicate] != 2 {
		t.Fatalf("outcomes %v, want 1 processed and 2 duplicates", statuses)
	}
}

// waitForLockWaits waits until n transactions wait for a row lock, as the
// harness tells it, or a fixed time when it cannot tell (or does not see
// them within a few seconds: the racing claims then time out and retry,
// which the caller's deliveries survive).
func waitForLockWaits[TTx any](t *testing.T, env *Env[TTx], n int) {
	t.Helper()
	if env.LockWaits == nil {
		time.Sleep(200 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, err := env.LockWaits(context.Background())
		if err != nil {
			t.Fatalf("counting lock waits: %v", err)
		}
		if got >= n {
			return
		}
		time.Sleep(150 * time.Millisecond) // slower than MariaDB refreshes its lock tables
	}
	t.Logf("%d lock waits not seen within 5 s; releasing the holder anyway", n)
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
	ib := newInbox(t, env, inbox.Config{Logger: logs.Logger(), Hooks: []any{hook}})
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
