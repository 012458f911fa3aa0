package sqlstore

import (
	"context"
	"database/sql"

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
	var out []*store.ThroughputBucket
	err = d.each(ctx, q.Throughput, storeinspect.ThroughputArgs(p), func(rows *sql.Rows) error {
		b, err := storeinspect.ScanBucket(rows.Scan)
		out = append(out, b)
		return err
	})
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
	var out []*store.RetryingStats
	err = d.each(ctx, q.Retrying, storeinspect.RetryingArgs(consumer), func(rows *sql.Rows) error {
		r, err := storeinspect.ScanRetrying(rows.Scan)
		out = append(out, r)
		return err
	})
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
	var out []*store.RetryingMessage
	err = d.each(ctx, q.RetryingList, storeinspect.RetryingListArgs(p), func(rows *sql.Rows) error {
		m, err := storeinspect.ScanRetryingMessage(rows.Scan)
		out = append(out, m)
		return err
	})
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
	var out []*store.ConsumerCount
	err = d.each(ctx, q.Consumers, nil, func(rows *sql.Rows) error {
		c, err := storeinspect.ScanConsumerCount(rows.Scan)
		out = append(out, c)
		return err
	})
	if err != nil {
		return nil, d.fail("consumers", err)
	}
	return out, nil
}
