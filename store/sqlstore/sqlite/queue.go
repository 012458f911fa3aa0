package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// ErrBusy is the error of a write transaction on a *sql.DB of [Open] that
// waited the busy timeout for the pool's other writers. Driver.Retryable
// reports it retryable, as it does SQLITE_BUSY.
var ErrBusy = errors.New("sqlstore: SQLite busy: waited the busy timeout for this pool's other writers")

// writeQueue lets the write transactions of one pool take SQLite's single
// write lock one at a time, in the order they asked for it. SQLite's busy
// handler makes waiting writers sleep and retry (1 ms, 2 ms, 5 ms, ... up
// to 100 ms a sleep): whoever tries at the moment the lock is free gets
// it, so a writer that commits every few milliseconds keeps winning while
// one that waits longer sleeps longer, and the lock sits idle while
// everyone sleeps. Under 8 busy writers the pruner got the lock about once
// a second, or waited the whole busy timeout.
//
// The queue only orders this pool's writers: SQLite's lock still decides,
// so a writer of another pool or process still waits up to busy_timeout
// for it, and any mismatch (a transaction ended behind the queue's back)
// falls back to SQLite's own waiting, never to two writers at once.
type writeQueue struct {
	// slot is full while a transaction holds it. A channel's blocked
	// senders are served in the order they blocked, and a release hands
	// the slot straight to the first of them: no newcomer overtakes.
	slot chan struct{}
	// wait is how long a writer waits for the slot: the busy timeout;
	// zero: not at all.
	wait time.Duration
}

func newWriteQueue(wait time.Duration) *writeQueue {
	return &writeQueue{slot: make(chan struct{}, 1), wait: max(wait, 0)}
}

// take waits for the slot up to wait, or until ctx is done.
func (q *writeQueue) take(ctx context.Context, wait time.Duration) error {
	select {
	case q.slot <- struct{}{}: // free, and then nobody waits for it
		return nil
	default:
	}
	if wait <= 0 {
		return ErrBusy
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case q.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%w (%v)", ErrBusy, wait)
	}
}

func (q *writeQueue) release() { <-q.slot }

// queuedConnector opens modernc's connections wrapped in queuedConn.
type queuedConnector struct {
	driver.Connector
	q *writeQueue
}

func (c queuedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(sqliteConn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("sqlstore: modernc.org/sqlite's connection %T lacks an interface it used to have", conn)
	}
	return &queuedConn{sqliteConn: sc, q: c.q, busy: c.q.wait}, nil
}

// sqliteConn is what modernc's connections implement and database/sql
// uses; queuedConn forwards all of it (modernc's NewConnector asks
// wrappers to).
type sqliteConn = sqldialect.DriverConn

// queuedConn takes its pool's write slot before BEGIN IMMEDIATE and gives
// it back once the transaction ended, however it ends: database/sql ends
// every transaction through the driver's Commit or Rollback (its own
// rollback when the transaction's context is done included) or closes the
// connection, and each of them gives the slot back. A transaction that is
// never ended holds the slot as it holds SQLite's lock: the other writers
// then fail after the busy timeout, as they did without the queue.
//
// It also remembers its busy_timeout, which Open's DSN sets to the busy
// timeout: a transaction begun with sqldialect.WithLockTimeout waits that
// long for its turn and then for SQLite's lock (busy_timeout, set before
// BEGIN IMMEDIATE when it differs), any other transaction the busy
// timeout; SetLockTimeout's PRAGMA is skipped when it would change
// nothing. Any other statement that names busy_timeout (anywhere, in any
// case) makes the value unknown: the next transaction sets it again. One
// prepared on the connection may run again unseen, so from then on every
// read-write transaction sets it. (database/sql uses a connection from
// one goroutine at a time.)
type queuedConn struct {
	sqliteConn
	q    *writeQueue
	held atomic.Bool
	// busy is the connection's busy_timeout; -1 when unknown (set by a
	// statement of the application's).
	busy time.Duration
	// prepared: a statement naming busy_timeout was prepared here, and
	// busy is never trusted again.
	prepared bool
}

