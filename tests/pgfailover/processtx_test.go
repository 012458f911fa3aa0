package pgfailover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// TestProcessTx fails over while workers call ProcessTx in transactions of
// their own, begun on the pool of the multi-host DSN. The same pool and
// inbox go on after the promotion: every message ends with exactly one
// effect and its claim, on sync replication.
func TestProcessTx(t *testing.T) {
	t.Parallel()
	const workers = 4
	e := newEnv(t, &pgcluster.Options{Replication: pgcluster.Sync}, workers+2)
	ctx := context.Background()
	ib, err := inbox.New(ctx, e.driver, &inbox.Config{Consumer: "failover", Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{AckWait: 10 * time.Second})
	n := envInt(t, "INBOX_PGFAILOVER_MESSAGES", defaultMessages) / 2
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tx-%06d", i)
		if err := b.Publish(ctx, &broker.Message{ID: ids[i], Payload: []byte(ids[i])}); err != nil {
			t.Fatal(err)
		}
	}

	// One delivery in the caller's transaction: BEGIN, ProcessTx, COMMIT,
	// then ack; nack on any error, with ProcessTx's delay.
	handle := func(ctx context.Context, d broker.Delivery) error {
		m := d.Message()
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: m.ID, Payload: m.Payload}, effect)
		if err != nil {
			return retryError{out.Delay, err}
		}
		if out.Commit() {
			if err := tx.Commit(ctx); err != nil {
				return err
			}
		}
		if !out.Ack() {
			return retryError{out.Delay, fmt.Errorf("outcome %v", out.Status)}
		}
		return d.Ack(ctx)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	src := b.Source()
	var wg sync.WaitGroup
	var errs sync.Map // error text -> count, for the log
	for range workers {
		wg.Go(func() {
			for {
				d, err := src.Next(cctx)
				if err != nil {
					return
				}
				if err := handle(cctx, d); err != nil {
					delay := 100 * time.Millisecond
					if re, ok := errors.AsType[retryError](err); ok {
						delay = re.delay
					}
					v, _ := errs.LoadOrStore(err.Error(), new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					_ = d.Nack(context.WithoutCancel(cctx), delay)
				}
			}
		})
	}

	acks := func() int { return len(b.Acked()) }
	if !waitFor(time.Minute, func() bool { return acks() >= n/3 }) {
		t.Fatalf("%d of %d acked after a minute, before any failover", acks(), n)
	}
	before := acks()
	f := e.failOver(t)
	wctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	if err := b.WaitSettled(wctx); err != nil {
		t.Fatalf("not every message settled within %v of the promotion: %v", settleWithin, err)
	}
	stop()
	wg.Wait()
	errs.Range(func(k, v any) bool {
		t.Logf("failed %d times: %s", v.(*atomic.Int64).Load(), k)
		return true
	})

	acked := map[string]bool{}
	for _, id := range b.Acked() {
		acked[id] = true
	}
	promoted := e.promotedPool(t)
	t.Logf("failover after %d acks: stop and promote %v; no effect written for %v",
		before, f.Promoted.Sub(f.Killed).Round(time.Millisecond), writeGap(t, promoted).Round(time.Millisecond))
	tl := readLedger(t, promoted, "failover").tally(ids, acked)
	if len(tl.Lost)+len(tl.Doubled)+len(tl.Torn)+len(tl.Missing) > 0 {
		t.Fatalf("%v; lost %v, doubled %v, torn %v, missing %v", tl, first(tl.Lost), first(tl.Doubled), first(tl.Torn), first(tl.Missing))
	}
	t.Log(tl)
}

// retryError is ProcessTx's error with its outcome's delay.
type retryError struct {
	delay time.Duration
	err   error
}

func (e retryError) Error() string { return e.err.Error() }
func (e retryError) Unwrap() error { return e.err }
