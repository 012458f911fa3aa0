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
	sc := storeinspect.NewStats()
	consumer := nilIfEmpty(p.Consumer)
	err := d.each(ctx, q.StatsInbox, []any{consumer}, func(row pgx.Row) error {
		var c []byte
		var oldest, newest int64
		var n, dead int64
		if err := row.Scan(&c, &n, &dead, &oldest, &newest); err != nil {
			return err
		}
		sc.Inbox(c, n, dead, oldest, newest)
		return nil
	})
	if err == nil {
		err = d.each(ctx, q.StatsDeadLetters, []any{consumer}, func(row pgx.Row) error {
			var c []byte
			var n, oldest, newest int64
			if err := row.Scan(&c, &n, &oldest, &newest); err != nil {
				return err
			}
			sc.DeadLetters(c, n, oldest, newest)
			return nil
		})
	}
	if err == nil {
		err = d.each(ctx, q.StatsAttempts, []any{consumer}, func(row pgx.Row) error {
			var c []byte
			var n, attempts, transient int64
			if err := row.Scan(&c, &n, &attempts, &transient); err != nil {
				return err
			}
			sc.Attempts(c, n, attempts, transient)
			return nil
		})
	}
	if err == nil && p.TopErrors > 0 {
		err = d.each(ctx, q.StatsErrors, []any{consumer, max(p.ErrorChars, 1), p.TopErrors}, func(row pgx.Row) error {
			var c []byte
			var e string
			var n int64
			if err := row.Scan(&c, &e, &n); err != nil {
				return err
			}
			sc.Error(c, e, n)
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("pgxstore: stats: %w", pgsql.Classify(err))
	}
	return sc.Result(), nil
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

// DeadLetterSearch lists dead letters of any consumer, without payloads.
func (d *Driver) DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error) {
	args := storeinspect.SearchArgs(p)
	var out []*store.DeadLetterInfo
	err := d.each(ctx, d.inspect().DeadLetterSearch, args, func(row pgx.Row) error {
		info := &store.DeadLetterInfo{}
		var failedAt int64
		dl := &info.DeadLetter
		if err := row.Scan(&dl.ID, &dl.Key.Consumer, &dl.Key.MessageID, &dl.Type, &dl.Payload, &dl.Headers,
			&dl.Error, &dl.Attempts, &failedAt, &info.PayloadSize); err != nil {
			return err
		}
		dl.FailedAt = storeinspect.UnixMilli(failedAt)
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgxstore: search dead letters: %w", pgsql.Classify(err))
	}
	return out, nil
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

// DeadLetterDiscard deletes dead letters by ID in one statement.
func (d *Driver) DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, _ := d.pool.Query(ctx, d.inspect().DeadLetterDiscard, ids)
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
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

// nilIfEmpty binds an empty byte slice as NULL.
func nilIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
