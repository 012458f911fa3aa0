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

var _ store.Inspector[*sql.Tx] = (*Driver)(nil)

// ErrNoInspector is wrapped by the errors of the store.Inspector methods
// on a dialect without its statements.
var ErrNoInspector = errors.New("sqlstore: the dialect cannot inspect the tables")

// inspect returns the dialect's statements of store.Inspector on the
// driver's tables (an operator's call, not a message's: rendered each
// time).
func (d *Driver) inspect() (sqldialect.InspectQueries, error) {
	in, ok := d.dialect.(sqldialect.Inspector)
	if !ok {
		return sqldialect.InspectQueries{}, fmt.Errorf("%w (%s)", ErrNoInspector, d.dialect.Name())
	}
	return sqldialect.RenderInspect(in.InspectTemplates(), d.tables, d.dialect.Quote), nil
}

// Stats counts the rows of each consumer in the three tables.
func (d *Driver) Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	stats, err := storeinspect.Stats(p, storeinspect.StatsStatements{Inbox: q.StatsInbox, DeadLetters: q.StatsDeadLetters,
		Attempts: q.StatsAttempts, Errors: q.StatsErrors}, func(query string, args []any, fn func(func(...any) error) error) error {
		return d.each(ctx, query, args, func(rows *sql.Rows) error { return fn(rows.Scan) })
	})
	return stats, d.fail("stats", err)
}

// each runs query outside a transaction and calls fn for each row.
func (d *Driver) each(ctx context.Context, query string, args []any, fn func(*sql.Rows) error) error {
	rows, err := d.db.QueryContext(ctx, query, args...)
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
	err := d.each(ctx, query, args, func(rows *sql.Rows) error {
		v, err := scan(rows.Scan)
		out = append(out, v)
		return err
	})
	return out, err
}

// DeadLetterSearch lists dead letters of any consumer, without payloads.
func (d *Driver) DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.DeadLetterSearch, storeinspect.SearchArgs(p), storeinspect.ScanInfo)
	if err != nil {
		return nil, d.fail("search dead letters", err)
	}
	return out, nil
}

// DeadLetterGroups counts dead letters per error group.
func (d *Driver) DeadLetterGroups(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterGroup, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	out, err := collect(ctx, d, q.DeadLetterGroups, storeinspect.GroupArgs(p), storeinspect.ScanGroup)
	if err != nil {
		return nil, d.fail("dead letter groups", err)
	}
	return out, nil
}

// fillGroups fills in the error group of the rows written before the
// stores recorded it (internal/storeinspect's FillGroups).
func (d *Driver) fillGroups(ctx context.Context) (int64, error) {
	q, err := d.inspect()
	if err != nil {
		return 0, err
	}
	dead, err := storeinspect.FillGroups(ctx, storeinspect.GroupFiller{
		Next: func(ctx context.Context, limit int) (out []storeinspect.Ungrouped, err error) {
			err = d.each(ctx, q.Ungrouped, []any{limit}, func(rows *sql.Rows) error {
				var u storeinspect.Ungrouped
				err := rows.Scan(&u.ID, &u.Error)
				out = append(out, u)
				return err
			})
			return out, err
		},
		Set: func(ctx context.Context, u storeinspect.Ungrouped, group string) error {
			_, err := d.db.ExecContext(ctx, q.SetGroup, group, u.ID)
			return err
		},
	})
	if err != nil {
		return dead, d.fail("filling in the dead letters' error groups", err)
	}
	attempts, err := storeinspect.FillGroups(ctx, storeinspect.GroupFiller{
		Next: func(ctx context.Context, limit int) (out []storeinspect.Ungrouped, err error) {
			err = d.each(ctx, q.UngroupedAttempts, []any{limit}, func(rows *sql.Rows) error {
				var u storeinspect.Ungrouped
				err := rows.Scan(&u.Consumer, &u.MessageID, &u.Error)
				out = append(out, u)
				return err
			})
			return out, err
		},
		Set: func(ctx context.Context, u storeinspect.Ungrouped, group string) error {
			_, err := d.db.ExecContext(ctx, q.SetAttemptGroup, group, u.Consumer, u.MessageID, u.Error)
			return err
		},
	})
	return dead + attempts, d.fail("filling in the attempts' error groups", err)
}

// DeadLetterGet returns a dead letter and what the other tables hold of
// its message.
func (d *Driver) DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, err
	}
	det, err := storeinspect.ScanDetail(d.db.QueryRowContext(ctx, q.DeadLetterDetail, id).Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: dead letter %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, d.fail(fmt.Sprintf("dead letter %d", id), err)
	}
	return det, nil
}

// DeadLetterDiscard deletes dead letters by ID, one statement each, in
// one transaction.
func (d *Driver) DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error) {
	q, err := d.inspect()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	tx, err := d.Begin(ctx, &store.BeginParams{LockTimeout: store.DefaultLockTimeout})
	if err != nil {
		return nil, err
	}
	defer d.rollbackQuietly(tx)
	var deleted []int64
	for _, id := range ids {
		r, err := tx.ExecContext(ctx, q.DeadLetterDeleteID, id)
		if err != nil {
			return nil, d.fail("discard dead letters", err)
		}
		if n, err := r.RowsAffected(); err != nil {
			return nil, d.fail("discard dead letters", err)
		} else if n > 0 {
			deleted = append(deleted, id)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, d.fail("discard dead letters: commit", err)
	}
	return storeinspect.InOrder(ids, deleted), nil
}

// DeadLetterRelease takes dead letter id and releases its message's dead
// inbox row and attempts in tx.
func (d *Driver) DeadLetterRelease(ctx context.Context, tx *sql.Tx, id int64) (*store.DeadLetter, bool, error) {
	q, err := d.inspect()
	if err != nil {
		return nil, false, err
	}
	op := fmt.Sprintf("release dead letter %d", id)
	take := q.DeadLetterTakeID
	if take == "" {
		take = q.DeadLetterLockID
	}
	dl, err := scanDeadLetter(tx.QueryRowContext(ctx, take, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, fmt.Errorf("sqlstore: %s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return nil, false, d.fail(op, err)
	}
	if q.DeadLetterTakeID == "" {
		if _, err := tx.ExecContext(ctx, q.DeadLetterDeleteID, id); err != nil {
			return nil, false, d.fail(op, err)
		}
	}
	if q.Release != "" {
		var live bool
		if err := tx.QueryRowContext(ctx, q.Release, dl.Key.Consumer, dl.Key.MessageID).Scan(&live); err != nil {
			return nil, false, d.fail(op, err)
		}
		return dl, live, nil
	}
	if _, err := tx.ExecContext(ctx, q.ReleaseDead, dl.Key.Consumer, dl.Key.MessageID); err != nil {
		return nil, false, d.fail(op, err)
	}
	if _, err := tx.ExecContext(ctx, d.q.AttemptsDelete, dl.Key.Consumer, dl.Key.MessageID); err != nil {
		return nil, false, d.fail(op, err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, q.LiveRow, dl.Key.Consumer, dl.Key.MessageID).Scan(&n); err != nil {
		return nil, false, d.fail(op, err)
	}
	return dl, n > 0, nil
}
