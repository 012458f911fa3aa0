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
	env := open(t, h)
	if env.Exec == nil {
		t.Skip("the harness cannot run a statement (Env.Exec)")
	}
	expiredInboxRow(t, env)
	p := &store.PruneParams{Retention: time.Hour, Limit: 10}
	wantPrunerBusy(t, env, "inbox", "DELETE FROM %s", func(ctx context.Context) (*store.PruneResult, error) {
		return env.Driver.Prune(ctx, p)
	})
}

// expiredInboxRow processes the message "expired" in env and makes its
// inbox row 2 hours old.
func expiredInboxRow[TTx any](t *testing.T, env *Env[TTx]) {
	t.Helper()
	ctx := context.Background()
	ib := newInbox(t, env, inbox.Config{})
	if out, err := ib.Process(ctx, msg("expired"), writer(env)); err != nil || out.Status != inbox.Processed {
		t.Fatalf("expired: %v %v", out.Status, err)
	}
	if err := env.Backdate(ctx, store.Key{Consumer: []byte("storetest"), MessageID: []byte("expired")}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
}

// wantPrunerBusy checks that prune has one pruner at a time, in env whose
// table has one expired row: while a first prune waits for the row, which
// a transaction holds (hold, with %s the table), a second reports Busy at
// once; the first then deletes the row, and a third finds the lock free.
// On a single writer, the holder has the write lock: the second is Busy
// after store.DefaultLockTimeout, and the third deletes the row.
func wantPrunerBusy[TTx any](t *testing.T, env *Env[TTx], table, hold string, prune func(context.Context) (*store.PruneResult, error)) {
	t.Helper()
	ctx := context.Background()
	release := holdRows(t, env, table, hold)
	type result struct {
		res *store.PruneResult
		err error
	}
	var first chan result
	if !env.SingleWriter {
		first = make(chan result, 1)
		go func() {
			res, err := prune(ctx)
			first <- result{res, err}
		}()
		waitForLockWaits(t, env, 1) // the first pruner took its lock, then waits for the held row
	}
	// Bounded: a second pruner that got the lock too would wait for the
	// row. On a single writer, it waits its lock timeout
	// (store.DefaultLockTimeout) for the write lock, then is Busy.
	busyCtx, cancel := context.WithTimeout(ctx, store.DefaultLockTimeout+3*time.Second)
	defer cancel()
	res, err := prune(busyCtx)
	if err != nil || res == nil || !res.Busy || res.Deleted != 0 {
		t.Fatalf("a second prune of %s while the first holds the pruner lock: %+v, %v; want Busy, nothing deleted, no error", table, res, err)
	}
	release()
	if first != nil {
		r := <-first
		if r.err != nil || r.res.Busy || r.res.Deleted != 1 {
			t.Fatalf("the first prune of %s, once the row was released: %+v, %v; want 1 row deleted", table, r.res, r.err)
		}
	}
	want := map[bool]int{true: 1, false: 0}[env.SingleWriter] // what is left to delete
	if res, err := prune(ctx); err != nil || res.Busy || res.Deleted != want {
		t.Fatalf("prune of %s after the others ended: %+v, %v; want not Busy, %d deleted: the lock must be free again", table, res, err, want)
	}
}

// holdRows runs stmt (with %s the quoted table) in a transaction that
// holds the rows it touched, the write lock on a single writer, until
// release or the end of the test.
func holdRows[TTx any](t *testing.T, env *Env[TTx], table, stmt string) (release func()) {
	t.Helper()
	ctx := context.Background()
	holder, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = env.Driver.Rollback(ctx, holder) }) }
	t.Cleanup(release)
	if err := env.Exec(ctx, holder, fmt.Sprintf(stmt, env.Tables.Name(table, quoteFor(env.Driver)))); err != nil {
		t.Fatalf("holding the %s rows: %v", table, err)
	}
	return release
}
