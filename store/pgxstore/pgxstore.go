// Package pgxstore runs the inbox on PostgreSQL through a pgx v5 connection
// pool. Its transactions are pgx.Tx.
//
//	driver, err := pgxstore.New(pool, nil)
//	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
//	outcome, err := ib.Process(ctx, msg, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
//		return err
//	})
//
// Process sends BEGIN and the claim in one round trip, as a pgx batch. A
// message thus costs the round trips of the bare business transaction. The
// lock timeout is set once per pool connection, as
// [Config.LockTimeoutPerTransaction] tells. A duplicate costs two round
// trips. They are the batch, and one that reads its stored fingerprint and
// rolls back.
package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox/internal/failgroup"
	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
)

// Config configures a Driver. The zero value means the defaults.
type Config struct {
	// Tables names the schema and table prefix. Default no prefix, in the
	// connection's search_path.
	Tables store.Tables

	// LockTimeoutPerTransaction sets the inbox's lock timeout with SET LOCAL in
	// every transaction, instead of once per pool connection. That is one
	// statement more in each, in the same round trip. Use it for a pool whose
	// other users must keep the connections' own lock_timeout. Use it too for a
	// pool whose connections are reset behind the driver's back, as by RESET
	// ALL or DISCARD ALL. Without it, the driver sets the session's
	// lock_timeout on each connection the first time it uses it. Other queries
	// on that connection are then bound by it too. Default false.
	LockTimeoutPerTransaction bool

	// OutboxNotifyEvery is the least time between two notifications of relays
	// by the outbox's writes through this Driver. A write notifies when the
	// last notification is older, so a burst of writes costs a few
	// notifications. PostgreSQL sends the NOTIFY at COMMIT. A NOTIFY serializes
	// the notifying COMMITs for a moment, so notifying every write costs
	// throughput.
	//
	// Whether a write notifies is decided when it writes. Rows written within
	// OutboxNotifyEvery of a notifying write are found when that write commits.
	// A relay that published rows looks again soon after. When the notifying
	// write rolls back or commits much later, the relay's next poll finds them.
	// A negative value never notifies, and relays poll. Default
	// [DefaultOutboxNotifyEvery], 10 ms.
	OutboxNotifyEvery time.Duration
}

// DefaultOutboxNotifyEvery is Config.OutboxNotifyEvery's default.
const DefaultOutboxNotifyEvery = 10 * time.Millisecond

// Driver is a store.Driver[pgx.Tx] on a pgxpool.Pool.
type Driver struct {
	pool  *pgxpool.Pool
	q     *pgsql.Queries
	perTx bool

	notifyEvery time.Duration
	lastNotify  atomic.Int64 // unix nanoseconds
}

var _ store.Driver[pgx.Tx] = (*Driver)(nil)

// ErrInvalidConfig is wrapped by New's error for a nil pool or invalid
// table names. Invalid table names also wrap store.ErrInvalidTables.
var ErrInvalidConfig = errors.New("pgxstore: invalid config")

// New returns a Driver on pool. It checks the table names and runs no SQL.
func New(pool *pgxpool.Pool, cfg *Config) (*Driver, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	q, err := pgsql.New(c.Tables)
	if err != nil {
		return nil, fmt.Errorf("pgxstore: %w", err)
	}
	if c.OutboxNotifyEvery == 0 {
		c.OutboxNotifyEvery = DefaultOutboxNotifyEvery
	}
	return &Driver{pool: pool, q: q, perTx: c.LockTimeoutPerTransaction, notifyEvery: c.OutboxNotifyEvery}, nil
}

// Dialect returns "postgres".
func (d *Driver) Dialect() string { return "postgres" }

// Retryable reports whether err carries a PostgreSQL error that a later
// attempt may not hit, by its SQLSTATE. Such errors are serialization
// failures, deadlocks, lock timeouts and lost connections.
func (d *Driver) Retryable(err error) bool { return pgsql.Transient(err) }

// Conflict reports whether err is a lock conflict, for
// store.ConflictReporter. That is a deadlock, a serialization failure or a
// lock timeout.
func (d *Driver) Conflict(err error) bool { return pgsql.Conflict(err) }

