package pgfailover

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// pruned records a pruner's calls.
type pruned struct {
	mu     sync.Mutex
	events []prunedAt
}

type prunedAt struct {
	at time.Time
	inbox.PruneEvent
}

func (p *pruned) OnPruned(_ context.Context, e *inbox.PruneEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, prunedAt{time.Now(), *e})
}

// firstDeleted returns when a call after since first deleted rows.
func (p *pruned) firstDeleted(since time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.events {
		if e.at.After(since) && e.Err == nil && e.Deleted > 0 {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// TestPrunerRecovers fails over under two pruners, each of another
// process's pool, which take turns under pgxstore's advisory lock. After
// the promotion, expired rows written on the new primary are pruned again
// by the same pruners, and younger rows are kept.
func TestPrunerRecovers(t *testing.T) {
	t.Parallel()
	const expired = 2000 // two batches of the default 1000
	e := newEnv(t, &pgcluster.Options{Replication: pgcluster.Sync}, 4)
	ctx := context.Background()
	other, err := pgxpool.New(ctx, e.c.DSN()+" pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hooks := []*pruned{{}, {}}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	for i, pool := range []*pgxpool.Pool{e.pool, other} {
		d, err := pgxstore.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := inbox.NewPruner(d, &inbox.PrunerConfig{Retention: time.Hour, Interval: 200 * time.Millisecond,
			Hooks: []inbox.Hook{hooks[i]}, Logger: e.log})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = p.Run(rctx) })
	}

	// expire writes expired rows and younger ones through the multi-host
	// pool, retrying while the failover goes on.
	expire := func(prefix string) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			_, err = e.pool.Exec(ctx, pgenv.Expire("inbox"), []byte("pruned"), prefix+"-old-", expired, (2 * time.Hour).Microseconds())
			if err == nil {
				_, err = e.pool.Exec(ctx, pgenv.Expire("inbox"), []byte("pruned"), prefix+"-young-", 10, (30 * time.Minute).Microseconds())
			}
			if err == nil {
				return
			}
		}
		t.Fatalf("writing expired rows: %v", err)
	}
	count := func(pool *pgxpool.Pool, like string) int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE convert_from(message_id, 'UTF8') LIKE $1`, like).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	prunedAll := func(prefix string) {
		t.Helper()
		if !waitFor(20*time.Second, func() bool { return count(e.pool, prefix+"-old-%") == 0 }) {
			t.Fatalf("%d of %d expired rows %s-old-* left after 20 s", count(e.pool, prefix+"-old-%"), expired, prefix)
		}
		if n := count(e.pool, prefix+"-young-%"); n != 10 {
			t.Fatalf("%d of 10 younger rows %s-young-* kept, want all", n, prefix)
		}
	}

	expire("before")
	prunedAll("before")
	f := e.failOver(t)
	expire("after")
	prunedAll("after")
	promoted := e.promotedPool(t)
	if n := count(promoted, "%-old-%"); n != 0 {
		t.Fatalf("%d expired rows on the promoted standby, want 0", n)
	}
	// A Prune call reports once it has deleted all its batches.
	var first time.Time
	waitFor(5*time.Second, func() bool {
		for _, h := range hooks {
			if at, ok := h.firstDeleted(f.Promoted); ok && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		return !first.IsZero()
	})
	if first.IsZero() {
		t.Fatal("no pruner reported deleted rows after the promotion")
	}
	for i, h := range hooks {
		h.mu.Lock()
		failed := 0
		for _, ev := range h.events {
			if ev.Err != nil {
				failed++
			}
		}
		t.Logf("pruner %d: %d prunes, %d failed", i+1, len(h.events), failed)
		h.mu.Unlock()
	}
	t.Logf("stop and promote %v; first rows pruned %v after the promotion", f.Promoted.Sub(f.Killed).Round(time.Millisecond),
		first.Sub(f.Promoted).Round(time.Millisecond))
}
