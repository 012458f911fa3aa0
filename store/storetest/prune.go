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
	"github.com/inboxkit/inbox/store"
)

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
	p, err := inbox.NewPruner(env.Driver, &inbox.PrunerConfig{Retention: time.Hour, Hooks: []inbox.Hook{hook}})
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

// One pruner per table at a time: while a Prune holds the table's pruner
// lock (here it waits for a row that a transaction holds, which the lock
// probe shows), a second Prune deletes nothing and reports Busy at once;
// after the first ends, the lock is free. On a single-writer database the
// write lock is the pruners' lock: the holding transaction has it, and
// Prune reports Busy once its busy timeout passed.
func testPrunerBusy[TTx any](t *testing.T, h Harness[TTx]) {
	ctx := context.Background()
	env := open(t, h)
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("expired"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("expired: %v %v", out.Status, err)
	}
	if err := env.Backdate(ctx, store.Key{Consumer: []byte("storetest"), MessageID: []byte("expired")}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	p := &store.PruneParams{Retention: time.Hour, Limit: 10}
	holder, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { _ = env.Driver.Rollback(ctx, holder) }) }
	defer release() // also when the test fails, so that the first pruner ends
	if err := env.Exec(ctx, holder, "DELETE FROM "+env.Tables.Name("inbox", quoteFor(env.Driver))); err != nil {
		t.Fatalf("holding the inbox's rows: %v", err)
	}
	type result struct {
		res *store.PruneResult
		err error
	}
	var first chan result
	if !env.SingleWriter {
		first = make(chan result, 1)
		go func() {
			res, err := env.Driver.Prune(ctx, p)
			first <- result{res, err}
		}()
		waitForLockWaits(t, env, 1) // the first pruner took its lock, then waits for the held row
	}
	// Bounded: a second pruner that got the lock too would wait for the
	// row. On a single writer, it waits its lock timeout
	// (store.DefaultLockTimeout) for the write lock, then is Busy.
	busyCtx, cancel := context.WithTimeout(ctx, store.DefaultLockTimeout+3*time.Second)
	defer cancel()
	res, err := env.Driver.Prune(busyCtx, p)
	if err != nil || res == nil || !res.Busy || res.Deleted != 0 {
		t.Fatalf("a second Prune while the first holds the pruner lock: %+v, %v; want Busy, nothing deleted, no error", res, err)
	}
	release()
	if first != nil {
		r := <-first
		if r.err != nil || r.res.Busy || r.res.Deleted != 1 {
			t.Fatalf("the first Prune, once the row was released: %+v, %v; want 1 row deleted", r.res, r.err)
		}
	}
	want := map[bool]int{true: 1, false: 0}[env.SingleWriter] // what is left to delete
	if res, err := env.Driver.Prune(ctx, p); err != nil || res.Busy || res.Deleted != want {
		t.Fatalf("Prune after the others ended: %+v, %v; want not Busy, %d deleted: the lock must be free again", res, err, want)
	}
}
