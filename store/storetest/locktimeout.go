package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// LongLockWait is how long the connections of Harness.OpenLongWaits wait
// for a lock by themselves. It is far longer than the lock timeouts the
// cases give the store. A store that leaves the wait to the connection thus
// fails them.
const LongLockWait = 20 * time.Second

// openLongWaits opens and migrates an environment whose connections wait
// LongLockWait (or longer) for a lock unless the store bounds the wait.
func openLongWaits[TTx any](tb testing.TB, h Harness[TTx]) *Env[TTx] {
	tb.Helper()
	if h.OpenLongWaits == nil {
		return open(tb, h) // Open's connections wait that long already
	}
	env, err := h.OpenLongWaits(tb, store.Tables{})
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	if err := env.Driver.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return env
}

// retryable reports whether err is one a store marks retryable, or one of
// its database errors that its Retryable recognizes.
func retryable[TTx any](env *Env[TTx], err error) bool {
	var re *store.RetryableError
	return errors.As(err, &re) || inbox.IsRetryable(err) || env.Driver.Retryable(err)
}

// The store bounds every wait for a row lock (the write lock on SQLite)
// by the lock timeout it is given, or store.DefaultLockTimeout where the
// operation takes none, and not by what its connections wait by
// themselves (LongLockWait here; none at all on PostgreSQL). Each
// operation runs behind a lock held by another transaction with a lock
// timeout of 1 s and must fail, retryably, well before LongLockWait.
func testLockTimeoutHolds[TTx any](t *testing.T, h Harness[TTx]) {
	const lockTimeout = time.Second
	// within bounds the wait: the lock timeout, plus time to fail.
	within := lockTimeout + 2*time.Second
	withinDefault := store.DefaultLockTimeout + 3*time.Second
	type fixture struct {
		env *Env[TTx]
		ib  *inbox.Inbox[TTx]
		in  store.Inspector[TTx]
		dl  int64 // a dead letter of ib's
		seq int64 // an outbox row's, leased to token (holdOutbox)
	}
	// holdDeadLetter holds dead letter f.dl's lock in a release's
	// transaction until the test ends.
	holdDeadLetter := func(t *testing.T, f *fixture) {
		t.Helper()
		ctx := context.Background()
		tx, err := f.env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lockTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.env.Driver.Rollback(ctx, tx) })
		if _, _, err := f.in.DeadLetterRelease(ctx, tx, f.dl); err != nil {
			t.Fatalf("holder's release: %v", err)
		}
	}
	cases := []struct {
		name   string
		within time.Duration
		// hold takes the lock in another transaction; run runs the
		// operation behind it and returns its error.
		hold func(t *testing.T, f *fixture)
		run  func(ctx context.Context, t *testing.T, f *fixture) error
	}{
		{
			name: "Process", within: within,
			hold: func(t *testing.T, f *fixture) { holdClaim(t, f.env, f.ib, "held") },
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				out, err := f.ib.Process(ctx, msg("held"), writer(f.env))
				return wantRetry(out, err)
			},
		},
		{
			name: "ProcessTx", within: within,
			hold: func(t *testing.T, f *fixture) { holdClaim(t, f.env, f.ib, "held") },
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				if f.env.SingleWriter {
					t.Skip("single writer: the caller's BEGIN waits for the write lock, by the caller's own timeout")
				}
				tx, err := f.env.BeginPlain(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = f.env.Driver.Rollback(context.Background(), tx) }()
				out, err := f.ib.ProcessTx(ctx, tx, msg("held"), writer(f.env))
				return wantRetry(out, err)
			},
		},
		{
			name: "ProcessBatch", within: within,
			hold: func(t *testing.T, f *fixture) { holdClaim(t, f.env, f.ib, "held") },
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				if _, ok := f.env.Driver.(store.BatchClaimer[TTx]); !ok {
					t.Skip("the store claims no batches")
				}
				outs, err := f.ib.ProcessBatch(ctx, []inbox.Message{msg("free"), msg("held")}, writer(f.env))
				if err == nil {
					return fmt.Errorf("outcomes %+v and no error, want the batch to fail", outs)
				}
				for i, out := range outs {
					if out.Status != inbox.Retry {
						return fmt.Errorf("message %d: %v, want Retry (%w)", i, out.Status, err)
					}
				}
				return err
			},
		},
		{
			name: "Release", within: within, hold: holdDeadLetter,
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				tx, err := f.env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lockTimeout})
				if err != nil {
					return err
				}
				defer func() { _ = f.env.Driver.Rollback(context.Background(), tx) }()
				_, _, err = f.in.DeadLetterRelease(ctx, tx, f.dl)
				return err
			},
		},
		{
			name: "Replay", within: within, hold: holdDeadLetter,
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				out, err := f.ib.Replay(ctx, f.dl, writer(f.env))
				if err == nil {
					return fmt.Errorf("replay: %v and no error, want an error", out.Status)
				}
				return err
			},
		},
		{
			// DeadLetterDiscard takes no lock timeout: store.DefaultLockTimeout.
			name: "Discard", within: withinDefault, hold: holdDeadLetter,
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				got, err := f.in.DeadLetterDiscard(ctx, []int64{f.dl})
				if err == nil {
					return fmt.Errorf("discarded %v and no error, want an error", got)
				}
				return err
			},
		},
		{
			// Prune takes no lock timeout: store.DefaultLockTimeout. The
			// holder locks an old row (InboxReclaim of a live row locks it
			// and changes nothing); a pruner behind it is Busy or fails.
			name: "Prune", within: withinDefault,
			hold: func(t *testing.T, f *fixture) {
				ctx := context.Background()
				out, err := f.ib.Process(ctx, msg("old"), writer(f.env))
				if err != nil || out.Status != inbox.Processed {
					t.Fatalf("old: %v %v", out.Status, err)
				}
				k := store.Key{Consumer: []byte(f.ib.Consumer()), MessageID: []byte("old")}
				if err := f.env.Backdate(ctx, k, 2*time.Hour); err != nil {
					t.Fatal(err)
				}
				tx, err := f.env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lockTimeout})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.env.Driver.Rollback(ctx, tx) })
				if ok, err := f.env.Driver.InboxReclaim(ctx, tx, &store.ClaimParams{Key: k, Type: "storetest.credit"}); err != nil || ok {
					t.Fatalf("holder's reclaim of a live row: %v %v, want false", ok, err)
				}
			},
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				res, err := f.env.Driver.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
				switch {
				case err != nil:
					return err
				case res.Busy:
					return store.Retryable(errors.New("busy"))
				}
				return fmt.Errorf("pruned %d rows behind a held row, want Busy or an error", res.Deleted)
			},
		},
	}
	// The outbox's statements run in transactions of their own, with
	// store.DefaultLockTimeout. holdOutbox writes a due row (leased to
	// token when lease), and holds its lock (the write lock on SQLite) in
	// an UPDATE that changes nothing, until the test ends.
	token := []byte("lock-timeout-tok")
	holdOutbox := func(lease bool) func(t *testing.T, f *fixture) {
		return func(t *testing.T, f *fixture) {
			t.Helper()
			ctx := context.Background()
			w, ok := f.env.Driver.(store.OutboxWriter[TTx])
			if !ok {
				t.Skip("the store has no outbox")
			}
			err := inTx(ctx, f.env.Driver, f.env.BeginPlain, func(tx TTx) error {
				_, err := w.OutboxWrite(ctx, tx, []*store.OutboxRow{{ID: []byte("ob-1"), Destination: "d", Payload: []byte("p")}})
				return err
			})
			if err != nil {
				t.Fatalf("writing the outbox row: %v", err)
			}
			if lease {
				recs, err := f.env.Driver.(store.OutboxRelayer).OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 1, Lease: time.Minute, Token: token})
				if err != nil || len(recs) != 1 {
					t.Fatalf("claiming the row: %v %v", recs, err)
				}
				f.seq = recs[0].Seq
			}
			tx, err := f.env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lockTimeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.env.Driver.Rollback(ctx, tx) })
			if err := f.env.Exec(ctx, tx, "UPDATE "+f.env.Tables.Name("outbox", quoteFor(f.env.Driver))+" SET attempts = attempts"); err != nil {
				t.Fatalf("holding the outbox's rows: %v", err)
			}
		}
	}
	cases = append(cases, []struct {
		name   string
		within time.Duration
		hold   func(t *testing.T, f *fixture)
		run    func(ctx context.Context, t *testing.T, f *fixture) error
	}{
		{
			name: "OutboxMarkPublished", within: withinDefault, hold: holdOutbox(true),
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				n, err := f.env.Driver.(store.OutboxRelayer).OutboxMarkPublished(ctx, token, []int64{f.seq})
				if err == nil {
					return fmt.Errorf("marked %d rows and no error, want an error", n)
				}
				return err
			},
		},
		{
			// PostgreSQL and MySQL skip a locked row (SKIP LOCKED): a
			// claim of nothing, at once, is as good as a lock timeout.
			name: "OutboxClaim", within: withinDefault, hold: holdOutbox(false),
			run: func(ctx context.Context, t *testing.T, f *fixture) error {
				recs, err := f.env.Driver.(store.OutboxRelayer).OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 1, Lease: time.Minute, Token: token})
				switch {
				case err != nil:
					return err
				case len(recs) == 0 && !f.env.SingleWriter:
					return store.Retryable(errors.New("skipped the locked row"))
				}
				return fmt.Errorf("claimed %d rows behind a held lock, want none", len(recs))
			},
		},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := openLongWaits(t, h)
			f := &fixture{env: env, in: inspector(t, env),
				ib: newInbox(t, env, inbox.Config{LockTimeout: lockTimeout, MaxAttempts: 1})}
			out, err := f.ib.Process(context.Background(), msg("dead"), func(context.Context, TTx, *inbox.Message) error {
				return inbox.Permanent(errors.New("dead"))
			})
			wantStatus(t, "fixture", out, inbox.DeadLettered)
			dls, err := f.in.DeadLetterSearch(context.Background(), &store.DeadLetterSearchParams{Limit: 1})
			if err != nil || len(dls) != 1 {
				t.Fatalf("the fixture's dead letter: %v %v", dls, err)
			}
			f.dl = dls[0].ID
			tc.hold(t, f)
			// A store that does not bound the wait would wait
			// LongLockWait: stop it sooner, and say so.
			ctx, cancel := context.WithTimeout(context.Background(), tc.within+time.Second)
			defer cancel()
			begin := time.Now()
			err = tc.run(ctx, t, f)
			waited := time.Since(begin)
			if waited > tc.within || ctx.Err() != nil {
				t.Fatalf("waited %v behind a held lock (%v), want at most %v: the store's lock timeout (%v) does not bound the wait",
					waited.Round(time.Millisecond), err, tc.within, lockTimeout)
			}
			if !retryable(env, err) {
				t.Fatalf("after %v behind a held lock: %v, want a retryable lock timeout", waited.Round(time.Millisecond), err)
			}
		})
	}
}

