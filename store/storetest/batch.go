package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// openBatch opens an environment whose store claims batches, or skips,
// after checking that ProcessBatch refuses a store that does not.
func openBatch[TTx any](t *testing.T, h Harness[TTx], cfg inbox.Config) (*Env[TTx], *inbox.Inbox[TTx]) {
	t.Helper()
	env := open(t, h)
	if cfg.Backoff == (inbox.Backoff{}) {
		cfg.Backoff = inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	}
	ib := newInbox(t, env, cfg)
	if _, ok := any(env.Driver).(store.BatchClaimer[TTx]); !ok {
		outs, err := ib.ProcessBatch(context.Background(), []inbox.Message{msg("b")}, writer(env))
		if len(outs) != 1 || outs[0].Status != inbox.Retry || !errors.Is(err, inbox.ErrNoBatch) {
			t.Fatalf("ProcessBatch on %T: %v %v, want Retry and ErrNoBatch", env.Driver, outs, err)
		}
		t.Skipf("%T does not claim batches (ErrNoBatch, checked)", env.Driver)
	}
	return env, ib
}

func msgs(ids ...string) []inbox.Message {
	out := make([]inbox.Message, len(ids))
	for i, id := range ids {
		out[i] = msg(id)
	}
	return out
}

func statuses(outs []inbox.Outcome) string {
	var s []string
	for _, o := range outs {
		s = append(s, o.Status.String())
	}
	return strings.Join(s, " ")
}

// New messages are processed once, in msgs' order; an ID twice in the
// batch and an ID of an earlier batch are duplicates; an invalid message
// is dead-lettered with its payload; hooks are told each outcome.
func testBatchOutcomes[TTx any](t *testing.T, h Harness[TTx]) {
	counts := &inbox.Counts{}
	env, ib := openBatch(t, h, inbox.Config{Hooks: []inbox.Hook{counts}})
	ctx := context.Background()
	if outs, err := ib.ProcessBatch(ctx, msgs("c"), writer(env)); err != nil || statuses(outs) != "processed" {
		t.Fatalf("first batch: %s %v", statuses(outs), err)
	}
	var order []string
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		order = append(order, m.ID)
		return env.Write(ctx, tx, key(m.ID))
	}
	batch := append(msgs("z", "a", "z", "c"), inbox.Message{Payload: []byte("no id")})
	outs, err := ib.ProcessBatch(ctx, batch, hd)
	if err != nil || statuses(outs) != "processed processed duplicate duplicate dead-lettered" {
		t.Fatalf("batch: %s %v, want processed processed duplicate duplicate dead-lettered", statuses(outs), err)
	}
	if !slices.Equal(order, []string{"z", "a"}) {
		t.Fatalf("handler order %q, want the batch's (z, a)", order)
	}
	for _, id := range []string{"z", "a", "c"} {
		if n := count(t, env, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", id, n)
		}
	}
	dls, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{Limit: 10})
	if err != nil || len(dls) != 1 || string(dls[0].Message.Payload) != "no id" {
		t.Fatalf("dead letters %v %v, want the invalid message with its payload", dls, err)
	}
	if got := counts.String(); got != "processed 3, duplicates 2, retries 0, dead-lettered 1" {
		t.Fatalf("hooks: %s", got)
	}
	changed := msg("a")
	changed.Payload = []byte("other")
	outs, err = ib.ProcessBatch(ctx, []inbox.Message{changed}, hd)
	if err != nil || outs[0].Status != inbox.Duplicate || !errors.Is(outs[0].Err, inbox.ErrFingerprintConflict) {
		t.Fatalf("reused ID: %+v %v, want a duplicate with ErrFingerprintConflict", outs, err)
	}
	// The same within one batch: the second copy, with another payload,
	// is a duplicate of the first and a conflict.
	reused := msg("in-batch")
	reused.Payload = []byte("other")
	outs, err = ib.ProcessBatch(ctx, []inbox.Message{msg("in-batch"), reused}, hd)
	if err != nil || outs[0].Status != inbox.Processed || outs[1].Status != inbox.Duplicate || !errors.Is(outs[1].Err, inbox.ErrFingerprintConflict) {
		t.Fatalf("ID reused in one batch: %+v %v, want processed, then a duplicate with ErrFingerprintConflict", outs, err)
	}
}

