package pgxstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/internal/storeinspect"
	"github.com/inboxkit/inbox/store"
)

var _ store.ActivityInspector = (*Driver)(nil)

// Throughput counts the inbox rows per consumer and minute since p.Since.
func (d *Driver) Throughput(ctx context.Context, p *store.ThroughputParams) ([]*store.ThroughputBucket, error) {
	var out []*store.ThroughputBucket
	err := d.each(ctx, d.inspect().Throughput, storeinspect.ThroughputArgs(p), func(row pgx.Row) error {
		b, err := storeinspect.ScanBucket(row.Scan)
		out = append(out, b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: throughput: %w", pgsql.Classify(err))
	}
	return out, nil
}

// Retrying counts the messages being retried, per consumer.
func (d *Driver) Retrying(ctx context.Context, consumer []byte) ([]*store.RetryingStats, error) {
	var out []*store.RetryingStats
	err := d.each(ctx, d.inspect().Retrying, storeinspect.RetryingArgs(consumer), func(row pgx.Row) error {
		r, err := storeinspect.ScanRetrying(row.Scan)
		out = append(out, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: retrying: %w", pgsql.Classify(err))
	}
	return out, nil
}

// RetryingList lists the messages being retried.
func (d *Driver) RetryingList(ctx context.Context, p *store.RetryingListParams) ([]*store.RetryingMessage, error) {
	var out []*store.RetryingMessage
	err := d.each(ctx, d.inspect().RetryingList, storeinspect.RetryingListArgs(p), func(row pgx.Row) error {
		m, err := storeinspect.ScanRetryingMessage(row.Scan)
		out = append(out, m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: retrying list: %w", pgsql.Classify(err))
	}
	return out, nil
}

// Consumers lists the consumers with their counts of dead letters.
func (d *Driver) Consumers(ctx context.Context) ([]*store.ConsumerCount, error) {
	var out []*store.ConsumerCount
	err := d.each(ctx, d.inspect().Consumers, nil, func(row pgx.Row) error {
		c, err := storeinspect.ScanConsumerCount(row.Scan)
		out = append(out, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: consumers: %w", pgsql.Classify(err))
	}
	return out, nil
}