// wantRetry returns err when out is a Retry with an error, else an error
// saying what came instead.
func wantRetry(out inbox.Outcome, err error) error {
	if out.Status != inbox.Retry || err == nil {
		return fmt.Errorf("%v with error %v, want Retry with a retryable error", out.Status, err)
	}
	return err
}

// The lock timeout in effect in a transaction of the store is the one it
// was given, every time, whatever the connection's previous transaction
// set: read back (Env.LockTimeout) in the transactions of Begin,
// BeginClaim and BeginClaimBatch, and after Claim in the caller's
// transaction (ProcessTx), for 7 s, then 2 s, then 7 s again.
func testLockTimeoutReadBack[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := openLongWaits(t, h)
	if env.LockTimeout == nil {
		t.Skip("Env.LockTimeout is nil: the store's lock timeout cannot be read back")
	}
	seq := 0
	claim := func(lt time.Duration) store.ClaimParams {
		seq++
		return store.ClaimParams{Key: store.Key{Consumer: []byte("readback"), MessageID: fmt.Appendf(nil, "m-%d", seq)},
			LockTimeout: lt, Type: "t"}
	}
	// Each way begins a transaction, and then may run a statement in it
	// (claim; nil: none) before the lock timeout is read back.
	ways := []struct {
		name  string
		begin func(lt time.Duration) (TTx, error)
		claim func(tx TTx, lt time.Duration) error
	}{
		{"Begin", func(lt time.Duration) (TTx, error) {
			return env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lt})
		}, nil},
		{"BeginClaim", func(lt time.Duration) (TTx, error) {
			p := claim(lt)
			tx, res, err := env.Driver.BeginClaim(ctx, &p)
			if err == nil && !res.Claimed {
				err = errors.New("a new ID was a duplicate")
			}
			return tx, err
		}, nil},
		{"Claim", func(time.Duration) (TTx, error) { return env.BeginPlain(ctx) }, func(tx TTx, lt time.Duration) error {
			p := claim(lt)
			_, err := env.Driver.Claim(ctx, tx, &p)
			return err
		}},
		{"BeginClaimBatch", func(lt time.Duration) (TTx, error) {
			bb, ok := env.Driver.(store.BatchBeginner[TTx])
			if !ok {
				return env.Driver.Begin(ctx, &store.BeginParams{LockTimeout: lt}) // as ProcessBatch does then
			}
			tx, _, err := bb.BeginClaimBatch(ctx, &store.ClaimBatchParams{Claims: []store.ClaimParams{claim(lt)}, LockTimeout: lt})
			return tx, err
		}, nil},
	}
	// readBack returns the lock timeout in effect in a transaction of w
	// begun with lt; the transaction is rolled back.
	readBack := func(w int, lt time.Duration) (time.Duration, error) {
		tx, err := ways[w].begin(lt)
		if err != nil {
			return 0, err
		}
		defer func() { _ = env.Driver.Rollback(ctx, tx) }()
		if ways[w].claim != nil {
			if err := ways[w].claim(tx, lt); err != nil {
				return 0, err
			}
		}
		return env.LockTimeout(ctx, tx)
	}
	for w := range ways {
		for _, lt := range []time.Duration{7 * time.Second, 2 * time.Second, 7 * time.Second} {
			if got, err := readBack(w, lt); err != nil || got != lt {
				t.Fatalf("%s with lock timeout %v: %v (%v) in effect in its transaction, want %v", ways[w].name, lt, got, err, lt)
			}
		}
	}
}
