package pgxstore

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/internal/storeinspect"
	"github.com/inboxkit/inbox/store"
)

var _ store.ActivityInspector = (*Driver)(nil)

// Throughput counts the inbox rows per consumer and minute since p.Since.
func (d *Driver) Throughput(ctx context.Context, p *store.ThroughputParams) ([]*store.ThroughputBucket, error) {
	out, err := collect(ctx, d, d.inspect().Throughput, storeinspect.ThroughputArgs(p), storeinspect.ScanBucket)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: throughput: %w", pgsql.Classify(err))
	}
	return out, nil
}

// Retrying counts the messages being retried, per consumer.
func (d *Driver) Retrying(ctx context.Context, consumer []byte) ([]*store.RetryingStats, error) {
	out, err := collect(ctx, d, d.inspect().Retrying, storeinspect.RetryingArgs(consumer), storeinspect.ScanRetrying)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: retrying: %w", pgsql.Classify(err))
	}
	return out, nil
}

// RetryingList lists the messages being retried.
func (d *Driver) RetryingList(ctx context.Context, p *store.RetryingListParams) ([]*store.RetryingMessage, error) {
	out, err := collect(ctx, d, d.inspect().RetryingList, storeinspect.RetryingListArgs(p), storeinspect.ScanRetryingMessage)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: retrying list: %w", pgsql.Classify(err))
	}
	return out, nil
}

// Consumers lists the consumers with their counts of dead letters.
func (d *Driver) Consumers(ctx context.Context) ([]*store.ConsumerCount, error) {
	out, err := collect(ctx, d, d.inspect().Consumers, nil, storeinspect.ScanConsumerCount)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: consumers: %w", pgsql.Classify(err))
	}
	return out, nil
}
