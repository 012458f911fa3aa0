package pgxstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// closedTx stands in for a transaction that endWith ended: pgx's own does
// not know it ended, and would send statements on a connection that is
// back in the pool, maybe in another request's hands. Every method fails
// with pgx.ErrTxClosed, as pgx's does after Commit.
type closedTx struct{}

var _ pgx.Tx = closedTx{}

func (closedTx) Begin(context.Context) (pgx.Tx, error) { return nil, pgx.ErrTxClosed }
func (closedTx) Commit(context.Context) error          { return pgx.ErrTxClosed }
func (closedTx) Rollback(context.Context) error        { return pgx.ErrTxClosed }
func (closedTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, pgx.ErrTxClosed
}
func (closedTx) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults { return closedBatch{} }
func (closedTx) LargeObjects() pgx.LargeObjects                         { return pgx.LargeObjects{} }
func (closedTx) Prepare(context.Context, string, string) (*pgconn.StatementDescription, error) {
	return nil, pgx.ErrTxClosed
}
func (closedTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, pgx.ErrTxClosed
}
func (closedTx) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, pgx.ErrTxClosed }
func (closedTx) QueryRow(context.Context, string, ...any) pgx.Row        { return closedRow{} }
func (closedTx) Conn() *pgx.Conn                                         { return nil }

type closedRow struct{}

func (closedRow) Scan(...any) error { return pgx.ErrTxClosed }

type closedBatch struct{}

func (closedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, pgx.ErrTxClosed }
func (closedBatch) Query() (pgx.Rows, error)         { return nil, pgx.ErrTxClosed }
func (closedBatch) QueryRow() pgx.Row                { return closedRow{} }
func (closedBatch) Close() error                     { return pgx.ErrTxClosed }
func (closedBatch) Tx() pgx.Tx                       { return closedTx{} }