// Unrecoverable reports whether err is a PostgreSQL error that no retry
// fixes, such as missing tables, denied permissions or refused credentials.
func (d *Driver) Unrecoverable(err error) bool { return pgsql.Unrecoverable(err) }

// SchemaVersion returns the highest applied migration version, 0 when the
// tables were never migrated.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.pool.QueryRow(ctx, d.q.SchemaVersion).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // no migrations table
		return 0, nil
	}
	return v, pgsql.Classify(err)
}

// acquire takes a connection from the pool with the session lock_timeout
// set to lt: set once per connection (one round trip, the first time), so
// that no transaction spends a statement on it.
func (d *Driver) acquire(ctx context.Context, lt time.Duration) (*pgxpool.Conn, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	if d.perTx {
		return c, nil
	}
	if err := pgsql.SetSessionLockTimeout(ctx, c.Conn(), lt); err != nil {
		c.Release()
		return nil, pgsql.Classify(err)
	}
	return c, nil
}

// begin sends BEGIN, with the claim p when it is not nil, in one round
// trip on a connection of the pool, and returns the transaction open, or an
// error with nothing left open.
func (d *Driver) begin(ctx context.Context, lt time.Duration, p *store.ClaimParams, res *store.ClaimResult) (pgx.Tx, error) {
	c, err := d.acquire(ctx, lt)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	switch {
	case p != nil && d.perTx: // the claim sets the lock timeout itself
		d.queue(b, d.q.ClaimSettingLockTimeout, res, p.Consumer, p.MessageID, p.Type, p.Fingerprint, pgsql.LockTimeout(lt))
	case p != nil:
		d.queueClaim(b, p, res)
	case d.perTx:
		b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(lt))
	}
	br := c.SendBatch(ctx, b)
	tx := &connTx{Tx: br.Tx(), conn: c}
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		return nil, pgsql.Classify(err)
	}
	return tx, nil
}

// Begin opens a READ COMMITTED transaction with the lock timeout, in one
// round trip.
func (d *Driver) Begin(ctx context.Context, p *store.BeginParams) (pgx.Tx, error) {
	return d.begin(ctx, p.LockTimeout, nil, nil)
}

// BeginClaim sends BEGIN and the claim in one round trip. A duplicate costs
// one more, which reads its fingerprint and rolls back.
func (d *Driver) BeginClaim(ctx context.Context, p *store.ClaimParams) (pgx.Tx, *store.ClaimResult, error) {
	res := &store.ClaimResult{}
	tx, err := d.begin(ctx, p.LockTimeout, p, res)
	if err != nil || res.Claimed {
		return tx, res, err
	}
	b := &pgx.Batch{}
	d.queueLookup(b, p, res)
	b.Queue("ROLLBACK")
	return nil, res, tx.(*connTx).endWith(ctx, b)
}

func (d *Driver) queueClaim(b *pgx.Batch, p *store.ClaimParams, res *store.ClaimResult) {
	d.queue(b, d.q.Claim, res, p.Consumer, p.MessageID, p.Type, p.Fingerprint)
}

// queue queues a claim statement, whose command tag tells whether it
// inserted.
func (d *Driver) queue(b *pgx.Batch, claim string, res *store.ClaimResult, args ...any) {
	b.Queue(claim, args...).Exec(func(tag pgconn.CommandTag) error {
		res.Claimed = tag.RowsAffected() == 1
		return nil
	})
}

// queueLookup queues the read of a duplicate's fingerprint and type.
func (d *Driver) queueLookup(b *pgx.Batch, p *store.ClaimParams, res *store.ClaimResult) {
	if p.Fingerprint == nil { // nothing to compare (Config.NoFingerprint)
		return
	}
	b.Queue(d.q.ClaimLookup, p.Consumer, p.MessageID).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&res.Fingerprint, &res.Type)
		if errors.Is(err, pgx.ErrNoRows) { // gone meanwhile (pruned): fingerprint unknown
			return nil
		}
		return err
	})
}

