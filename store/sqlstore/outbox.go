package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var (
	_ store.OutboxWriter[*sql.Tx] = (*Driver)(nil)
	_ store.OutboxRelayer         = (*Driver)(nil)
	_ store.OutboxListener        = (*Driver)(nil)
)

// Bounds on one outbox statement, so that it stays within SQLite's 32766
// placeholders, MySQL's 65535, SQLite's 500 terms of a compound SELECT
// and, mostly, below MySQL's max_allowed_packet (a row larger than
// outboxWriteBytes goes alone, checked against it first).
const (
	outboxWriteRows  = 500
	outboxWriteBytes = 1 << 20
	outboxSeqs       = 1000
	outboxFails      = 200
)

// OutboxWrite inserts outbox rows in tx, in their order, and returns how
// many it inserted. It skips IDs already in the table, published and kept
// ones too. Many rows go in several statements.
//
// On PostgreSQL, it notifies listening relays at COMMIT. It does not when
// another write notified less than [Config.OutboxNotifyEvery] ago. On MySQL,
// a connection that counts found rows counts the skipped rows too. That is
// clientFoundRows=true, which mysql.Open refuses.
func (d *Driver) OutboxWrite(ctx context.Context, tx *sql.Tx, rows []*store.OutboxRow) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	if a, ok := d.dialect.(sqldialect.OutboxArrays); ok {
		q, quiet := d.q.OutboxWrite, true
		if d.q.OutboxWriteQuiet == "" || d.notify() {
			quiet = false
		} else {
			q = d.q.OutboxWriteQuiet
		}
		var n int
		err := tx.QueryRowContext(ctx, q, a.OutboxWriteArgs(d.tables, rows, quiet)...).Scan(&n)
		return n, d.fail("outbox write", err)
	}
	total := 0
	for len(rows) > 0 {
		chunk := rows[:outboxWriteChunk(rows)]
		rows = rows[len(chunk):]
		args := make([]any, 0, 6*len(chunk))
		for _, r := range chunk {
			args = append(args, r.ID, r.Destination, nullBytes(r.Key), r.Type, r.Headers, r.Payload)
		}
		if c, ok := d.dialect.(sqldialect.PacketChecker); ok && len(chunk) == 1 {
			r := chunk[0]
			if err := c.CheckPacket(ctx, tx, r.ID, []byte(r.Destination), r.Key, []byte(r.Type), r.Headers, r.Payload); err != nil {
				return total, d.fail("outbox write", err)
			}
		}
		res, err := tx.ExecContext(ctx, sqldialect.ExpandList(d.q.OutboxWrite, "{values}", d.q.OutboxWriteValues, len(chunk), ", "), args...)
		if err != nil {
			if d.dialect.TooLarge(err) {
				err = fmt.Errorf("%w: %w", store.ErrTooLarge, err)
			}
			return total, d.fail("outbox write", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, d.fail("outbox write", err)
		}
		total += int(n)
	}
	return total, nil
}

// notify reports whether this write notifies the relays: when no write
// of d did for Config.OutboxNotifyEvery, never when that is negative.
func (d *Driver) notify() bool {
	if d.notifyEvery < 0 {
		return false
	}
	now := time.Now().UnixNano()
	last := d.lastNotify.Load()
	return now-last >= int64(d.notifyEvery) && d.lastNotify.CompareAndSwap(last, now)
}

// outboxWriteChunk is how many of rows the next insert takes: at most
// outboxWriteRows, and outboxWriteBytes of values unless one row is larger.
func outboxWriteChunk(rows []*store.OutboxRow) int {
	size := 0
	for i, r := range rows {
		size += len(r.ID) + len(r.Destination) + len(r.Key) + len(r.Type) + len(r.Headers) + len(r.Payload)
		if i == outboxWriteRows || i > 0 && size > outboxWriteBytes {
			return i
		}
	}
	return len(rows)
}

