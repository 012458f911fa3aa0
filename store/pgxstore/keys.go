package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

var _ store.KeyStore[pgx.Tx] = (*Driver)(nil)

// KeyBegin sends BEGIN, the wait for a claim of the key in flight, the
// handler's lock timeout and the claim in one round trip. A key already
// stored costs one more, which reads it and rolls back.
func (d *Driver) KeyBegin(ctx context.Context, p *store.KeyClaimParams) (pgx.Tx, *store.KeyClaimResult, error) {
	c, err := d.acquire(ctx, p.LockTimeout)
	if err != nil {
		return nil, nil, err
	}
	res := &store.KeyClaimResult{}
	// A lock timeout is the key's only between these two: not while pgx
	// prepares the statements (which locks the table), nor in the insert.
	began, locked := false, false
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(p.LockTimeout)).Exec(func(pgconn.CommandTag) error {
		began = true
		return nil
	})
	b.Queue(d.q.KeyLock, p.Scope, p.Key, pgsql.LockTimeout(p.Wait)).Exec(func(pgconn.CommandTag) error {
		locked = true
		return nil
	})
	b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(p.LockTimeout))
	b.Queue(d.q.KeyClaim, p.Scope, p.Key, []byte(p.Method), []byte(p.Route), p.Fingerprint).
		Exec(func(tag pgconn.CommandTag) error {
			res.Claimed = tag.RowsAffected() == 1
			return nil
		})
	br := c.SendBatch(ctx, b)
	tx := &connTx{Tx: br.Tx(), conn: c}
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		if began && !locked && pgsql.LockNotAvailable(err) {
			return nil, nil, fmt.Errorf("pgxstore: %w: %w", store.ErrKeyInUse, err)
		}
		return nil, nil, pgsql.Classify(err)
	}
	if res.Claimed {
		return tx, res, nil
	}
	b = &pgx.Batch{}
	b.Queue(d.q.KeyLookup, p.Scope, p.Key).QueryRow(func(row pgx.Row) error {
		s, err := scanStoredKey(row)
		if errors.Is(err, pgx.ErrNoRows) { // pruned meanwhile
			return nil
		}
		res.Stored = s
		return err
	})
	b.Queue("ROLLBACK")
	return nil, res, tx.endWith(ctx, b)
}

func scanStoredKey(row pgx.Row) (*store.StoredKey, error) {
	s := &store.StoredKey{}
	var created int64
	if err := row.Scan(&s.Fingerprint, &s.Response.Status, &s.Response.Header, &s.Response.Body, &created); err != nil {
		return nil, err
	}
	s.CreatedAt = time.UnixMilli(created)
	return s, nil
}

// KeyCommit sends the response's write and COMMIT in one round trip.
func (d *Driver) KeyCommit(ctx context.Context, tx pgx.Tx, p *store.KeyCommitParams) error {
	if err := d.CheckTx(ctx, tx, ""); err != nil {
		return err
	}
	ct, ok := tx.(*connTx)
	if !ok {
		return errors.New("pgxstore: KeyCommit takes a transaction of KeyBegin")
	}
	if s := ct.Conn().PgConn().TxStatus(); s != 'T' { // a handler sent COMMIT or ROLLBACK itself
		return fmt.Errorf("pgxstore: the transaction block ended in the handler (status %q); the response was not stored: %w", s, store.ErrTxUnusable)
	}
	b := &pgx.Batch{}
	b.Queue(d.q.KeySaveClaimed, p.Scope, p.Key, p.Response.Status, p.Response.Header, p.Response.Body)
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() == "ROLLBACK" { // aborted after all: nothing committed
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	err := ct.endWith(ctx, b)
	if pgsql.DivisionByZero(err) {
		return fmt.Errorf("pgxstore: the key's row is gone from the transaction (did the handler delete it?); nothing was committed: %w", err)
	}
	return err
}

// KeyPrune deletes one batch of expired keys, under an advisory lock of
// the keys' table.
func (d *Driver) KeyPrune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	return d.pruneLocked(ctx, d.q.KeysLockKey, func(tx pgx.Tx, res *store.PruneResult) error {
		tag, err := tx.Exec(ctx, d.q.KeyPrune, p.Retention.Milliseconds(), max(p.Limit, 1))
		res.Deleted = int(tag.RowsAffected())
		return err
	})
}