// Claim sends the lock timeout, the savepoint and the claim in one round
// trip. It sets the lock timeout with SET LOCAL, for the rest of tx.
func (d *Driver) Claim(ctx context.Context, tx pgx.Tx, p *store.ClaimParams) (*store.ClaimResult, error) {
	res := &store.ClaimResult{}
	b := &pgx.Batch{}
	b.Queue(d.q.SetLockTimeout, pgsql.LockTimeout(p.LockTimeout))
	if p.Savepoint != "" {
		b.Queue("SAVEPOINT " + store.QuoteDouble(p.Savepoint))
	}
	d.queueClaim(b, p, res)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, pgsql.Classify(err)
	}
	if !res.Claimed && p.Fingerprint != nil {
		b := &pgx.Batch{}
		d.queueLookup(b, p, res)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, pgsql.Classify(err)
		}
	}
	return res, nil
}

// connTx is a transaction on a connection acquired from the pool, released
// when the transaction ends (as pgxpool's own transactions are).
type connTx struct {
	pgx.Tx
	conn   *pgxpool.Conn
	failed error // the last statement's error PostgreSQL gave
}

func (t *connTx) release() {
	if t.conn != nil {
		t.conn.Release() // destroys the connection if it is still in a transaction
		t.conn = nil
	}
}

func (t *connTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *connTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

// endWith sends b, which ends the transaction (ROLLBACK or COMMIT last),
// on the connection in one round trip, and releases the connection. pgx's
// Tx does not know it ended: t's methods fail with pgx.ErrTxClosed from
// now on, as after Commit.
func (t *connTx) endWith(ctx context.Context, b *pgx.Batch) error {
	err := t.conn.Conn().SendBatch(ctx, b).Close()
	t.release()
	t.Tx = closedTx{}
	return pgsql.Classify(err)
}

// ErrConnBusy is returned by Commit when the handler left a result set
// open, with rows not closed. pgx cannot send the COMMIT, so the
// transaction certainly did not commit. It is the handler's failure, not a
// transient one. It wraps store.ErrTxUnusable.
var ErrConnBusy = fmt.Errorf("pgxstore: the connection is busy with a result set the handler left open (close its rows); the transaction did not commit: %w", store.ErrTxUnusable)

// ended reports whether tx, one of the driver's own, was committed or
// rolled back (by a handler): its connection is back in the pool, maybe in
// use by another transaction, and must not be looked at.
func ended(tx pgx.Tx) bool {
	ct, ok := tx.(*connTx)
	return ok && ct.conn == nil
}

// txDone is the error of a method given a tx already ended.
func txDone(op string, err error) error {
	return fmt.Errorf("pgxstore: %s: %w: %w", op, store.ErrTxDone, err)
}

// Commit commits tx. A tx already ended wraps store.ErrTxDone.
func (d *Driver) Commit(ctx context.Context, tx pgx.Tx) error {
	if ended(tx) {
		return txDone("commit", pgx.ErrTxClosed)
	}
	if tx.Conn().PgConn().IsBusy() {
		return ErrConnBusy
	}
	err := tx.Commit(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return txDone("commit", err)
	}
	if pgsql.CommitAborted(err) {
		return fmt.Errorf("pgxstore: %w", aborted(tx, true, err))
	}
	return pgsql.Classify(err)
}

// CheckTx returns an error when tx cannot commit. It costs no round trip,
// since pgx knows both cases from the connection.
//   - tx is aborted after a failed statement the handler swallowed. Its
//     COMMIT would roll back.
//   - The handler left a result set open, and CheckTx returns
//     [ErrConnBusy]. pgx cannot send the COMMIT.
//
// A tx that a handler already ended wraps store.ErrTxDone.
func (d *Driver) CheckTx(ctx context.Context, tx pgx.Tx, savepoint string) error {
	if ended(tx) {
		return txDone("check", pgx.ErrTxClosed)
	}
	if tx.Conn().PgConn().IsBusy() {
		return ErrConnBusy
	}
	if err := pgsql.CheckTxStatus(tx.Conn().PgConn().TxStatus()); err != nil {
		return fmt.Errorf("pgxstore: %w", aborted(tx, false, nil))
	}
	return nil
}

// Rollback rolls tx back. A closed tx is not an error.
func (d *Driver) Rollback(ctx context.Context, tx pgx.Tx) error {
	if tx == nil {
		return nil
	}
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return pgsql.Classify(err)
	}
	return nil
}

