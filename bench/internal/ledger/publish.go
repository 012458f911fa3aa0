package ledger

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// publishers publish a workload's messages at once, so that publishing
// takes a fraction of the measurement's set-up.
const publishers = 16

// Publish calls pub for every message of w, from 16 goroutines, and
// returns their errors. A goroutine stops at its first error, and all
// stop when ctx ends.
func (w *Workload) Publish(ctx context.Context, pub func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, publishers)
	for g := range publishers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(w.IDs) || ctx.Err() != nil {
					return
				}
				if err := pub(ctx, i); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