// A failing message in the middle is undone alone: its neighbours commit,
// its attempt counts, and at MaxAttempts (or at once when Permanent) it is
// dead-lettered while the batch goes on; its redelivery after a retry is
// processed.
func testBatchFailures[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openBatch(t, h, inbox.Config{MaxAttempts: 2})
	ctx := context.Background()
	failing := map[string]error{"bad": errors.New("bad"), "poison": inbox.Permanent(errors.New("poison"))}
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		return failing[m.ID] // after the write, which must not commit
	}
	outs, err := ib.ProcessBatch(ctx, msgs("x", "bad", "poison", "y"), hd)
	if err != nil || statuses(outs) != "processed retry dead-lettered processed" {
		t.Fatalf("batch: %s %v, want processed retry dead-lettered processed", statuses(outs), err)
	}
	if outs[1].Attempts != 1 || outs[1].Err == nil || outs[1].Delay <= 0 {
		t.Fatalf("the failing message's outcome %+v, want 1 attempt, its error and a delay", outs[1])
	}
	for id, want := range map[string]int{"x": 1, "y": 1, "bad": 0, "poison": 0} {
		if n := count(t, env, id); n != want {
			t.Fatalf("%s: %d effects, want %d", id, n, want)
		}
	}
	outs, err = ib.ProcessBatch(ctx, msgs("bad", "z"), hd)
	if err != nil || statuses(outs) != "dead-lettered processed" || outs[0].Attempts != 2 {
		t.Fatalf("second batch: %s %v (%+v), want bad dead-lettered at 2 attempts", statuses(outs), err, outs[0])
	}
	delete(failing, "poison")
	outs, _ = ib.ProcessBatch(ctx, msgs("poison", "bad"), hd)
	if statuses(outs) != "duplicate duplicate" {
		t.Fatalf("after their dead letters: %s, want duplicates", statuses(outs))
	}
	// A retried message is processed when it stops failing.
	failing["flaky"] = errors.New("once")
	outs, _ = ib.ProcessBatch(ctx, msgs("flaky"), hd)
	delete(failing, "flaky")
	if outs2, err := ib.ProcessBatch(ctx, msgs("flaky"), hd); statuses(outs) != "retry" || statuses(outs2) != "processed" || err != nil {
		t.Fatalf("flaky: %s then %s %v, want retry then processed", statuses(outs), statuses(outs2), err)
	}
	if n := count(t, env, "flaky"); n != 1 {
		t.Fatalf("flaky: %d effects, want 1", n)
	}
}

// Batches larger than PostgreSQL's 64 cached subtransactions, with
// failures spread through them, still isolate each failure.
func testBatchLarge[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openBatch(t, h, inbox.Config{})
	ctx := context.Background()
	var batch []inbox.Message
	for i := range 150 {
		batch = append(batch, msg(fmt.Sprintf("l-%03d", i)))
	}
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if strings.HasSuffix(m.ID, "7") {
			return errors.New("sevens fail")
		}
		return nil
	}
	outs, err := ib.ProcessBatch(ctx, batch, hd)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		want, effects := inbox.Processed, 1
		if strings.HasSuffix(batch[i].ID, "7") {
			want, effects = inbox.Retry, 0
		}
		if o.Status != want || count(t, env, batch[i].ID) != effects {
			t.Fatalf("%s: %v with %d effects, want %v with %d", batch[i].ID, o.Status, count(t, env, batch[i].ID), want, effects)
		}
	}
}

