package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

var (
	_ store.OutboxWriter[pgx.Tx] = (*Driver)(nil)
	_ store.OutboxRelayer        = (*Driver)(nil)
	_ store.OutboxListener       = (*Driver)(nil)
)

// OutboxWrite inserts outbox rows in tx. It notifies listening relays,
// which PostgreSQL does at COMMIT. It does not when another write notified
// less than [Config.OutboxNotifyEvery] ago.
func (d *Driver) OutboxWrite(ctx context.Context, tx pgx.Tx, rows []*store.OutboxRow) (int, error) {
	notify := d.notify()
	if len(rows) == 1 {
		r := rows[0]
		var key []byte
		if len(r.Key) > 0 {
			key = r.Key
		}
		q, args := d.q.OutboxWriteOne, []any{r.ID, r.Destination, key, r.Type, r.Headers, r.Payload}
		if notify {
			q, args = d.q.OutboxWriteOneNotify, append(args, d.q.OutboxChannel)
		}
		tag, err := tx.Exec(ctx, q, args...)
		return int(tag.RowsAffected()), pgsql.Classify(err)
	}
	q, args := d.q.OutboxWriteQuiet, pgsql.OutboxWriteArgs(rows)
	if notify {
		q, args = d.q.OutboxWrite, append(args, d.q.OutboxChannel)
	}
	var n int
	err := tx.QueryRow(ctx, q, args...).Scan(&n)
	return n, pgsql.Classify(err)
}

// notify reports whether this write notifies the relays: when no write
// did for notifyEvery.
func (d *Driver) notify() bool {
	if d.notifyEvery < 0 {
		return false
	}
	now := time.Now().UnixNano()
	last := d.lastNotify.Load()
	return now-last >= int64(d.notifyEvery) && d.lastNotify.CompareAndSwap(last, now)
}

// OutboxClaim leases due rows with FOR UPDATE SKIP LOCKED, in sequence
// order.
func (d *Driver) OutboxClaim(ctx context.Context, p *store.OutboxClaimParams) ([]*store.OutboxRecord, error) {
	q := d.q.OutboxClaim
	if p.Ordered {
		q = d.q.OutboxClaimOrdered
	}
	out, err := d.outboxRows(ctx, q, max(p.Limit, 1), max(p.Lease.Milliseconds(), 1), p.Token)
	slices.SortFunc(out, func(a, b *store.OutboxRecord) int { return int(a.Seq - b.Seq) })
	return out, err
}

func (d *Driver) outboxRows(ctx context.Context, q string, args ...any) ([]*store.OutboxRecord, error) {
	var out []*store.OutboxRecord
	err := d.sendLockTimed(ctx, func(b *pgx.Batch) {
		b.Queue(q, args...).Query(func(rows pgx.Rows) error {
			var err error
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.OutboxRecord, error) {
				return pgsql.ScanOutbox(row.Scan)
			})
			return err
		})
	})
	return out, err
}

// outboxExec runs q and returns the rows it affected.
func (d *Driver) outboxExec(ctx context.Context, q string, args ...any) (int, error) {
	var n int
	err := d.sendLockTimed(ctx, func(b *pgx.Batch) {
		b.Queue(q, args...).Exec(func(tag pgconn.CommandTag) error {
			n = int(tag.RowsAffected())
			return nil
		})
	})
	return n, err
}

// sendLockTimed sends the statements that queue queues as one implicit
// transaction, in one round trip, on a connection whose lock_timeout is
// store.DefaultLockTimeout: the session's (set once per connection), or
// with LockTimeoutPerTransaction a SET LOCAL queued first.
func (d *Driver) sendLockTimed(ctx context.Context, queue func(*pgx.Batch)) error {
	c, err := d.acquire(ctx, store.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer c.Release()
	b := &pgx.Batch{}
	if d.perTx {
		b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(store.DefaultLockTimeout))
	}
	queue(b)
	return pgsql.Classify(c.SendBatch(ctx, b).Close())
}

// OutboxDelete deletes published rows still leased by token.
func (d *Driver) OutboxDelete(ctx context.Context, token []byte, seqs []int64) (int, error) {
	return d.outboxExec(ctx, d.q.OutboxDelete, seqs, token)
}

// OutboxMarkPublished marks published rows still leased by token.
func (d *Driver) OutboxMarkPublished(ctx context.Context, token []byte, seqs []int64) (int, error) {
	return d.outboxExec(ctx, d.q.OutboxMarkPublished, seqs, token)
}

// OutboxPrunePublished deletes rows published more than age ago.
func (d *Driver) OutboxPrunePublished(ctx context.Context, age time.Duration, limit int) (int, error) {
	return d.outboxExec(ctx, d.q.OutboxPrunePublished, age.Milliseconds(), max(limit, 1))
}

// OutboxFail records failed publications.
func (d *Driver) OutboxFail(ctx context.Context, token []byte, fails []store.OutboxFailure) error {
	_, err := d.outboxExec(ctx, d.q.OutboxFail, pgsql.OutboxFailArgs(token, fails)...)
	return err
}

// OutboxParked lists parked rows.
func (d *Driver) OutboxParked(ctx context.Context, p *store.OutboxListParams) ([]*store.OutboxRecord, error) {
	return d.outboxRows(ctx, d.q.OutboxParked, p.AfterSeq, max(p.Limit, 1))
}

// OutboxUnpark makes a parked row due again.
func (d *Driver) OutboxUnpark(ctx context.Context, seq int64) error {
	return d.parkedRow(ctx, d.q.OutboxUnpark, seq)
}

// OutboxDiscard deletes a parked row.
func (d *Driver) OutboxDiscard(ctx context.Context, seq int64) error {
	return d.parkedRow(ctx, d.q.OutboxDiscard, seq)
}

// parkedRow runs q, OutboxUnpark or OutboxDiscard, on parked row seq;
// store.ErrNotFound when it found none.
func (d *Driver) parkedRow(ctx context.Context, q string, seq int64) error {
	n, err := d.outboxExec(ctx, q, seq)
	if err == nil && n == 0 {
		return store.ErrNotFound
	}
	return err
}

// OutboxListen listens for the notifications of OutboxWrite on a connection
// of the pool, which it holds until Close. On a pool of one connection, by
// MaxConns, it returns an error wrapping store.ErrPoolTooSmall instead. The
// relay then polls.
func (d *Driver) OutboxListen(ctx context.Context) (store.OutboxNotifications, error) {
	if n := d.pool.Config().MaxConns; n < 2 {
		return nil, fmt.Errorf("pgxstore: pool of MaxConns %d: %w", n, store.ErrPoolTooSmall)
	}
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{d.q.OutboxChannel}.Sanitize()); err != nil {
		c.Release()
		return nil, pgsql.Classify(err)
	}
	return &listener{c: c}, nil
}

type listener struct{ c *pgxpool.Conn }

func (l *listener) Wait(ctx context.Context) error {
	_, err := l.c.Conn().WaitForNotification(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return pgsql.Classify(err)
}

// Close closes the connection rather than giving it back LISTENing: a
// pooled connection would keep receiving notifications nobody reads.
func (l *listener) Close() error {
	err := l.c.Conn().Close(context.Background())
	l.c.Release()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
