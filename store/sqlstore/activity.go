package sqlstore

import (
	"context"

	"github.com/inboxkit/inbox/internal/storeinspect"
	"github.com/inboxkit/inbox/store"
)

var _ store.ActivityInspector = (*Driver)(nil)

// Throughput counts the inbox rows per consumer and minute since p.Since.
func (d *Driver) Throughput(ctx context.Context, p *store.ThroughputParams) ([]*store.ThroughputBucket, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.Throughput, storeinspect.ThroughputArgs(p), storeinspect.ScanBucket)
	if err != nil {
		return nil, d.fail("throughput", err)
	}
	return out, nil
}

// Retrying counts the messages being retried, per consumer.
func (d *Driver) Retrying(ctx context.Context, consumer []byte) ([]*store.RetryingStats, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.Retrying, storeinspect.RetryingArgs(consumer), storeinspect.ScanRetrying)
	if err != nil {
		return nil, d.fail("retrying", err)
	}
	return out, nil
}

// RetryingList lists the messages being retried.
func (d *Driver) RetryingList(ctx context.Context, p *store.RetryingListParams) ([]*store.RetryingMessage, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.RetryingList, storeinspect.RetryingListArgs(p), storeinspect.ScanRetryingMessage)
	if err != nil {
		return nil, d.fail("retrying list", err)
	}
	return out, nil
}

// Consumers lists the consumers with their counts of dead letters.
func (d *Driver) Consumers(ctx context.Context) ([]*store.ConsumerCount, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.Consumers, nil, storeinspect.ScanConsumerCount)
	if err != nil {
		return nil, d.fail("consumers", err)
	}
	return out, nil
}