// Two batches with the same IDs in opposite orders, racing on two
// connections, do not deadlock: each ID's effect once, every outcome
// processed or duplicate. A third transaction holds the middle ID's claim
// until both batches wait, so that their claims overlap for sure: claimed
// in the batches' own orders, they would each hold one half and wait for
// the other's.
func testBatchRace[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openBatch(t, h, inbox.Config{LockTimeout: 30 * time.Second})
	ctx := context.Background()
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("r-%02d", i))
	}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	holder, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ib.ProcessTx(ctx, holder, msg("r-20"), writer(env)); out.Status != inbox.Processed {
		t.Fatalf("holder: %v %v", out.Status, err)
	}
	var wg sync.WaitGroup
	results := make([][]inbox.Outcome, 2)
	errs := make([]error, 2)
	for g, order := range [][]string{ids, rev} {
		wg.Go(func() { results[g], errs[g] = ib.ProcessBatch(ctx, msgs(order...), writer(env)) })
	}
	waitForLockWaits(t, env, 2)
	if err := env.Driver.Rollback(ctx, holder); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for g := range 2 {
		if errs[g] != nil {
			t.Fatalf("batch %d: %v (a deadlock?)", g, errs[g])
		}
		for _, o := range results[g] {
			if o.Status != inbox.Processed && o.Status != inbox.Duplicate {
				t.Fatalf("batch %d: %s", g, statuses(results[g]))
			}
		}
	}
	for _, id := range ids {
		if n := count(t, env, id); n != 1 {
			t.Fatalf("%s has %d effects, want 1", id, n)
		}
	}
}

// ProcessBatchFunc: one call for all new messages; when it fails, one call
// per message finds the failing one.
func testBatchFunc[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openBatch(t, h, inbox.Config{})
	ctx := context.Background()
	var calls [][]string
	bh := func(ctx context.Context, tx TTx, ms []*inbox.Message) error {
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
			if err := env.Write(ctx, tx, key(m.ID)); err != nil {
				return err
			}
		}
		calls = append(calls, ids)
		if slices.Contains(ids, "f-bad") {
			return errors.New("one bad apple")
		}
		return nil
	}
	outs, err := ib.ProcessBatchFunc(ctx, msgs("f-1", "f-2"), bh)
	if err != nil || statuses(outs) != "processed processed" || len(calls) != 1 {
		t.Fatalf("good batch: %s %v in %d calls, want 2 processed in 1 call", statuses(outs), err, len(calls))
	}
	calls = nil
	outs, err = ib.ProcessBatchFunc(ctx, msgs("f-3", "f-bad", "f-1", "f-4"), bh)
	if err != nil || statuses(outs) != "processed retry duplicate processed" {
		t.Fatalf("batch with a bad one: %s %v", statuses(outs), err)
	}
	if fmt.Sprint(calls) != "[[f-3 f-bad f-4] [f-3] [f-bad] [f-4]]" {
		t.Fatalf("calls %v, want the batch, then one message at a time", calls)
	}
	for id, want := range map[string]int{"f-1": 1, "f-3": 1, "f-4": 1, "f-bad": 0} {
		if n := count(t, env, id); n != want {
			t.Fatalf("%s: %d effects, want %d", id, n, want)
		}
	}
}

// A transient failure in a batch (a deadlock of the handler's queries, an
// error marked retryable) is counted as a transient failure of its
// message alone: its neighbours commit, and at MaxTransientFailures it is
// dead-lettered instead of coming back for ever.
func testBatchTransient[TTx any](t *testing.T, h Harness[TTx]) {
	env, ib := openBatch(t, h, inbox.Config{MaxTransientFailures: 2})
	ctx := context.Background()
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if m.ID == "busy" {
			return store.Retryable(errors.New("downstream busy"))
		}
		return nil
	}
	outs, err := ib.ProcessBatch(ctx, msgs("t-1", "busy", "t-2"), hd)
	if err != nil || statuses(outs) != "processed retry processed" || !inbox.IsRetryable(outs[1].Err) || outs[1].Attempts != 0 {
		t.Fatalf("first batch: %s %v (%+v), want processed retry processed, the retry transient and uncounted", statuses(outs), err, outs[1])
	}
	outs, err = ib.ProcessBatch(ctx, msgs("busy", "t-3"), hd)
	if err != nil || statuses(outs) != "dead-lettered processed" {
		t.Fatalf("second batch: %s %v, want busy dead-lettered at MaxTransientFailures", statuses(outs), err)
	}
	for id, want := range map[string]int{"t-1": 1, "t-2": 1, "t-3": 1, "busy": 0} {
		if n := count(t, env, id); n != want {
			t.Fatalf("%s: %d effects, want %d", id, n, want)
		}
	}
}

