package storetest

import (
	"context"
	"errors"
	"fmt"
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