// OutboxClaim leases up to p.Limit due rows, oldest available first, in a
// transaction of its own. It returns them in sequence order. PostgreSQL and
// MySQL skip the rows another relay is claiming, with FOR UPDATE SKIP
// LOCKED. SQLite's claims take turns for its single write lock.
func (d *Driver) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*store.OutboxRecord, error) {
	q := d.q.OutboxClaim
	if p.Ordered {
		q = d.q.OutboxClaimOrdered
	}
	limit, lease := max(p.Limit, 1), max(p.Lease.Milliseconds(), 1)
	var out []*store.OutboxRecord
	err := d.outboxTx(ctx, func(tx *sql.Tx) error {
		out = nil // a run before this one did not commit: its rows are not ours
		if d.q.OutboxLease == "" {
			recs, err := queryOutbox(ctx, tx, q, limit, lease, p.Token)
			out = recs
			return err
		}
		recs, err := queryOutbox(ctx, tx, q, limit)
		if err != nil || len(recs) == 0 {
			return err
		}
		seqs := make([]int64, len(recs))
		for i, r := range recs {
			seqs[i] = r.Seq
		}
		if _, err := d.execSeqs(ctx, tx, d.q.OutboxLease, seqs, lease, p.Token); err != nil {
			return err
		}
		out = recs
		return nil
	})
	if err != nil {
		return nil, d.fail("outbox claim", err)
	}
	slices.SortFunc(out, func(a, b *store.OutboxRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// OutboxDelete deletes the rows of seqs still leased by token, after their
// publication, and returns how many it deleted.
func (d *Driver) OutboxDelete(ctx context.Context, token []byte, seqs []int64) (int, error) {
	return d.outboxDone(ctx, "outbox delete", d.q.OutboxDelete, token, seqs)
}

// OutboxMarkPublished marks published the rows of seqs still leased by
// token, and returns how many it marked. Marked rows are never claimed
// again and hold back no later row of their key. They keep their ID from
// being written again until [Driver.OutboxPrunePublished] deletes them.
func (d *Driver) OutboxMarkPublished(ctx context.Context, token []byte, seqs []int64) (int, error) {
	return d.outboxDone(ctx, "outbox mark published", d.q.OutboxMarkPublished, token, seqs)
}

// outboxDone runs stmt, OutboxDelete or OutboxMarkPublished, on the rows
// of seqs still leased by token, in a transaction of its own.
func (d *Driver) outboxDone(ctx context.Context, op, stmt string, token []byte, seqs []int64) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	var n int
	err := d.outboxTx(ctx, func(tx *sql.Tx) error {
		var err error
		if a, ok := d.dialect.(sqldialect.OutboxArrays); ok {
			n, err = rowsAffected(tx.ExecContext(ctx, stmt, a.OutboxDeleteArgs(token, seqs)...))
			return err
		}
		n, err = d.execSeqs(ctx, tx, stmt, seqs, token)
		return err
	})
	if err != nil {
		return 0, d.fail(op, err)
	}
	return n, nil
}

// OutboxPrunePublished deletes at most limit rows marked published more
// than age ago, oldest first, and returns how many it deleted. Age is by the
// database's clock.
func (d *Driver) OutboxPrunePublished(ctx context.Context, age time.Duration, limit int) (int, error) {
	var n int
	err := d.outboxTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = rowsAffected(tx.ExecContext(ctx, d.q.OutboxPrunePublished, max(age.Milliseconds(), 0), max(limit, 1)))
		return err
	})
	if err != nil {
		return 0, d.fail("outbox prune published", err)
	}
	return n, nil
}

// OutboxFail records failed publications of rows still leased by token.
func (d *Driver) OutboxFail(ctx context.Context, token []byte, fails []store.OutboxFailure) error {
	if len(fails) == 0 {
		return nil
	}
	err := d.outboxTx(ctx, func(tx *sql.Tx) error {
		if a, ok := d.dialect.(sqldialect.OutboxArrays); ok {
			_, err := tx.ExecContext(ctx, d.q.OutboxFail, a.OutboxFailArgs(token, fails)...)
			return err
		}
		for chunk := range slices.Chunk(fails, outboxFails) {
			args := make([]any, 0, 5*len(chunk)+1)
			for _, f := range chunk {
				args = append(args, f.Seq, f.Error, max(f.Delay.Milliseconds(), 0), f.Park, f.Released)
			}
			q := sqldialect.ExpandList(d.q.OutboxFail, "{failures}", d.q.OutboxFailValues, len(chunk), " UNION ALL ")
			if _, err := tx.ExecContext(ctx, q, append(args, token)...); err != nil {
				return err
			}
		}
		return nil
	})
	return d.fail("outbox fail", err)
}

// OutboxParked lists parked rows in sequence order, after p.AfterSeq,
// outside any transaction.
func (d *Driver) OutboxParked(ctx context.Context, p *store.OutboxListParams) ([]*store.OutboxRecord, error) {
	out, err := queryOutbox(ctx, d.db, d.q.OutboxParked, p.AfterSeq, max(p.Limit, 1))
	if err != nil {
		return nil, d.fail("outbox parked", err)
	}
	return out, nil
}

// OutboxUnpark makes a parked row due again with its attempts reset. It
// returns [store.ErrNotFound] when no parked row has that sequence number.
func (d *Driver) OutboxUnpark(ctx context.Context, seq int64) error {
	return d.outboxParkedRow(ctx, "unpark", d.q.OutboxUnpark, seq)
}