// A store's ClaimBatch given an ID twice (next to each other, as claims
// come sorted) claims it once: the second is a duplicate of the first,
// with the first's fingerprint and type; both are duplicates of a stored
// claim in a later batch. ProcessBatch gives each ID once; another caller
// of the seam may not.
func testBatchClaimRepeatedID[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env, _ := openBatch(t, h, inbox.Config{})
	bc := any(env.Driver).(store.BatchClaimer[TTx])
	claim := func(id, typ string) store.ClaimParams {
		return store.ClaimParams{Key: store.Key{Consumer: []byte("repeated"), MessageID: []byte(id)}, Type: typ,
			Fingerprint: []byte(fmt.Sprintf("%-32s", typ+id))}
	}
	run := func(claims ...store.ClaimParams) []store.ClaimResult {
		t.Helper()
		tx, err := env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := bc.ClaimBatch(ctx, tx, &store.ClaimBatchParams{Claims: claims, LockTimeout: time.Second})
		if err == nil {
			err = env.Driver.CheckTx(ctx, tx, "")
		}
		if err != nil {
			_ = env.Driver.Rollback(ctx, tx)
			t.Fatalf("ClaimBatch: %v", err)
		}
		if err := env.Driver.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if len(res) != len(claims) {
			t.Fatalf("ClaimBatch of %d returned %d results", len(claims), len(res))
		}
		return res
	}
	first := claim("a", "first")
	res := run(first, claim("a", "second"), claim("b", "first"))
	if !res[0].Claimed || res[1].Claimed || !res[2].Claimed {
		t.Fatalf("claims a, a, b: claimed %v, %v, %v; want true, false, true", res[0].Claimed, res[1].Claimed, res[2].Claimed)
	}
	if string(res[1].Fingerprint) != string(first.Fingerprint) || res[1].Type != first.Type {
		t.Fatalf("the second a: fingerprint %q, type %q; want the first's, %q and %q", res[1].Fingerprint, res[1].Type, first.Fingerprint, first.Type)
	}
	res = run(claim("a", "third"), claim("a", "fourth"))
	for i, r := range res {
		if r.Claimed || r.Fingerprint != nil && string(r.Fingerprint) != string(first.Fingerprint) {
			t.Fatalf("a again, copy %d: claimed %v, fingerprint %q; want a duplicate of the stored claim (%q)", i, r.Claimed, r.Fingerprint, first.Fingerprint)
		}
	}
}

