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

var _ store.Inspector[pgx.Tx] = (*Driver)(nil)

// inspect returns the statements of store.Inspector on the driver's
// tables (a few string concatenations: an operator's call, not a
// message's).
func (d *Driver) inspect() pgsql.Inspect { return pgsql.InspectOf(d.q.Tables) }

// Stats counts the rows of each consumer in the three tables.
func (d *Driver) Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error) {
	q := d.inspect()
	stats, err := storeinspect.Stats(p, storeinspect.StatsStatements{Inbox: q.StatsInbox, DeadLetters: q.StatsDeadLetters,
		Attempts: q.StatsAttempts, Errors: q.StatsErrors}, func(query string, args []any, fn func(func(...any) error) error) error {
		return d.each(ctx, query, args, func(row pgx.Row) error { return fn(row.Scan) })
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: stats: %w", pgsql.Classify(err))
	}
	return stats, nil
}

// each runs query and calls fn for each row.
func (d *Driver) each(ctx context.Context, query string, args []any, fn func(pgx.Row) error) error {
	rows, err := d.pool.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// collect runs query and scans each row with scan, in order.
func collect[T any](ctx context.Context, d *Driver, query string, args []any, scan func(func(...any) error) (T, error)) ([]T, error) {
	var out []T
	err := d.each(ctx, query, args, func(row pgx.Row) error {
		v, err := scan(row.Scan)
		out = append(out, v)
		return err
	})
	return out, err
}

// DeadLetterSearch lists dead letters of any consumer, without payloads.
func (d *Driver) DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error) {
	args := storeinspect.SearchArgs(p)
	out, err := collect(ctx, d, d.inspect().DeadLetterSearch, args, storeinspect.ScanInfo)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: search dead letters: %w", pgsql.Classify(err))
	}
	return out, nil
}

// DeadLetterGroups counts dead letters per error group.
func (d *Driver) DeadLetterGroups(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterGroup, error) {
	out, err := collect(ctx, d, d.inspect().DeadLetterGroups, storeinspect.GroupArgs(p), storeinspect.ScanGroup)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: dead letter groups: %w", pgsql.Classify(err))
	}
	return out, nil
}

// fillGroups fills in the error group of the rows written before the
// stores recorded it (internal/storeinspect's FillGroups).
func (d *Driver) fillGroups(ctx context.Context) (int64, error) {
	q := d.inspect()
	dead, err := storeinspect.FillGroups(ctx, storeinspect.GroupFiller{
		Next: func(ctx context.Context, limit int) ([]storeinspect.Ungrouped, error) {
			rows, _ := d.pool.Query(ctx, q.Ungrouped, limit)
			return pgx.CollectRows(rows, func(row pgx.CollectableRow) (u storeinspect.Ungrouped, err error) {
				return u, row.Scan(&u.ID, &u.Error)
			})
		},
		Set: func(ctx context.Context, u storeinspect.Ungrouped, group string) error {
			_, err := d.pool.Exec(ctx, q.SetGroup, group, u.ID)
			return err
		},
	})
	if err != nil {
		return dead, fmt.Errorf("pgxstore: filling in the dead letters' error groups: %w", pgsql.Classify(err))
	}
	attempts, err := storeinspect.FillGroups(ctx, storeinspect.GroupFiller{
		Next: func(ctx context.Context, limit int) ([]storeinspect.Ungrouped, error) {
			rows, _ := d.pool.Query(ctx, q.UngroupedAttempts, limit)
			return pgx.CollectRows(rows, func(row pgx.CollectableRow) (u storeinspect.Ungrouped, err error) {
				return u, row.Scan(&u.Consumer, &u.MessageID, &u.Error)
			})
		},
		Set: func(ctx context.Context, u storeinspect.Ungrouped, group string) error {
			_, err := d.pool.Exec(ctx, q.SetAttemptGroup, group, u.Consumer, u.MessageID, u.Error)
			return err
		},
	})
	if err != nil {
		err = fmt.Errorf("pgxstore: filling in the attempts' error groups: %w", pgsql.Classify(err))
	}
	return dead + attempts, err
}

// DeadLetterGet returns a dead letter and what the other tables hold of
// its message.
func (d *Driver) DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error) {
	det, err := storeinspect.ScanDetail(d.pool.QueryRow(ctx, d.inspect().DeadLetterDetail, id).Scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgxstore: dead letter %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgxstore: dead letter %d: %w", id, pgsql.Classify(err))
	}
	return det, nil
}

// DeadLetterDiscard deletes dead letters by ID in one statement. It waits
// up to store.DefaultLockTimeout for a row another transaction holds, as a
// replay's release does.
func (d *Driver) DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var deleted []int64
	err := d.inTx(ctx, store.DefaultLockTimeout, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, d.inspect().DeadLetterDiscard, ids)
		var err error
		deleted, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: discard dead letters: %w", pgsql.Classify(err))
	}
	return storeinspect.InOrder(ids, deleted), nil
}

// DeadLetterRelease takes dead letter id and releases its message's dead
// inbox row and attempts in tx, in two statements.
func (d *Driver) DeadLetterRelease(ctx context.Context, tx pgx.Tx, id int64) (*store.DeadLetter, bool, error) {
	q := d.inspect()
	dl, err := scanDeadLetter(tx.QueryRow(ctx, q.DeadLetterTakeID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("pgxstore: release dead letter %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, false, fmt.Errorf("pgxstore: release dead letter %d: %w", id, pgsql.Classify(err))
	}
	var live bool
	if err := tx.QueryRow(ctx, q.Release, dl.Key.Consumer, dl.Key.MessageID).Scan(&live); err != nil {
		return nil, false, fmt.Errorf("pgxstore: release dead letter %d: %w", id, pgsql.Classify(err))
	}
	return dl, live, nil
}
