package inbox

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/store"
)

// ConsumeQueued is [Consume] with a [QueuedHandler].
//
// Each delivery goes through [Inbox.ProcessQueued]. Its claim, its queued
// statements and the COMMIT take one round trip to the database.
//
// Outcomes, acks, leases and shutdown are those of Consume. A delivery is
// acked only after its COMMIT. A Retry is nacked with its delay.
//
// The handler has no transaction. It must not read what its statements
// depend on. It must not write anywhere but through its [Queue]. The
// statements run after it returns. It also runs for a duplicate, whose
// statements then apply nothing.
//
// One round trip carries one message. A [ConsumerConfig.BatchSize] above 1
// is an error wrapping [ErrInvalidConfig]. So is a nil ib, src or h. So is a
// store that is not a store.QueuedClaimer, and that error also wraps
// [ErrNoQueued]. Only pgxstore is one. These errors come before anything starts.
func ConsumeQueued[TTx any](ctx context.Context, ib *Inbox[TTx], src broker.Source, h QueuedHandler, cfg *ConsumerConfig) error {
	if err := checkQueued(ib, src, h, cfg); err != nil {
		return err
	}
	cs, err := newConsuming(ctx, ib, src, cfg, 1)
	if err != nil {
		return err
	}
	process := func(ctx context.Context, msg Message) (Outcome, error) { return ib.ProcessQueued(ctx, msg, h) }
	return cs.run(ctx, func(ctx context.Context, ds []broker.Delivery) error {
		var uerr error
		for _, d := range ds { // one, as BatchSize is 1
			if err := cs.deliver(ctx, d, process); err != nil && uerr == nil {
				uerr = err
			}
		}
		return uerr
	})
}

// checkQueued rejects what ConsumeQueued cannot run, before it starts.
func checkQueued[TTx any](ib *Inbox[TTx], src broker.Source, h QueuedHandler, cfg *ConsumerConfig) error {
	if err := checkArgs(ib, h); err != nil {
		return err
	}
	if isNil(src) {
		return fmt.Errorf("%w: nil source (%T)", ErrInvalidConfig, src)
	}
	if _, ok := ib.driver.(store.QueuedClaimer); !ok {
		return fmt.Errorf("%w: ConsumeQueued: %w (%T)", ErrInvalidConfig, ErrNoQueued, ib.driver)
	}
	if cfg != nil && cfg.BatchSize > 1 {
		return fmt.Errorf("%w: ConsumeQueued processes one message per round trip: ConsumerConfig.BatchSize %d, want 0 or 1",
			ErrInvalidConfig, cfg.BatchSize)
	}
	return nil
}