// RollbackToSavepoint rolls tx back to the savepoint name. A tx that a
// handler already ended wraps store.ErrTxDone.
func (d *Driver) RollbackToSavepoint(ctx context.Context, tx pgx.Tx, name string) error {
	if ended(tx) {
		return txDone("rollback to savepoint", pgx.ErrTxClosed)
	}
	if tx.Conn().PgConn().IsBusy() {
		return ErrConnBusy
	}
	_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+store.QuoteDouble(name))
	if errors.Is(err, pgx.ErrTxClosed) {
		return txDone("rollback to savepoint", err)
	}
	return pgsql.Classify(err)
}

// AttemptAdd counts a failed attempt or a transient failure.
func (d *Driver) AttemptAdd(ctx context.Context, tx pgx.Tx, p *store.AttemptParams) (store.Attempts, error) {
	var a store.Attempts
	counted, transient := p.Increments()
	err := tx.QueryRow(ctx, d.q.AttemptAdd, p.Consumer, p.MessageID, p.Error, counted, transient, failgroup.Of(p.Error)).Scan(&a.Counted, &a.Transient)
	return a, pgsql.Classify(err)
}

// AttemptsDelete forgets a message's failed attempts.
func (d *Driver) AttemptsDelete(ctx context.Context, tx pgx.Tx, key store.Key) error {
	_, err := tx.Exec(ctx, d.q.AttemptsDelete, key.Consumer, key.MessageID)
	return pgsql.Classify(err)
}

// DeadLetterAdd writes a dead letter and the dead-marked inbox row.
func (d *Driver) DeadLetterAdd(ctx context.Context, tx pgx.Tx, p *store.DeadLetterParams) (bool, error) {
	if p.Invalid {
		_, err := tx.Exec(ctx, d.q.DeadLetterInsert, p.Consumer, p.MessageID, p.Type, p.Payload, p.Headers, p.Error, p.Attempts, failgroup.Of(p.Error))
		return err == nil, pgsql.Classify(err)
	}
	var id int64
	err := tx.QueryRow(ctx, d.q.DeadLetterAdd, p.Consumer, p.MessageID, p.Type, p.Fingerprint,
		p.Payload, p.Headers, p.Error, p.Attempts, failgroup.Of(p.Error)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, pgsql.Classify(err)
}

func scanDeadLetter(row pgx.Row) (*store.DeadLetter, error) {
	dl := &store.DeadLetter{}
	var failedAt int64 // unix milliseconds
	err := row.Scan(&dl.ID, &dl.Key.Consumer, &dl.Key.MessageID, &dl.Type, &dl.Payload, &dl.Headers,
		&dl.Error, &dl.Attempts, &failedAt)
	dl.FailedAt = time.UnixMilli(failedAt).UTC()
	return dl, err
}

// DeadLetterList lists dead letters.
func (d *Driver) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	rows, err := d.pool.Query(ctx, d.q.DeadLetterList, p.Consumer, p.AfterID, max(p.Limit, 1))
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.DeadLetter, error) {
		return scanDeadLetter(row)
	})
	return out, pgsql.Classify(err)
}

// DeadLetterTake deletes and returns a dead letter.
func (d *Driver) DeadLetterTake(ctx context.Context, tx pgx.Tx, consumer []byte, id int64) (*store.DeadLetter, error) {
	dl, err := scanDeadLetter(tx.QueryRow(ctx, d.q.DeadLetterTake, consumer, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	return dl, nil
}

// InboxReclaim claims a dead-lettered message again, for a replay.
func (d *Driver) InboxReclaim(ctx context.Context, tx pgx.Tx, p *store.ClaimParams) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, d.q.InboxReclaim, p.Consumer, p.MessageID, p.Type, p.Fingerprint).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, pgsql.Classify(err)
}

