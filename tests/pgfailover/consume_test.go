package pgfailover

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

const (
	consumers       = 2 // processes, each with its own pool
	workersEach     = 4
	defaultMessages = 1500
	batchSize       = 10
	// settleWithin bounds the time from the promotion until every message
	// is settled; 1,500 messages take 2-3 s.
	settleWithin = time.Minute
)

// TestConsume fails over mid-run while two consumers run inbox.Consume on
// an in-memory broker that redelivers what is not acked. The consumers
// reconnect through the multi-host DSN without a restart. At the end every
// message is settled, and the promoted standby holds the outcome.
//
// Sync: every message has exactly one effect and its claim; nothing is
// lost or doubled. Async: nothing is doubled or torn (claim without effect
// or the reverse), and every message without an effect was acked: a COMMIT
// the standby never received. The test logs how many.
func TestConsume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts pgcluster.Options
	}{
		{"sync", pgcluster.Options{Replication: pgcluster.Sync}},
		{"async", pgcluster.Options{Replication: pgcluster.Async}},
		// A standby 20 ms away: what a failover loses grows with the lag.
		{"async-20ms", pgcluster.Options{Replication: pgcluster.Async, LinkDelay: 20 * time.Millisecond}},
	} {
		for _, mode := range []string{"Process", "ProcessBatch"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				runs := 1
				if tc.opts.Replication == pgcluster.Async {
					runs = envInt(t, "INBOX_PGFAILOVER_RUNS", 1)
				}
				n := envInt(t, "INBOX_PGFAILOVER_MESSAGES", defaultMessages)
				var lost, acked int
				for run := range runs {
					tl := consumeRun(t, &tc.opts, mode, n)
					lost += len(tl.Lost)
					acked += tl.Acked
					t.Logf("run %d: %v", run+1, tl)
				}
				t.Logf("%s %s: %d lost of %d acked over %d runs of %d messages", tc.name, mode, lost, acked, runs, n)
				if tc.opts.LinkDelay > 0 && lost == 0 {
					t.Fatalf("nothing lost with a standby %v behind: the test cannot see a loss", tc.opts.LinkDelay)
				}
			})
		}
	}
}

func consumeRun(t *testing.T, opts *pgcluster.Options, mode string, n int) tally {
	r := opts.Replication
	e := newEnv(t, opts, workersEach+2)
	ctx := context.Background()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{AckWait: 10 * time.Second})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m-%06d", i)
		if err := b.Publish(ctx, &broker.Message{ID: ids[i], Payload: []byte(ids[i])}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &inbox.ConsumerConfig{Workers: workersEach, Logger: e.log}
	if mode == "ProcessBatch" {
		cfg.BatchSize = batchSize
	}
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for i := range consumers {
		pool := e.pool
		if i > 0 { // another process: a pool of its own
			var err error
			if pool, err = pgxpool.New(ctx, e.c.DSN()+fmt.Sprintf(" pool_max_conns=%d", workersEach+2)); err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
		}
		d, err := pgxstore.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		ib, err := inbox.New(ctx, d, &inbox.Config{Consumer: "failover", Logger: e.log})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs <- inbox.Consume(cctx, ib, b.Source(), effect, cfg) })
	}
	defer func() {
		stop()
		wg.Wait()
	}()

	acks := func() int { return len(b.Acked()) }
	if !waitFor(time.Minute, func() bool { return acks() >= n/3 }) {
		t.Fatalf("%d of %d acked after a minute, before any failover", acks(), n)
	}
	before := acks()
	f := e.failOver(t)
	atPromotion := acks()
	if !waitFor(time.Minute, func() bool { return acks() > atPromotion }) {
		t.Fatalf("no ack within a minute of the promotion (%d acked)", acks())
	}

	// Every message settles soon after the promotion: what was in flight
	// is redelivered after a delay as long as the outage, not Backoff.Max.
	wctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	if err := b.WaitSettled(wctx); err != nil {
		dumpActivity(t, e)
		var longest time.Duration
		for _, nk := range b.Nacks() {
			longest = max(longest, nk.Delay)
		}
		t.Fatalf("not every message settled within %v of the promotion (%d nacks, the longest for %v): %v",
			settleWithin, len(b.Nacks()), longest, err)
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a consumer stopped with an error: %v", err)
		}
	}

	acked := map[string]bool{}
	for _, id := range b.Acked() {
		acked[id] = true
	}
	promoted := e.promotedPool(t)
	t.Logf("failover after %d acks: stop and promote %v; no effect written for %v",
		before, f.Promoted.Sub(f.Killed).Round(time.Millisecond), writeGap(t, promoted).Round(time.Millisecond))
	tl := readLedger(t, promoted, "failover").tally(ids, acked)
	if len(tl.Doubled) > 0 || len(tl.Torn) > 0 || len(tl.Missing) > 0 {
		t.Fatalf("%v; doubled %v, torn %v, missing %v", tl, first(tl.Doubled), first(tl.Torn), first(tl.Missing))
	}
	if r == pgcluster.Sync && len(tl.Lost) > 0 {
		t.Fatalf("synchronous replication lost acked messages: %v; first %v", tl, first(tl.Lost))
	}
	if len(tl.Lost) > 0 { // where the lost acks were among all acks
		pos := map[string]int{}
		for i, id := range b.Acked() {
			pos[id] = i + 1
		}
		lo, hi := n, 0
		for _, id := range tl.Lost {
			lo, hi = min(lo, pos[id]), max(hi, pos[id])
		}
		t.Logf("lost: acks %d to %d; %d acks before the stop began, %d at the promotion", lo, hi, before, atPromotion)
	}
	return tl
}
