package pgxstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

var _ store.QueuedClaimer = (*Driver)(nil)

// ClaimAndRun sends the claim, stmts and the implicit COMMIT as one pgx
// batch. That is one round trip and one implicit transaction, so a failure
// anywhere applies nothing. The first time a connection sees a statement,
// one more round trip prepares it.
func (d *Driver) ClaimAndRun(ctx context.Context, p *store.ClaimParams, stmts []store.Statement) (*store.ClaimResult, error) {
	c, err := d.acquire(ctx, p.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	b := &pgx.Batch{}
	if d.perTx { // the lock timeout for this implicit transaction alone
		b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(p.LockTimeout))
	}
	b.Queue(d.q.ClaimPlain, p.Consumer, p.MessageID, p.Type, p.Fingerprint)
	for _, s := range stmts {
		b.Queue(s.SQL, s.Args...)
	}
	br := c.SendBatch(ctx, b)
	if d.perTx {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			// A statement the server refused to prepare shows here, first.
			if i, perr := badStatement(ctx, c.Conn().PgConn(), stmts); perr != nil {
				return nil, &store.StatementError{Index: i, Err: perr}
			}
			return nil, pgsql.Classify(err)
		}
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // the claim's key: a duplicate
			res := &store.ClaimResult{}
			err := c.QueryRow(ctx, d.q.ClaimLookup, p.Consumer, p.MessageID).Scan(&res.Fingerprint, &res.Type)
			if errors.Is(err, pgx.ErrNoRows) { // the holder rolled back meanwhile: redeliver
				return nil, store.Retryable(errors.New("pgxstore: the conflicting claim is gone"))
			}
			return res, pgsql.Classify(err)
		}
		// pgx prepares the batch's new statements before sending it, and
		// reports a statement the server refuses to prepare (a syntax
		// error, an unknown column) here, at the first result: find it.
		if i, perr := badStatement(ctx, c.Conn().PgConn(), stmts); perr != nil {
			return nil, &store.StatementError{Index: i, Err: perr}
		}
		return nil, pgsql.Classify(err)
	}
	for i := range stmts {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			if pgsql.Classify(err) != err && !isPgError(err) { // the connection broke: outcome unknown
				return nil, pgsql.Classify(err)
			}
			return nil, &store.StatementError{Index: i, Err: err}
		}
	}
	if err := br.Close(); err != nil { // the implicit COMMIT
		return nil, pgsql.Classify(err)
	}
	return &store.ClaimResult{Claimed: true}, nil
}

func isPgError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// badStatement prepares each of stmts as the unnamed statement (no cache
// kept) and returns the first the server refuses, with its error.
func badStatement(ctx context.Context, pc *pgconn.PgConn, stmts []store.Statement) (int, error) {
	for i, s := range stmts {
		if _, err := pc.Prepare(ctx, "", s.SQL, nil); err != nil {
			if isPgError(err) {
				return i, err
			}
			return -1, nil // the connection failed: not the statement's fault
		}
	}
	return -1, nil
}
