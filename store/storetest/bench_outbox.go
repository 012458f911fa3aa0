package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inbox/outbox"
)

// BenchOutbox measures the outbox's Write inside a business transaction,
// with 1 and 8 goroutines. It runs side by side with the same transaction
// without Write, the baseline. When the harness has [BenchEnv.HandWrite],
// it also runs a hand-written INSERT of the message into an equivalent
// table, the handwritten case. Each sub-benchmark reports msgs/s. Compare outbox with
// handwritten and baseline at the same goroutine count.
func BenchOutbox[TTx any](b *testing.B, h BenchHarness[TTx]) {
	bench := openBench(b, h)
	env := bench.Env
	ctx := context.Background()
	ob := newOutbox(b, env)
	var seq atomic.Int64 // every message a new ID, across runs
	payload := []byte(`{"order":"o-123","amount":1000,"currency":"EUR"}`)
	tx := func(name string, extra func(ctx context.Context, tx TTx, id string) error) func(int64) error {
		return func(int64) error {
			id := fmt.Sprintf("%s-%d", name, seq.Add(1))
			tx, err := env.BeginPlain(ctx)
			if err != nil {
				return err
			}
			err = env.Write(ctx, tx, id)
			if err == nil && extra != nil {
				err = extra(ctx, tx, id)
			}
			if err != nil {
				_ = env.Driver.Rollback(ctx, tx)
				return err
			}
			return env.Driver.Commit(ctx, tx)
		}
	}
	paths := []struct {
		name string
		fn   func(int64) error
	}{
		{"baseline", tx("b", nil)},
		{"outbox", tx("o", func(ctx context.Context, tx TTx, id string) error {
			return ob.Write(ctx, tx, &outbox.Message{ID: id, Destination: "orders.placed", Type: "OrderPlaced", Payload: payload})
		})},
	}
	if bench.HandWrite != nil {
		paths = append(paths, struct {
			name string
			fn   func(int64) error
		}{"handwritten", tx("h", func(ctx context.Context, tx TTx, id string) error {
			return bench.HandWrite(ctx, tx, id, payload)
		})})
	}
	retry := retryer(env)
	for _, p := range paths { // warm up every path's connections
		for i := range 50 {
			if err := retrying(retry, p.fn, int64(-1-i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, g := range []int{1, 8} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("%s/goroutines=%d", p.name, g), func(b *testing.B) {
				if bench.Settle != nil {
					if err := bench.Settle(ctx); err != nil {
						b.Fatal(err)
					}
				}
				parallel(b, g, retry, p.fn)
			})
		}
	}
}