// OutboxDiscard deletes a parked row. It returns [store.ErrNotFound] when no
// parked row has that sequence number.
func (d *Driver) OutboxDiscard(ctx context.Context, seq int64) error {
	return d.outboxParkedRow(ctx, "discard", d.q.OutboxDiscard, seq)
}

// outboxParkedRow runs stmt, OutboxUnpark or OutboxDiscard, on parked row
// seq in a transaction of its own.
func (d *Driver) outboxParkedRow(ctx context.Context, op, stmt string, seq int64) error {
	var n int
	err := d.outboxTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = rowsAffected(tx.ExecContext(ctx, stmt, seq))
		return err
	})
	if err != nil {
		return d.fail("outbox "+op, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: %s outbox row %d: %w", op, seq, store.ErrNotFound)
	}
	return nil
}

// outboxTx runs f in a transaction of its own, begun as Begin does (on a
// pool of sqlite.Open: BEGIN IMMEDIATE, in turn with the pool's other
// writers) with store.DefaultLockTimeout, and commits it.
func (d *Driver) outboxTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	var err error
	for range outboxAttempts {
		if err = d.outboxTxOnce(ctx, f); err == nil || !d.dialect.Deadlock(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// outboxAttempts bounds the runs of an outbox statement's transaction
// that the database aborts to break a deadlock: InnoDB's gap locks let
// relays racing on one table deadlock now and then (1 run in 100 of
// storetest's OutboxRelaysShare on MariaDB, with two busy cores). Each
// statement is idempotent: it acts on the rows its token still leases.
const outboxAttempts = 3

// outboxTxOnce runs f in a transaction of its own and commits.
func (d *Driver) outboxTxOnce(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := d.beginOn(ctx, d.db, store.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer d.rollbackQuietly(tx) // after Commit: sql.ErrTxDone, ignored
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// execSeqs runs stmt, whose {seqs} stands for a list of sequence numbers,
// for seqs in chunks, each with args before its list, and returns the
// rows affected.
func (d *Driver) execSeqs(ctx context.Context, tx *sql.Tx, stmt string, seqs []int64, args ...any) (int, error) {
	total := 0
	for chunk := range slices.Chunk(seqs, outboxSeqs) {
		a := append(make([]any, 0, len(args)+len(chunk)), args...)
		for _, s := range chunk {
			a = append(a, s)
		}
		n, err := rowsAffected(tx.ExecContext(ctx, sqldialect.ExpandList(stmt, "{seqs}", "?", len(chunk), ", "), a...))
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func rowsAffected(res sql.Result, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// queryOutbox reads the rows of an outbox read (the columns of
// sqldialect.Queries' outbox statements).
func queryOutbox(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) ([]*store.OutboxRecord, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.OutboxRecord
	for rows.Next() {
		r := &store.OutboxRecord{}
		var created int64
		var parked sql.NullInt64
		if err := rows.Scan(&r.Seq, &r.ID, &r.Destination, &r.Key, &r.Type, &r.Headers, &r.Payload,
			&r.Attempts, &r.LastError, &created, &parked); err != nil {
			return nil, err
		}
		r.CreatedAt = time.UnixMilli(created).UTC()
		if parked.Valid {
			r.ParkedAt = time.UnixMilli(parked.Int64).UTC()
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// OutboxListen listens for the notifications of OutboxWrite, with
// PostgreSQL's LISTEN/NOTIFY through pgx's stdlib driver.
//
// It holds a connection of the pool until the notifications' Close. It then
// closes that connection rather than give it back LISTENing. SQLite and
// MySQL cannot tell relays of new rows, nor can PostgreSQL connections of
// another driver. The error then wraps [store.ErrNoNotifications], and the
// relay polls. The relay also polls on a pool of one connection, which
// LISTEN would hold, as after sql.DB.SetMaxOpenConns(1). The error then
// wraps [store.ErrPoolTooSmall].
func (d *Driver) OutboxListen(ctx context.Context) (store.OutboxNotifications, error) {
	ls, ok := d.dialect.(sqldialect.Listener)
	if !ok {
		return nil, fmt.Errorf("sqlstore: %s: %w", d.dialect.Name(), store.ErrNoNotifications)
	}
	if n := d.db.Stats().MaxOpenConnections; n == 1 { // 0: unlimited
		return nil, fmt.Errorf("sqlstore: pool of MaxOpenConns 1: %w", store.ErrPoolTooSmall)
	}
	n, err := ls.OutboxListen(ctx, d.db, d.tables)
	if err != nil {
		return nil, d.fail("outbox listen", err)
	}
	return n, nil
}