// A handler that commits or rolls back the batch's transaction itself
// (as Process's HandlerEndsTx) neither loses a message, nor makes an
// effect twice, nor retries without bound. Its COMMIT commits the claims
// of the whole batch with the writes made before it: those messages are
// done (a Duplicate next time, as Process's offender is), and the claims
// of the messages whose handlers had not run are undone, so that they are
// processed. A handler caught ending the transaction (in the pass with a
// savepoint per message) gets Retry, counted, with an error wrapping
// inbox.ErrTxEndedByHandler, and is dead-lettered at MaxAttempts unless
// its COMMIT made it a Duplicate. ProcessBatchFunc's handler here writes
// all its messages, then ends the transaction as its first offender does.
func testBatchHandlerEndsTx[TTx any](t *testing.T, h Harness[TTx]) {
	const maxAttempts = 2
	env, ib := openBatch(t, h, inbox.Config{MaxAttempts: maxAttempts})
	ctx := context.Background()
	end := func(id string) func(context.Context, TTx) error {
		switch {
		case strings.HasSuffix(id, "ends-commit"):
			return env.Driver.Commit
		case strings.HasSuffix(id, "ends-rollback"):
			return env.Driver.Rollback
		}
		return nil
	}
	one := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if e := end(m.ID); e != nil {
			return e(ctx, tx)
		}
		return nil
	}
	all := func(ctx context.Context, tx TTx, ms []*inbox.Message) error {
		for _, m := range ms {
			if err := env.Write(ctx, tx, key(m.ID)); err != nil {
				return err
			}
		}
		for _, m := range ms {
			if e := end(m.ID); e != nil {
				return e(ctx, tx)
			}
		}
		return nil
	}
	commitFirst := []string{"e-1", "ends-commit", "e-2", "ends-rollback", "e-3"}
	rollbackFirst := []string{"e-1", "ends-rollback", "e-2", "ends-commit", "e-3"}
	for _, tc := range []struct {
		name    string
		batch   []string
		process func([]inbox.Message) ([]inbox.Outcome, error)
	}{
		{"ProcessBatch/commit-first", commitFirst, func(b []inbox.Message) ([]inbox.Outcome, error) { return ib.ProcessBatch(ctx, b, one) }},
		{"ProcessBatch/rollback-first", rollbackFirst, func(b []inbox.Message) ([]inbox.Outcome, error) { return ib.ProcessBatch(ctx, b, one) }},
		{"ProcessBatchFunc/rollback-first", rollbackFirst, func(b []inbox.Message) ([]inbox.Outcome, error) { return ib.ProcessBatchFunc(ctx, b, all) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, id := range tc.batch {
				ids = append(ids, tc.name+"/"+id)
			}
			retries := map[string]int{}
			final := map[string]inbox.Outcome{}
			// Every message is settled within MaxAttempts calls; one more
			// shows that they stay so.
			for call := 1; call <= maxAttempts+1; call++ {
				outs, err := tc.process(msgs(ids...))
				t.Logf("call %d: %s (%v)", call, statuses(outs), err)
				for i, o := range outs {
					id := ids[i]
					if prev, ok := final[id]; ok && o.Status != inbox.Duplicate {
						t.Fatalf("call %d: %s %v (%v), after %v: want a duplicate", call, id, o.Status, err, prev.Status)
					}
					switch {
					case o.Status == inbox.Retry && end(id) == nil: // a neighbour's doing: not counted
						if o.Attempts != 0 {
							t.Fatalf("call %d: %s, well-behaved: Retry after %d attempts (%v), want none counted", call, id, o.Attempts, o.Err)
						}
					case o.Status == inbox.Retry:
						retries[id]++
						if o.Attempts != retries[id] || !errors.Is(o.Err, inbox.ErrTxEndedByHandler) {
							t.Fatalf("call %d: %s: Retry after %d attempts (%v; batch: %v), want after %d with an error wrapping inbox.ErrTxEndedByHandler",
								call, id, o.Attempts, o.Err, err, retries[id])
						}
					case o.Ack():
						if _, ok := final[id]; !ok {
							final[id] = o
						}
					}
				}
			}
			for _, id := range ids {
				o, ok := final[id]
				want := 1
				if strings.HasSuffix(id, "ends-rollback") {
					want = 0
				}
				switch n := count(t, env, id); {
				case !ok:
					t.Errorf("%s: not settled after %d calls (%d counted retries, %d effects): retried for ever?", id, maxAttempts+1, retries[id], n)
				case n != want:
					t.Errorf("%s: %v with %d effects, want %d", id, o.Status, n, want)
				case want == 0 && (o.Status != inbox.DeadLettered || o.Attempts != maxAttempts):
					t.Errorf("%s: %v after %d attempts, want dead-lettered after %d", id, o.Status, o.Attempts, maxAttempts)
				}
			}
		})
	}
}
