package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

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
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // also when waitForLockWaits fails, so that the holder ends
	go run()
	go run()
	waitForLockWaits(t, env, 2)
	unblock()
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

// lockWaitsDeadline bounds how long a case waits for the lock waits it
// needs; the racing claims of the cases wait longer than that (their lock
// timeout is 5 s or more), so they are still queued when it passes.
const lockWaitsDeadline = 5 * time.Second

const noProbe = "the harness gives no Env.LockWaits, the probe of transactions waiting for a lock (only a SingleWriter database may lack it)"

// waitForLockWaits waits until at least n transactions of env wait for a
// lock, as the harness's probe (Env.LockWaits) sees them, and fails the
// test when they do not within lockWaitsDeadline: without them the case
// would pass without the race it describes. On a single-writer database
// without a probe (SQLite) the waiters sleep in the busy handler, where
// nothing shows them: the precondition is a skipped subtest, and the
// waiters get 200 ms to queue, which the case's checks do not rely on.
func waitForLockWaits[TTx any](t *testing.T, env *Env[TTx], n int) {
	t.Helper()
	if env.LockWaits == nil {
		if !env.SingleWriter {
			t.Fatal(noProbe)
		}
		t.Run("LockWaitsSeen", func(t *testing.T) {
			t.Skipf("single writer: the %d waiting transactions sleep in the busy handler, which no lock table shows", n)
		})
		time.Sleep(200 * time.Millisecond)
		return
	}
	if got := pollLockWaits(t, env, func(got int) bool { return got >= n }); got < n {
		t.Fatalf("%d transactions waiting for a lock within %v, want at least %d queued behind the held one", got, lockWaitsDeadline, n)
	}
}

// wantNoLockWaits fails the test unless the probe sees no transaction of
// env waiting for a lock within lockWaitsDeadline (a waiter just granted
// its lock may still show for a moment).
func wantNoLockWaits[TTx any](t *testing.T, env *Env[TTx], when string) {
	t.Helper()
	if got := pollLockWaits(t, env, func(got int) bool { return got == 0 }); got != 0 {
		t.Fatalf("the probe sees %d transactions waiting for a lock %s, want 0", got, when)
	}
}

// pollLockWaits probes env's lock waits until ok accepts their number or
// lockWaitsDeadline passed, and returns the last number.
func pollLockWaits[TTx any](t *testing.T, env *Env[TTx], ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(lockWaitsDeadline)
	for {
		got, err := env.LockWaits(context.Background())
		if err != nil {
			t.Fatalf("counting lock waits: %v", err)
		}
		if ok(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holdClaim processes the message id with a handler that waits for
// release and then writes its effect, and returns once the handler runs,
// that is once the claim is held. release may be called more than once;
// the test's end calls it too, so that a failed test leaves no holder.
// held receives the holder's error, or an error when it did not process.
func holdClaim[TTx any](t *testing.T, env *Env[TTx], ib *inbox.Inbox[TTx], id string) (release func(), held <-chan error) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	done := make(chan error, 1)
	go func() {
		out, err := ib.Process(context.Background(), msg(id), func(ctx context.Context, tx TTx, m *inbox.Message) error {
			close(started)
			<-unblock
			return env.Write(ctx, tx, key(m.ID))
		})
		if err == nil && out.Status != inbox.Processed {
			err = fmt.Errorf("holder of %q: %v, want Processed", id, out.Status)
		}
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the holder of %q never reached its handler: %v", id, err)
	}
	return release, done
}

// The probe that the race cases rely on (Env.LockWaits) sees a claim that
// waits behind a held one, and nothing while none waits: a probe that
// always said yes would let those cases pass without their race, one that
// counted held locks too would say yes at once.
func testLockWaitsProbe[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.LockWaits == nil {
		if !env.SingleWriter {
			t.Fatal(noProbe)
		}
		t.Skip("single writer: a waiting transaction sleeps in the busy handler, which no lock table shows (Env.LockWaits nil)")
	}
	ib := newInbox(t, env, inbox.Config{MaxAttempts: 1000, Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	wantNoLockWaits(t, env, "before any claim")
	release, held := holdClaim(t, env, ib, "probed")
	wantNoLockWaits(t, env, "while a claim holds its row and none waits")
	contender := make(chan inbox.Outcome, 1)
	go func() {
		out, _ := deliver(ctx, ib, msg("probed"), writer(env))
		contender <- out
	}()
	waitForLockWaits(t, env, 1)
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if out := <-contender; out.Status != inbox.Duplicate {
		t.Fatalf("contender: %+v, want Duplicate once the holder committed", out)
	}
	wantNoLockWaits(t, env, "after both ended")
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
		release, held := holdClaim(t, env, ib, id)
		begin := time.Now()
		out, err := contend(ctx, msg(id))
		waited := time.Since(begin)
		release()
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
