package pgxstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/internal/storeinspect"
	"github.com/inboxkit/inbox/store"
)

var _ store.OutboxInspector = (*Driver)(nil)

// outboxInspect returns the statements of store.OutboxInspector on the
// driver's outbox table (an operator's call: rendered each time).
func (d *Driver) outboxInspect() pgsql.OutboxInspect { return pgsql.OutboxInspectOf(d.q.Tables) }

// OutboxStats counts the outbox's rows per state in one statement.
func (d *Driver) OutboxStats(ctx context.Context) (*store.OutboxStats, error) {
	s, err := storeinspect.ScanOutboxStats(d.pool.QueryRow(ctx, d.outboxInspect().Stats).Scan)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: outbox stats: %w", pgsql.Classify(err))
	}
	return s, nil
}

// OutboxSearch lists unpublished outbox rows that match p, without
// payloads.
func (d *Driver) OutboxSearch(ctx context.Context, p *store.OutboxSearchParams) ([]*store.OutboxInfo, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("pgxstore: search outbox: %w", err)
	}
	q := d.outboxInspect()
	query := q.Search
	if len(p.MessageID) > 0 {
		query = q.SearchByID
	}
	out, err := collect(ctx, d, query, storeinspect.OutboxSearchArgs(p), storeinspect.ScanOutboxInfo)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: search outbox: %w", pgsql.Classify(err))
	}
	return out, nil
}

// OutboxGet returns outbox row seq, payload included.
func (d *Driver) OutboxGet(ctx context.Context, seq int64) (*store.OutboxInfo, error) {
	info, err := storeinspect.ScanOutboxInfo(d.pool.QueryRow(ctx, d.outboxInspect().Get, seq).Scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgxstore: outbox row %d: %w", seq, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgxstore: outbox row %d: %w", seq, pgsql.Classify(err))
	}
	return info, nil
}