// setBusy sets the connection's busy_timeout to d unless it has it.
func (c *queuedConn) setBusy(ctx context.Context, d time.Duration) error {
	if c.busy == d && !c.prepared {
		return nil
	}
	c.busy = -1
	if _, err := c.sqliteConn.ExecContext(ctx, sqliteSetBusy(d), nil); err != nil {
		return err
	}
	c.busy = d
	return nil
}

func (c *queuedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if d, ok := sqldialect.LockTimeoutOf(ctx); ok && len(args) == 0 && query == sqliteSetBusy(d) {
		return driver.RowsAffected(0), c.setBusy(ctx, d)
	}
	c.forget(query)
	return c.sqliteConn.ExecContext(ctx, query, args)
}

func (c *queuedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.forget(query)
	return c.sqliteConn.QueryContext(ctx, query, args)
}

func (c *queuedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if sqldialect.MentionsName(query, "busy_timeout") {
		c.prepared = true
	}
	return c.sqliteConn.PrepareContext(ctx, query)
}

// forget makes the busy timeout unknown when query may set it.
func (c *queuedConn) forget(query string) {
	if sqldialect.MentionsName(query, "busy_timeout") {
		c.busy = -1
	}
}

// sqliteSetBusy sets the connection's busy_timeout to d, in milliseconds.
func sqliteSetBusy(d time.Duration) string {
	return "PRAGMA busy_timeout = " + strconv.FormatInt(max(d.Milliseconds(), 0), 10)
}

// Unwrap returns modernc's connection (for sqlite.Limit and conn.Raw users).
func (c *queuedConn) Unwrap() driver.Conn { return c.sqliteConn }

// takeSlot takes the write slot for a transaction begun with SQL (Migrate's
// BEGIN IMMEDIATE); giveSlot, or closing the connection, gives it back.
func (c *queuedConn) takeSlot(ctx context.Context, wait time.Duration) error {
	if err := c.q.take(ctx, wait); err != nil {
		return err
	}
	c.held.Store(true)
	return nil
}

func (c *queuedConn) giveSlot() {
	if c.held.CompareAndSwap(true, false) {
		c.q.release()
	}
}

// BeginTx queues a read-write transaction, waiting up to its lock
// timeout; a read-only one begins with a deferred BEGIN and takes no write
// lock.
func (c *queuedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts.ReadOnly {
		return c.sqliteConn.BeginTx(ctx, opts)
	}
	wait := c.q.wait
	if d, ok := sqldialect.LockTimeoutOf(ctx); ok && d > 0 {
		wait = d
	}
	if err := c.setBusy(ctx, wait); err != nil {
		return nil, err
	}
	if err := c.takeSlot(ctx, wait); err != nil {
		return nil, err
	}
	tx, err := c.sqliteConn.BeginTx(ctx, opts)
	if err != nil {
		c.giveSlot()
		return nil, err
	}
	return &queuedTx{Tx: tx, c: c}, nil
}

// Begin is the context-free form; database/sql calls BeginTx.
func (c *queuedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// Close closes the connection, which ends a transaction still open on it,
// and then gives the slot back.
func (c *queuedConn) Close() error {
	err := c.sqliteConn.Close()
	c.giveSlot()
	return err
}

// queuedTx gives the slot back once COMMIT or ROLLBACK returned: SQLite
// released its lock by then (modernc rolls back a COMMIT that failed).
type queuedTx struct {
	driver.Tx
	c *queuedConn
}

func (t *queuedTx) Commit() error {
	defer t.c.giveSlot()
	return t.Tx.Commit()
}

func (t *queuedTx) Rollback() error {
	defer t.c.giveSlot()
	return t.Tx.Rollback()
}

// slotOf runs fn on the queuedConn under raw, a driver connection that
// sql.Conn.Raw passes; not one (a pool not of Open): nothing to do.
func slotOf(raw any, fn func(*queuedConn) error) error {
	if c, ok := raw.(*queuedConn); ok {
		return fn(c)
	}
	return nil
}