// Prune deletes one batch of old rows, under an advisory lock per table,
// waiting up to store.DefaultLockTimeout for a row another transaction
// holds.
func (d *Driver) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	return d.pruneLocked(ctx, d.q.LockKey, func(tx pgx.Tx, res *store.PruneResult) error {
		var from, last *time.Time
		if !p.From.IsZero() {
			from = &p.From
		}
		if err := tx.QueryRow(ctx, d.q.PruneInbox, p.Retention.Milliseconds(), max(p.Limit, 1), from).Scan(&res.Deleted, &last); err != nil {
			return err
		}
		if last != nil {
			res.Last = *last
		}
		tag, err := tx.Exec(ctx, d.q.PruneAttempts, p.Retention.Milliseconds(), max(p.Limit, 1))
		res.Deleted += int(tag.RowsAffected())
		return err
	})
}

// pruneLocked runs one batch of a pruner, fn, in a transaction that holds
// the advisory lock key, so that one pruner at a time works on a table.
// When another holds it, it runs nothing and reports Busy.
func (d *Driver) pruneLocked(ctx context.Context, key int64, fn func(tx pgx.Tx, res *store.PruneResult) error) (*store.PruneResult, error) {
	res := &store.PruneResult{}
	err := d.inTx(ctx, store.DefaultLockTimeout, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, d.q.TryLock, key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			res.Busy = true
			return nil
		}
		return fn(tx, res)
	})
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	return res, nil
}

// inTx runs fn in a transaction of the driver's (Begin) with lock timeout
// lt, and commits it when fn returns nil.
func (d *Driver) inTx(ctx context.Context, lt time.Duration, fn func(pgx.Tx) error) error {
	tx, err := d.begin(ctx, lt, nil, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit: nothing to do
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Migrate applies the missing migrations under an advisory lock. Then it
// fills in the error groups of the dead letters and attempts written
// before migration 5 recorded them.
func (d *Driver) Migrate(ctx context.Context) error {
	if err := d.applyMigrations(ctx); err != nil {
		return err
	}
	_, err := d.fillGroups(ctx)
	return err
}

// applyMigrations applies the missing migrations under an advisory lock,
// in one transaction.
func (d *Driver) applyMigrations(ctx context.Context) error {
	err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, d.q.Lock, d.q.MigrateLockKey); err != nil {
			return err
		}
		if d.q.CreateSchema != "" {
			if _, err := tx.Exec(ctx, d.q.CreateSchema); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, d.q.CreateMigrations); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, d.q.AppliedVersions)
		if err != nil {
			return err
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		done := make(map[int]bool, len(applied))
		for _, v := range applied {
			done[v] = true
		}
		for _, m := range d.q.Migrations {
			if done[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, d.q.RecordMigration, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgxstore: migrate: %w", pgsql.Classify(err))
	}
	return nil
}

// Migrations returns the SQL of every migration.
func (d *Driver) Migrations() []store.Migration {
	return append([]store.Migration(nil), d.q.Migrations...)
}

// DurabilityWarnings warns of synchronous_commit=off, fsync=off, standbys
// that commits wait for none of, and a synchronous_standby_names that
// names no standby streaming. On a standby, its error wraps
// [store.ErrReadOnly].
func (d *Driver) DurabilityWarnings(ctx context.Context) ([]string, error) {
	dur, err := pgsql.ScanDurability(d.pool.QueryRow(ctx, d.q.Durability).Scan)
	if err != nil {
		return nil, pgsql.Classify(err)
	}
	return dur.Warnings()
}

// Migrations returns the SQL of the PostgreSQL migrations for tables t,
// without a database. To apply them yourself, use MigrationScript, which
// also records them as Migrate does.
func Migrations(t store.Tables) ([]store.Migration, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	q, err := pgsql.New(t)
	if err != nil {
		return nil, err
	}
	return q.Migrations, nil
}

// MigrationScript returns the migrations for tables t as one SQL script,
// without a database. It is for teams that apply SQL themselves, with psql
// -v ON_ERROR_STOP=1 -f FILE.
//
// The script runs in one transaction, under Migrate's advisory lock. It
// creates the schema and the migrations table if missing. It runs each
// migration whose version is not recorded, and records it as Migrate does.
// Applying it twice, or after Migrate, changes nothing. Migrate afterwards
// finds nothing to do.
func MigrationScript(t store.Tables) (string, error) {
	q, err := pgsql.New(t)
	if err != nil {
		return "", err
	}
	return q.Script()
}
