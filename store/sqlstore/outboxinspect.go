package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/inboxkit/inbox/internal/storeinspect"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ store.OutboxInspector = (*Driver)(nil)

// outboxInspect returns the dialect's statements of
// store.OutboxInspector on the driver's outbox table (an operator's call:
// rendered each time). A dialect without them is an error wrapping
// ErrNoInspector.
func (d *Driver) outboxInspect() (sqldialect.OutboxInspectQueries, error) {
	in, ok := d.dialect.(sqldialect.OutboxInspector)
	if !ok {
		return sqldialect.OutboxInspectQueries{}, fmt.Errorf("%w (%s: outbox)", ErrNoInspector, d.dialect.Name())
	}
	return sqldialect.RenderOutboxInspect(in.OutboxInspectTemplates(), d.tables, d.dialect.Quote), nil
}

// OutboxStats counts the outbox's rows per state in one statement,
// outside any transaction.
func (d *Driver) OutboxStats(ctx context.Context) (*store.OutboxStats, error) {
	q, err := d.outboxInspect()
	if err != nil {
		return nil, err
	}
	s, err := storeinspect.ScanOutboxStats(d.db.QueryRowContext(ctx, q.Stats).Scan)
	if err != nil {
		return nil, d.fail("outbox stats", err)
	}
	return s, nil
}

// OutboxSearch lists unpublished outbox rows that match p, without
// payloads, outside any transaction.
func (d *Driver) OutboxSearch(ctx context.Context, p *store.OutboxSearchParams) ([]*store.OutboxInfo, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("sqlstore: search outbox: %w", err)
	}
	q, err := d.outboxInspect()
	if err != nil {
		return nil, err
	}
	query := q.Search
	if len(p.MessageID) > 0 {
		query = q.SearchByID
	}
	out, err := collect(ctx, d, query, storeinspect.OutboxSearchArgs(p), storeinspect.ScanOutboxInfo)
	if err != nil {
		return nil, d.fail("search outbox", err)
	}
	return out, nil
}

// OutboxGet returns outbox row seq, payload included, outside any
// transaction.
func (d *Driver) OutboxGet(ctx context.Context, seq int64) (*store.OutboxInfo, error) {
	q, err := d.outboxInspect()
	if err != nil {
		return nil, err
	}
	info, err := storeinspect.ScanOutboxInfo(d.db.QueryRowContext(ctx, q.Get, seq).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: outbox row %d: %w", seq, store.ErrNotFound)
	}
	if err != nil {
		return nil, d.fail(fmt.Sprintf("outbox row %d", seq), err)
	}
	return info, nil
}
