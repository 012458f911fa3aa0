package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ store.BatchClaimer[*sql.Tx] = (*Driver)(nil)

// claimedSavepoint is the savepoint that ClaimBatch creates after its claim
// where the dialect has no TxAlive statement, for CheckTx without a
// savepoint to release.
const claimedSavepoint = "inbox_batch_claimed"

// ClaimBatch claims p.Claims in tx, in their order, and returns a result per
// claim. The result is Claimed, or for a duplicate its stored fingerprint and
// type. An ID that comes again later in p.Claims is a duplicate of its first
// claim.
//
// One statement claims the batch. A large batch takes several, above 500
// messages on SQLite and above 64 on MySQL. When there are duplicates, one
// more statement reads them. PostgreSQL reads them in the claim.
//   - PostgreSQL runs internal/pgsql's INSERT ... SELECT FROM unnest(...) ON
//     CONFLICT DO NOTHING RETURNING, joined back to the input.
//   - SQLite runs a multi-row INSERT ... ON CONFLICT DO NOTHING RETURNING
//     message_id.
//   - MySQL and MariaDB run a multi-row INSERT ... ON DUPLICATE KEY UPDATE,
//     never INSERT IGNORE. It changes no existing row. It marks each
//     duplicate's bit in LAST_INSERT_ID, which the statement's result
//     carries. The rows affected count the rows inserted, and must add up
//     with the marks. That catches a connection with clientFoundRows=true.
//     The connection's LAST_INSERT_ID() is that mask afterwards.
//
// On MySQL and SQLite, ClaimBatch then creates a savepoint for
// [Driver.CheckTx].
func (d *Driver) ClaimBatch(ctx context.Context, tx *sql.Tx, p *store.ClaimBatchParams) ([]store.ClaimResult, error) {
	if d.q.ClaimBatchBy == sqldialect.BatchNone {
		return nil, fmt.Errorf("sqlstore: the %s dialect claims no batches", d.dialect.Name())
	}
	if len(p.Claims) == 0 {
		return nil, nil
	}
	out := make([]store.ClaimResult, len(p.Claims))
	// Each ID once, in its first claim's place.
	first := make(map[string]int, len(p.Claims))
	uniq := make([]store.ClaimParams, 0, len(p.Claims))
	at := make([]int, 0, len(p.Claims)) // uniq's index in p.Claims
	for i, c := range p.Claims {
		if _, ok := first[string(c.MessageID)]; ok {
			continue
		}
		first[string(c.MessageID)] = i
		uniq = append(uniq, c)
		at = append(at, i)
	}
	res, err := d.claimBatch(ctx, tx, uniq)
	if err != nil {
		return nil, d.fail("claim batch", err)
	}
	for j, r := range res {
		out[at[j]] = r
	}
	for i, c := range p.Claims {
		f := first[string(c.MessageID)]
		switch {
		case f == i:
		case out[f].Claimed: // what this transaction stored
			out[i] = store.ClaimResult{Fingerprint: p.Claims[f].Fingerprint, Type: p.Claims[f].Type}
		default:
			out[i] = out[f]
		}
	}
	if d.q.TxAlive == "" {
		if err := d.Savepoint(ctx, tx, claimedSavepoint); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimBatch claims claims, whose IDs are distinct, in the dialect's way.
func (d *Driver) claimBatch(ctx context.Context, tx *sql.Tx, claims []store.ClaimParams) ([]store.ClaimResult, error) {
	if d.q.ClaimBatchBy == sqldialect.BatchArrays {
		return d.claimBatchArrays(ctx, tx, claims)
	}
	out := make([]store.ClaimResult, len(claims))
	var dups []int
	for start := 0; start < len(claims); start += d.q.ClaimBatchRows {
		chunk := claims[start:min(start+d.q.ClaimBatchRows, len(claims))]
		inserted, err := d.claimChunk(ctx, tx, chunk)
		if err != nil {
			return nil, err
		}
		for i, ok := range inserted {
			out[start+i].Claimed = ok
			if !ok {
				dups = append(dups, start+i)
			}
		}
	}
	return out, d.lookupDuplicates(ctx, tx, claims, dups, out)
}

// claimChunk runs one ClaimBatch statement on at most ClaimBatchRows
// claims and reports which it inserted.
func (d *Driver) claimChunk(ctx context.Context, tx *sql.Tx, chunk []store.ClaimParams) ([]bool, error) {
	n := len(chunk)
	values := d.q.ClaimBatchFirst + strings.Repeat(", "+d.q.ClaimBatchValues, n-1)
	query := strings.Replace(d.q.ClaimBatch, "{values}", values, 1)
	args := make([]any, 0, 5*n)
	for _, c := range chunk {
		args = append(args, c.Consumer, c.MessageID, c.Type, nullBytes(c.Fingerprint))
	}
	inserted := make([]bool, n)
	switch d.q.ClaimBatchBy {
	case sqldialect.BatchReturning:
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		index := make(map[string]int, n)
		for i, c := range chunk {
			index[string(c.MessageID)] = i
		}
		for rows.Next() {
			var id []byte
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			i, ok := index[string(id)]
			if !ok {
				return nil, fmt.Errorf("the claim returned an ID it was not given: %q", id)
			}
			inserted[i] = true
		}
		return inserted, rows.Err()
	case sqldialect.BatchMask:
		if n > 64 {
			return nil, fmt.Errorf("a claim of %d rows: the mask has 64 bits", n)
		}
		for _, c := range chunk {
			args = append(args, c.MessageID)
		}
		query = sqldialect.ExpandList(query, "{ids}", "?", n, ", ")
		r, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		affected, err := r.RowsAffected()
		if err != nil {
			return nil, err
		}
		id, err := r.LastInsertId()
		if err != nil {
			return nil, err
		}
		mask := uint64(id)
		dups := bits.OnesCount64(mask)
		switch {
		case n < 64 && mask>>n != 0:
			return nil, fmt.Errorf("the claim of %d rows marked duplicates beyond them (mask %#x)", n, mask)
		case int(affected)+dups > n && dups > 0:
			return nil, fmt.Errorf("%d of %d rows counted as affected with %d duplicates marked: the connection counts found rows, not changed rows: %w",
				affected, n, dups, ErrClientFoundRows)
		case int(affected)+dups != n:
			return nil, fmt.Errorf("the claim of %d rows reported %d rows affected and %d duplicates marked", n, affected, dups)
		}
		for i := range inserted {
			inserted[i] = mask&(1<<i) == 0
		}
		return inserted, nil
	}
	return nil, fmt.Errorf("unknown batch report %d", d.q.ClaimBatchBy)
}

// lookupDuplicates reads the stored fingerprint and type of claims[dups]
// into out; a row gone meanwhile leaves them unknown, as it does for a
// claim without a fingerprint to compare (Config.NoFingerprint), which is
// not looked up.
func (d *Driver) lookupDuplicates(ctx context.Context, tx *sql.Tx, claims []store.ClaimParams, dups []int, out []store.ClaimResult) error {
	dups = slices.DeleteFunc(dups, func(i int) bool { return claims[i].Fingerprint == nil })
	for start := 0; start < len(dups); start += d.q.ClaimBatchRows {
		chunk := dups[start:min(start+d.q.ClaimBatchRows, len(dups))]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, claims[chunk[0]].Consumer)
		index := make(map[string]int, len(chunk))
		for _, i := range chunk {
			args = append(args, claims[i].MessageID)
			index[string(claims[i].MessageID)] = i
		}
		rows, err := tx.QueryContext(ctx, sqldialect.ExpandList(d.q.ClaimBatchLookup, "{ids}", "?", len(chunk), ", "), args...)
		if err != nil {
			return fmt.Errorf("reading the duplicates: %w", err)
		}
		for rows.Next() {
			var id, fp []byte
			var typ string
			if err := rows.Scan(&id, &fp, &typ); err != nil {
				rows.Close()
				return fmt.Errorf("reading the duplicates: %w", err)
			}
			if i, ok := index[string(id)]; ok {
				out[i].Fingerprint, out[i].Type = fp, typ
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading the duplicates: %w", err)
		}
	}
	return nil
}

// claimBatchArrays claims with one statement taking arrays (PostgreSQL,
// through pgx's stdlib driver, which binds Go slices as arrays).
func (d *Driver) claimBatchArrays(ctx context.Context, tx *sql.Tx, claims []store.ClaimParams) ([]store.ClaimResult, error) {
	ids, types, fps := make([][]byte, len(claims)), make([]string, len(claims)), make([][]byte, len(claims))
	for i, c := range claims {
		ids[i], types[i] = c.MessageID, c.Type
		if len(c.Fingerprint) > 0 {
			fps[i] = c.Fingerprint
		}
	}
	rows, err := tx.QueryContext(ctx, d.q.ClaimBatch, claims[0].Consumer, ids, types, fps)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]store.ClaimResult, len(claims))
	for i := range out {
		out[i].Claimed = true
	}
	for rows.Next() { // the duplicates, by position (from 1)
		var n int64
		var r store.ClaimResult
		if err := rows.Scan(&n, &r.Fingerprint, &r.Type); err != nil {
			return nil, err
		}
		if n < 1 || n > int64(len(out)) {
			return nil, fmt.Errorf("the claim returned position %d of %d", n, len(out))
		}
		out[n-1] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Savepoint creates the named savepoint in tx. On MySQL it may move it.
func (d *Driver) Savepoint(ctx context.Context, tx *sql.Tx, name string) error {
	if name == "" {
		return errors.New("sqlstore: savepoint: empty name")
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT "+d.dialect.Quote(name))
	return d.fail("savepoint", err)
}

// Unclaim deletes the inbox row of key in tx.
func (d *Driver) Unclaim(ctx context.Context, tx *sql.Tx, key store.Key) error {
	_, err := tx.ExecContext(ctx, d.q.Unclaim, key.Consumer, key.MessageID)
	return d.fail("unclaim", err)
}
