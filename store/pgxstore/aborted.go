package pgxstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inbox/internal/pgsql"
)

// A connTx keeps the last error PostgreSQL gave a statement of the
// handler's, so that a transaction it aborted can say why.

func (t *connTx) keep(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !pgsql.InAborted(err) {
		t.failed = err
	}
}

func (t *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	if err != nil {
		t.keep(err)
	}
	return tag, err
}

func (t *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		t.keep(err)
		return rows, err
	}
	return &keptRows{Rows: rows, t: t}, nil
}

func (t *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return keptRow{row: t.Tx.QueryRow(ctx, sql, args...), t: t}
}

func (t *connTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.Tx.CopyFrom(ctx, table, columns, src)
	if err != nil {
		t.keep(err)
	}
	return n, err
}

// keptRows keeps the error of its query, which comes when its rows do.
type keptRows struct {
	pgx.Rows
	t *connTx
}

func (r *keptRows) Close() {
	r.Rows.Close()
	if err := r.Rows.Err(); err != nil {
		r.t.keep(err)
	}
}

func (r *keptRows) Err() error {
	err := r.Rows.Err()
	if err != nil {
		r.t.keep(err)
	}
	return err
}

type keptRow struct {
	row pgx.Row
	t   *connTx
}

func (r keptRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if err != nil {
		r.t.keep(err)
	}
	return err
}

// aborted is the error for tx, which PostgreSQL aborted: with the failed
// statement's error when tx is one of the driver's own and saw it.
func aborted(tx pgx.Tx, committing bool, err error) error {
	e := &pgsql.AbortedError{Committing: committing, Err: err}
	if ct, ok := tx.(*connTx); ok {
		e.Cause = ct.failed
	}
	return e
}
