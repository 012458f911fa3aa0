package rabbitmq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/logtest"
)

// The first delayed retries to a delay queue not declared yet, many at
// once, from one Source or from four (as replicas would), all come
// back after their delay, none at once: a quorum delay queue that another
// declaration is still creating refuses publishes at first (a negative
// confirm), and Nack must not turn that into a requeue at once.
func TestDelayedRetryFreshQueue(t *testing.T) {
	t.Parallel()
	const n, delay = 16, 500 * time.Millisecond // delay is a bucket
	for _, qt := range []rabbitmq.QueueType{rabbitmq.Quorum, rabbitmq.Classic} {
		for _, sources := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/%d sources", qt, sources), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				e := open(t, qt)
				var logs logtest.Buffer
				cfg := e.cfg
				cfg.Prefetch = n
				cfg.Logger = logs.Logger()
				got := make(chan broker.Delivery)
				for range sources {
					src, err := rabbitmq.NewSource(ctx, &cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = src.Close() })
					go func() {
						for {
							d, err := src.Next(ctx)
							if err != nil {
								return
							}
							got <- d
						}
					}()
				}
				receive := func(what string) broker.Delivery {
					t.Helper()
					select {
					case d := <-got:
						return d
					case <-time.After(10 * time.Second):
						t.Fatalf("no %s within 10 s", what)
						return nil
					}
				}
				for i := range n {
					publishID(t, e, fmt.Sprint("m-", i))
				}
				var ds []broker.Delivery
				for range n {
					ds = append(ds, receive("delivery"))
				}
				var mu sync.Mutex
				nacked := map[string]time.Time{}
				var wg sync.WaitGroup
				for _, d := range ds {
					wg.Go(func() {
						mu.Lock()
						nacked[d.Message().ID] = time.Now()
						mu.Unlock()
						if err := d.Nack(ctx, delay); err != nil {
							t.Errorf("Nack %s: %v", d.Message().ID, err)
						}
					})
				}
				wg.Wait()
				var early []string
				for range n {
					d := receive("retry")
					if waited := time.Since(nacked[d.Message().ID]); waited < delay {
						early = append(early, fmt.Sprintf("%s after %v", d.Message().ID, waited.Round(time.Millisecond)))
					}
					if err := d.Ack(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if warned := len(logs.Lines("delayed retry failed")); len(early) > 0 || warned > 0 {
					t.Fatalf("%d of %d retries came back before their %v delay (%s); %d delayed retries failed; log:\n%s",
						len(early), n, delay, strings.Join(early, ", "), warned, logs.String())
				}
			})
		}
	}
}

// When no delayed copy can be published (Config.NoDeclare, and the delay
// queue missing), Nack tries again, holding the delivery until the retry
// is due or ctx ends, and only then requeues it, with a warning: the
// retry comes late, never at once. A delay queue declared meanwhile takes
// the copy.
func TestDelayedRetryNoDelayQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		delay, ctx    time.Duration // ctx: Nack's timeout, 0 for none
		declare       time.Duration // when the test declares the delay queue, 0 for never
		least, before time.Duration // the retry comes back within [least, before)
		warnings      int
	}{
		{"held for its delay", 300 * time.Millisecond, 0, 0, 300 * time.Millisecond, 5 * time.Second, 1},
		{"held until ctx ends", 20 * time.Second, 400 * time.Millisecond, 0, 400 * time.Millisecond, 5 * time.Second, 1},
		// The 500 ms bucket, declared 150 ms into the Nack.
		{"the delay queue declared meanwhile", 300 * time.Millisecond, 0, 150 * time.Millisecond, 650 * time.Millisecond, 5 * time.Second, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := open(t, rabbitmq.Quorum)
			var logs logtest.Buffer
			cfg := e.cfg
			cfg.NoDeclare = true
			cfg.Logger = logs.Logger()
			src, err := rabbitmq.NewSource(context.Background(), &cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = src.Close() })
			publishID(t, e, "m")
			d := next(t, src, 5*time.Second)
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			start := time.Now()
			if tc.declare > 0 {
				declared := make(chan error, 1)
				time.AfterFunc(tc.declare, func() { declared <- declareDelayQueue(e, 500*time.Millisecond) })
				defer func() {
					if err := <-declared; err != nil {
						t.Error(err)
					}
				}()
			}
			if err := d.Nack(ctx, tc.delay); err != nil {
				t.Fatalf("Nack: %v", err)
			}
			d = next(t, src, 10*time.Second)
			waited := time.Since(start)
			if err := d.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
			warned := len(logs.Lines("delayed retry failed"))
			if waited < tc.least || waited >= tc.before || warned != tc.warnings {
				t.Fatalf("the retry came back after %v with %d warnings; want between %v and %v, and %d; log:\n%s",
					waited.Round(time.Millisecond), warned, tc.least, tc.before, tc.warnings, logs.String())
			}
		})
	}
}

// declareDelayQueue declares e's delay queue of bucket b as a user of
// Config.NoDeclare would.
func declareDelayQueue(e *env, b time.Duration) error {
	ch, err := e.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(rabbitmq.DelayQueue(e.queue, b), true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-message-ttl": b.Milliseconds(),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": e.queue,
	})
	return err
}
