package pgfailover

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// claimWatch is pgxstore's driver, and notes when a claim last succeeded.
type claimWatch struct {
	*pgxstore.Driver
	ok atomic.Int64 // unix nanoseconds of the last claim without error
}

func (w *claimWatch) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*store.OutboxRecord, error) {
	recs, err := w.Driver.OutboxClaim(ctx, p)
	if err == nil {
		w.ok.Store(time.Now().UnixNano())
	}
	return recs, err
}

// TestRelayListens fails over under a running outbox relay whose poll
// interval is a minute, so that only a notification makes it relay a row
// soon. After the promotion, once the relay has claimed again and is idle,
// a new row is published within seconds: the relay listens again, on the
// new primary, without a restart.
func TestRelayListens(t *testing.T) {
	t.Parallel()
	const (
		pollInterval = time.Minute
		promptly     = 5 * time.Second
	)
	e := newEnv(t, &pgcluster.Options{Replication: pgcluster.Sync}, 4)
	ctx := context.Background()
	ob, err := outbox.New(ctx, e.driver, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	published := map[string]time.Time{}
	publish := func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := published[m.ID]; !ok {
			published[m.ID] = time.Now()
		}
		return nil
	}
	publishedAt := func(id string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := published[id]
		return at, ok
	}
	watch := &claimWatch{Driver: e.driver}
	relay, err := outbox.NewRelay(ctx, watch, &outbox.RelayConfig{Publish: publish, PollInterval: pollInterval, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()

	// write commits one outbox row through the multi-host pool, retrying
	// while the failover goes on, and returns when it committed.
	write := func(id string) time.Time {
		t.Helper()
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				return ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: "d", Payload: []byte(id)})
			})
			if err == nil {
				return time.Now()
			}
		}
		t.Fatalf("writing %s: %v", id, err)
		return time.Time{}
	}
	// relayed waits until id is published, promptly after it committed at
	// committed.
	relayed := func(id string, committed time.Time) time.Duration {
		t.Helper()
		if !waitFor(promptly, func() bool { _, ok := publishedAt(id); return ok }) {
			t.Fatalf("%s not published within %v of its COMMIT (poll interval %v): the relay did not hear of it", id, promptly, pollInterval)
		}
		at, _ := publishedAt(id)
		return at.Sub(committed)
	}
	listening := func() int {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&n)
		return n
	}

	if !waitFor(10*time.Second, func() bool { return listening() == 1 && watch.ok.Load() > 0 }) {
		t.Fatalf("the relay does not listen on the primary: %d LISTEN sessions", listening())
	}
	time.Sleep(200 * time.Millisecond) // idle, waiting for the poll interval
	before := relayed("before", write("before"))

	f := e.failOver(t)
	// The relay claims again on the new primary (after its round's backoff
	// or a notification), and then waits for the poll interval.
	if !waitFor(30*time.Second, func() bool { return watch.ok.Load() > f.Promoted.UnixNano() }) {
		t.Fatal("the relay has not claimed on the promoted standby within 30 s")
	}
	claimed := time.Now()
	time.Sleep(200 * time.Millisecond)
	after := relayed("after", write("after"))
	t.Logf("relayed %v after its COMMIT before the failover, %v after; claimed again %v after the promotion",
		before.Round(time.Millisecond), after.Round(time.Millisecond), claimed.Sub(f.Promoted).Round(time.Millisecond))
	if n := listening(); n != 1 {
		t.Fatalf("%d LISTEN sessions on the promoted standby, want the relay's 1", n)
	}
}
