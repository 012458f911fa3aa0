package pgxstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

var _ store.BatchClaimer[pgx.Tx] = (*Driver)(nil)

var _ store.BatchBeginner[pgx.Tx] = (*Driver)(nil)

// ClaimBatch claims the batch in one statement, with unnest of arrays.
func (d *Driver) ClaimBatch(ctx context.Context, tx pgx.Tx, p *store.ClaimBatchParams) ([]store.ClaimResult, error) {
	if len(p.Claims) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	out := d.queueClaimBatch(b, p)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, pgsql.Classify(err)
	}
	return *out, nil
}

// BeginClaimBatch sends BEGIN and the batch's claim in one round trip. Where
// the lock timeout is set per transaction, the round trip sets it too.
func (d *Driver) BeginClaimBatch(ctx context.Context, p *store.ClaimBatchParams) (pgx.Tx, []store.ClaimResult, error) {
	c, err := d.acquire(ctx, p.LockTimeout)
	if err != nil {
		return nil, nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if d.perTx {
		b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(p.LockTimeout))
	}
	out := &[]store.ClaimResult{}
	if len(p.Claims) > 0 {
		out = d.queueClaimBatch(b, p)
	}
	br := c.SendBatch(ctx, b)
	tx := &connTx{Tx: br.Tx(), conn: c}
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		return nil, nil, pgsql.Classify(err)
	}
	return tx, *out, nil
}

// queueClaimBatch queues the batch's claim on b; its results fill the
// returned slice when b's results are read.
func (d *Driver) queueClaimBatch(b *pgx.Batch, p *store.ClaimBatchParams) *[]store.ClaimResult {
	ids, types, fps := make([][]byte, len(p.Claims)), make([]string, len(p.Claims)), make([][]byte, len(p.Claims))
	for i, c := range p.Claims {
		ids[i], types[i], fps[i] = c.MessageID, c.Type, c.Fingerprint
	}
	out := make([]store.ClaimResult, len(p.Claims))
	for i := range out {
		out[i].Claimed = true
	}
	b.Queue(d.q.ClaimBatch, p.Claims[0].Consumer, ids, types, fps).Query(func(rows pgx.Rows) error {
		for rows.Next() { // the duplicates
			var n int64
			var r store.ClaimResult
			if err := rows.Scan(&n, &r.Fingerprint, &r.Type); err != nil {
				return err
			}
			if n < 1 || n > int64(len(out)) {
				return fmt.Errorf("pgxstore: the batch claim returned position %d of %d", n, len(out))
			}
			out[n-1] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// An ID given again right after its first claim (claims come
		// sorted) met the row that claim inserted, which the statement
		// cannot tell apart: it is a duplicate of that claim.
		first := 0
		for i := 1; i < len(out); i++ {
			if !bytes.Equal(ids[i], ids[first]) {
				first = i
				continue
			}
			if out[first].Claimed {
				out[i] = store.ClaimResult{Fingerprint: fps[first], Type: types[first]}
			} else {
				out[i] = out[first]
			}
		}
		return nil
	})
	return &out
}

// Savepoint creates the named savepoint.
func (d *Driver) Savepoint(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, "SAVEPOINT "+pgx.Identifier{name}.Sanitize())
	if errors.Is(err, pgx.ErrTxClosed) {
		return txDone("savepoint", err)
	}
	return pgsql.Classify(err)
}

// Unclaim deletes the inbox row of key.
func (d *Driver) Unclaim(ctx context.Context, tx pgx.Tx, key store.Key) error {
	_, err := tx.Exec(ctx, d.q.Unclaim, key.Consumer, key.MessageID)
	return pgsql.Classify(err)
}
