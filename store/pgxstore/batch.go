package pgxstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

var _ store.BatchClaimer[pgx.Tx] = (*Driver)(nil)

// ClaimBatch claims the batch in one statement (unnest of arrays).
func (d *Driver) ClaimBatch(ctx context.Context, tx pgx.Tx, p *store.ClaimBatchParams) ([]store.ClaimResult, error) {
	if len(p.Claims) == 0 {
		return nil, nil
	}
	ids, types, fps := make([][]byte, len(p.Claims)), make([]string, len(p.Claims)), make([][]byte, len(p.Claims))
	for i, c := range p.Claims {
		ids[i], types[i], fps[i] = c.MessageID, c.Type, c.Fingerprint
	}
	rows, err := tx.Query(ctx, d.q.ClaimBatch, p.Claims[0].Consumer, ids, types, fps)
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	out := make([]store.ClaimResult, 0, len(p.Claims))
	for rows.Next() {
		var r store.ClaimResult
		if err := rows.Scan(&r.Claimed, &r.Fingerprint, &r.Type); err != nil {
			rows.Close()
			return nil, pgsql.Classify(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, pgsql.Classify(err)
	}
	return out, nil
}

// Savepoint creates the named savepoint.
func (d *Driver) Savepoint(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, "SAVEPOINT "+pgx.Identifier{name}.Sanitize())
	return pgsql.Classify(err)
}

// Unclaim deletes the inbox row of key.
func (d *Driver) Unclaim(ctx context.Context, tx pgx.Tx, key store.Key) error {
	_, err := tx.Exec(ctx, d.q.Unclaim, key.Consumer, key.MessageID)
	return pgsql.Classify(err)
}
