// Package sqlstore is the inbox's store on database/sql.
//
// Its [Driver] is a store.Driver[*sql.Tx], written once for every dialect.
// Each dialect lives in a package of its own, which links only its own
// database driver.
//   - sqlstore/sqlite is SQLite on modernc.org/sqlite, in pure Go.
//   - sqlstore/mysql is MySQL and MariaDB on github.com/go-sql-driver/mysql.
//   - sqlstore/postgres is PostgreSQL on pgx's stdlib driver.
//
// Open a pool, give its dialect to [New], and migrate.
//
//	db, err := sqlite.Open("inbox.db", nil) // or mysql.Open(dsn, nil), or sql.Open("pgx", dsn)
//	...
//	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect}) // or mysql.Dialect, postgres.Dialect
//	...
//	err = driver.Migrate(ctx)
//
// This package imports no database driver. Each dialect keeps its SQL in one
// file and its migrations in embedded files. PostgreSQL's SQL is
// internal/pgsql's, shared with store/pgxstore.
//
// # Message IDs
//
// Message IDs and consumers are bound as bytes. They are stored as BLOBs,
// VARBINARY or bytea. NUL bytes and invalid UTF-8 are kept as they are. IDs
// that differ only in case or trailing spaces are distinct.
//
// # Pools
//
// database/sql keeps 2 idle connections unless told otherwise. The dialects'
// Open functions keep [DefaultMaxIdleConns].
//
// # The outbox
//
// [Driver] is the outbox's writer and its relay's store on every dialect.
// Give it to outbox.New and outbox.NewRelay. On PostgreSQL, the relay listens
// for new rows with LISTEN/NOTIFY, through pgx's stdlib driver. On SQLite and
// MySQL it polls, since [Driver.OutboxListen] returns an error wrapping
// store.ErrNoNotifications there. MySQL 8.0 and MariaDB 10.6 relays claim with
// SELECT ... FOR UPDATE SKIP LOCKED. SQLite's claims take turns for its
// single write lock.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox/internal/failgroup"
	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// DefaultMaxIdleConns is how many idle connections the Open functions of the
// dialect packages keep in their pools. Keep at least as many as the
// consumer's Workers, plus the connections the application uses besides. On
// a *sql.DB you open yourself, as with sql.Open("pgx", dsn), call
// db.SetMaxIdleConns likewise.
const DefaultMaxIdleConns = sqldialect.DefaultMaxIdleConns

// ErrClientFoundRows is wrapped by a MySQL claim on a connection that counts
// found rows, as clientFoundRows=true does. A duplicate would look new there.
// mysql.Open refuses such a DSN.
var ErrClientFoundRows = errors.New("sqlstore: clientFoundRows=true makes a duplicate claim look new; remove it from the MySQL DSN")

// Config configures a Driver.
type Config struct {
	// Dialect is the dialect of the database. Required.
	Dialect Dialect
	// Tables names the schema and prefix, as [store.Tables] tells. SQLite has no
	// schemas, and a non-empty Schema is rejected with an error wrapping
	// [store.ErrInvalidTables]. On MySQL the schema is a database. Default no
	// prefix, in the connection's database or schema.
	Tables store.Tables
	// Logger receives what the driver has to say, such as migrations applied and
	// rollbacks that failed. Default [slog.Default].
	Logger *slog.Logger
	// OutboxNotifyEvery is the least time between two notifications of relays by
	// the outbox's writes. Only PostgreSQL notifies. A write notifies when the
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

// DefaultOutboxNotifyEvery is the default of [Config.OutboxNotifyEvery].
const DefaultOutboxNotifyEvery = 10 * time.Millisecond

// Driver is the inbox's store.Driver on a *sql.DB.
type Driver struct {
	db         *sql.DB
	dialect    sqldialect.Dialect
	tables     store.Tables
	txOpts     *sql.TxOptions
	q          sqldialect.Queries
	migrations []store.Migration
	log        *slog.Logger
	// notifyEvery is Config.OutboxNotifyEvery; lastNotify the unix
	// nanoseconds of the last write that notified.
	notifyEvery time.Duration
	lastNotify  atomic.Int64

	// unprepared: the server refused to prepare a claim statement; they
	// are sent as text since.
	unprepared atomic.Bool
	// stmts holds prepared claim statements (query -> *sql.Stmt) for a
	// dialect whose driver otherwise prepares, executes and closes each
	// statement with arguments (MySQL: three round trips, not one).
	stmts sync.Map
}

var _ store.Driver[*sql.Tx] = (*Driver)(nil)

// ErrInvalidConfig is wrapped by the errors of New, Migrations, sqlite.Open
// and mysql.Open for a configuration they refuse. Invalid table names also
// wrap [store.ErrInvalidTables]. A DSN with clientFoundRows=true also wraps
// [ErrClientFoundRows].
var ErrInvalidConfig = errors.New("sqlstore: invalid config")

// New returns a Driver on db. It checks cfg, the table names first. It
// prepares every statement's text and runs no SQL.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if cfg == nil || cfg.Dialect.d == nil {
		return nil, fmt.Errorf("%w: Config.Dialect is required (sqlite.Dialect, mysql.Dialect or postgres.Dialect of the packages under store/sqlstore)", ErrInvalidConfig)
	}
	d := cfg.Dialect.d
	if err := checkTables(d, cfg.Tables); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrInvalidConfig)
	}
	fsys, dir := d.Migrations()
	migrations, err := migrate.Load(fsys, dir, cfg.Tables, d.Quote)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: loading the %s migrations: %w", d.Name(), err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	notifyEvery := cfg.OutboxNotifyEvery
	if notifyEvery == 0 {
		notifyEvery = DefaultOutboxNotifyEvery
	}
	return &Driver{
		db:          db,
		dialect:     d,
		tables:      cfg.Tables,
		txOpts:      d.TxOptions(db),
		q:           sqldialect.Render(d.Templates(), cfg.Tables, d.Quote),
		migrations:  migrations,
		log:         log,
		notifyEvery: notifyEvery,
	}, nil
}

// Dialect returns "sqlite", "mysql" or "postgres".
func (d *Driver) Dialect() string { return d.dialect.Name() }

// Retryable reports whether err, a handler's error, carries an error of the
// dialect that a later attempt may not hit.
//   - MySQL: a deadlock or lock wait timeout, errors 1213 and 1205.
//   - PostgreSQL: a serialization failure, deadlock or lock timeout, SQLSTATE
//     40001, 40P01 and 55P03.
//   - SQLite: a busy database.
//   - A lost connection, as database/sql or MySQL's driver reports it. On
//     PostgreSQL, that is a failure to connect.
func (d *Driver) Retryable(err error) bool { return err != nil && d.dialect.Transient(err) }

// Conflict reports whether err is a lock conflict with another transaction,
// for [store.ConflictReporter]. That is a deadlock, a serialization failure
// or a lock wait timeout on PostgreSQL and MySQL. It is never one on SQLite,
// whose one writer at a time conflicts with no one.
func (d *Driver) Conflict(err error) bool { return err != nil && d.dialect.Conflict(err) }

// Unrecoverable reports whether err is an error of the dialect that no retry
// fixes. Examples are a missing table or column, denied permissions, an
// unknown database, refused credentials, and a read-only or unopenable
// SQLite file.
func (d *Driver) Unrecoverable(err error) bool { return err != nil && d.dialect.Unrecoverable(err) }

// SchemaVersion returns the highest applied migration version, 0 when the
// tables were never migrated.
func (d *Driver) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, d.q.SchemaVersion).Scan(&v)
	if err != nil && d.dialect.MissingTable(err) {
		return 0, nil
	}
	return v, d.fail("schema version", err)
}

// fail adds op to err and marks it retryable when a later attempt may not
// hit it; errors.As still reaches the database's own error.
func (d *Driver) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrTxDone) { // a handler ended the inbox's transaction
		return fmt.Errorf("sqlstore: %s: %w: %w", op, store.ErrTxDone, err)
	}
	err = fmt.Errorf("sqlstore: %s: %w", op, err)
	if d.dialect.Retryable(err) {
		return store.Retryable(err)
	}
	return err
}

// Begin opens a transaction. The mysql and sqlite packages tell what
// LockTimeout and the isolation level mean there.
func (d *Driver) Begin(ctx context.Context, p *store.BeginParams) (*sql.Tx, error) {
	if p == nil {
		tx, err := d.db.BeginTx(ctx, d.txOpts)
		return tx, d.fail("begin", err)
	}
	tx, err := d.beginOn(ctx, d.db, p.LockTimeout)
	return tx, d.fail("begin", err)
}

// beginOn begins a transaction on db (a *sql.DB or *sql.Conn) with the
// lock timeout lt: the dialect's connections set it before BEGIN where
// they wait for a lock at BEGIN (SQLite), and SetLockTimeout sets it
// where it was not.
func (d *Driver) beginOn(ctx context.Context, db interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, lt time.Duration) (*sql.Tx, error) {
	tx, err := db.BeginTx(sqldialect.WithLockTimeout(ctx, lt), d.txOpts)
	if err != nil {
		return nil, err
	}
	if err := d.dialect.SetLockTimeout(ctx, tx, lt); err != nil {
		d.rollbackQuietly(tx)
		return nil, fmt.Errorf("set lock timeout: %w", err)
	}
	return tx, nil
}

// BeginClaim opens a transaction and claims the message in it. On a
// duplicate, it rolls the transaction back itself and returns a nil tx.
//
// On MySQL, a claim may deadlock with racing deliveries of the message whose
// holder rolled back. It then begins again, a few times at most, each time
// waiting up to innodb_lock_wait_timeout. It does not return the deadlock
// for a redelivery.
func (d *Driver) BeginClaim(ctx context.Context, p *store.ClaimParams) (*sql.Tx, *store.ClaimResult, error) {
	bp := &store.BeginParams{LockTimeout: p.LockTimeout}
	if d.q.ClaimSettingLockTimeout != "" {
		bp = nil // the claim sets it: one round trip less
	}
	if d.dialect.PrepareClaims() && !d.unprepared.Load() {
		// Before BEGIN: preparing takes a connection of the pool.
		d.prepare(ctx, d.q.Claim)
		d.prepare(ctx, d.q.ClaimLookup)
	}
	for restarts := 0; ; restarts++ {
		tx, err := d.Begin(ctx, bp)
		if err != nil {
			return nil, nil, err
		}
		res, err := d.claim(ctx, tx, p, bp == nil, true)
		if err == nil && res.Claimed {
			return tx, res, nil
		}
		d.rollbackQuietly(tx)
		if err != nil && restarts < claimRestarts && d.dialect.ClaimDeadlock(err) && ctx.Err() == nil {
			continue // nothing but the claim ran in tx
		}
		return nil, res, err
	}
}

// claimRestarts bounds how often BeginClaim begins again after its claim
// deadlocked (see the dialects' claimDeadlock): once is enough unless the
// racing delivery that survived the deadlock rolls back too.
const claimRestarts = 3

// Claim claims the message in the caller's tx, and sets the lock timeout
// for the rest of tx. When p.Savepoint is set, Claim creates it just before
// the claim. Rolling back to it then undoes the claim together with the
// handler's writes. The savepoint comes after the lock timeout, which a
// rollback to it would otherwise undo.
func (d *Driver) Claim(ctx context.Context, tx *sql.Tx, p *store.ClaimParams) (*store.ClaimResult, error) {
	if p.Savepoint != "" {
		if err := d.dialect.SetLockTimeoutAndSavepoint(ctx, tx, p.LockTimeout, d.dialect.Quote(p.Savepoint)); err != nil {
			return nil, d.fail("lock timeout and savepoint", err)
		}
		return d.claim(ctx, tx, p, false, false) // tx may come from another pool: no prepared statements
	}
	setLockTimeout := d.q.ClaimSettingLockTimeout != "" // else a statement of its own
	if !setLockTimeout {
		if err := d.dialect.SetLockTimeout(ctx, tx, p.LockTimeout); err != nil {
			return nil, d.fail("set lock timeout", err)
		}
	}
	return d.claim(ctx, tx, p, setLockTimeout, false)
}

// claim runs the claim; setLockTimeout uses the dialect's statement that
// also sets the lock timeout for the rest of tx; prepared uses the prepared
// statements, for a tx of the driver's own pool.
func (d *Driver) claim(ctx context.Context, tx *sql.Tx, p *store.ClaimParams, setLockTimeout, prepared bool) (*store.ClaimResult, error) {
	prepared = prepared && !d.unprepared.Load()
	res, err := d.claimWith(ctx, tx, p, setLockTimeout, prepared)
	if err != nil && prepared && d.dialect.PrepareRefused(err) {
		// The statement did not run: send it as text, in the same tx, and
		// from now on for every claim.
		d.stopPreparing(err)
		return d.claimWith(ctx, tx, p, setLockTimeout, false)
	}
	return res, err
}

// stopPreparing gives up the prepared claim statements after the server
// refused to prepare one on a connection (MySQL: max_prepared_stmt_count
// reached, or a proxy without server-side prepares), and closes them, which
// frees their slots on the connections that have them.
func (d *Driver) stopPreparing(err error) {
	if d.unprepared.Swap(true) {
		return
	}
	d.log.Warn("sqlstore: the server refused to prepare the claim statements; sending them as text from now on",
		"dialect", d.dialect.Name(), "error", err)
	d.stmts.Range(func(query, st any) bool {
		d.stmts.Delete(query)
		_ = st.(*sql.Stmt).Close()
		return true
	})
}

// claimWith runs the claim, as claim says.
func (d *Driver) claimWith(ctx context.Context, tx *sql.Tx, p *store.ClaimParams, setLockTimeout, prepared bool) (*store.ClaimResult, error) {
	query, args := d.q.Claim, []any{p.Consumer, p.MessageID, p.Type, nullBytes(p.Fingerprint)}
	if setLockTimeout {
		query, args = d.q.ClaimSettingLockTimeout, append(args, d.q.LockTimeoutText(p.LockTimeout))
	}
	inserted, err := d.insertIfAbsent(ctx, d.stmt(ctx, tx, query, prepared), args...)
	if err != nil {
		return nil, d.fail("claim", err)
	}
	if inserted {
		return &store.ClaimResult{Claimed: true}, nil
	}
	res := &store.ClaimResult{}
	if p.Fingerprint == nil { // nothing to compare (Config.NoFingerprint)
		return res, nil
	}
	err = d.stmt(ctx, tx, d.q.ClaimLookup, prepared).QueryRowContext(ctx, p.Consumer, p.MessageID).Scan(&res.Fingerprint, &res.Type)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // no row: gone meanwhile, fingerprint unknown
		return nil, d.fail("claim: reading the duplicate", err)
	}
	return res, nil
}

// prepare prepares query on the pool once, for stmt; a failure leaves it
// unprepared (stmt then sends it as it is), and a refusal (prepareRefused)
// stops preparing for good.
func (d *Driver) prepare(ctx context.Context, query string) {
	if _, ok := d.stmts.Load(query); ok || d.unprepared.Load() {
		return
	}
	st, err := d.db.PrepareContext(ctx, query)
	if err != nil {
		if d.dialect.PrepareRefused(err) {
			d.stopPreparing(err)
		}
		return
	}
	if _, loaded := d.stmts.LoadOrStore(query, st); loaded {
		_ = st.Close()
		return
	}
	if d.unprepared.Load() && d.stmts.CompareAndDelete(query, st) { // stopPreparing ran meanwhile
		_ = st.Close()
	}
}

// stmt returns query as a statement of tx: with prepared, the prepared one
// when there is one (database/sql prepares it once per connection and
// keeps it; tx must come from the driver's pool), else the plain text.
func (d *Driver) stmt(ctx context.Context, tx *sql.Tx, query string, prepared bool) txStmt {
	if prepared {
		if st, ok := d.stmts.Load(query); ok {
			return tx.StmtContext(ctx, st.(*sql.Stmt))
		}
	}
	return plainStmt{tx: tx, query: query}
}

// txStmt is what stmt returns: a *sql.Stmt of the transaction, or the
// query sent as text.
type txStmt interface {
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, args ...any) *sql.Row
}

type plainStmt struct {
	tx    *sql.Tx
	query string
}

func (s plainStmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return s.tx.ExecContext(ctx, s.query, args...)
}

func (s plainStmt) QueryRowContext(ctx context.Context, args ...any) *sql.Row {
	return s.tx.QueryRowContext(ctx, s.query, args...)
}

// insertIfAbsent runs an insert-if-absent statement and reports whether it
// inserted, the way the dialect tells it.
func (d *Driver) insertIfAbsent(ctx context.Context, st txStmt, args ...any) (bool, error) {
	if d.q.Returning {
		var one int
		err := st.QueryRowContext(ctx, args...).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	r, err := st.ExecContext(ctx, args...)
	if err != nil {
		return false, err
	}
	return insertedUnlessMarked(r)
}

// insertedUnlessMarked reads the result of an insert-if-absent statement
// that marks a row it leaves alone with LAST_INSERT_ID(1) (MySQL, see
// sqldialect.Queries.Returning): whether it inserted.
func insertedUnlessMarked(r sql.Result) (bool, error) {
	n, err := r.RowsAffected()
	if err != nil {
		return false, err
	}
	id, err := r.LastInsertId()
	if err != nil {
		return false, err
	}
	switch left := id == 1; {
	case left && n == 0:
		return false, nil
	case !left && n >= 1:
		return true, nil
	case left: // the row was left alone, yet counted
		return false, fmt.Errorf("the connection counts found rows, not changed rows: %w", ErrClientFoundRows)
	default:
		return false, fmt.Errorf("the statement reported %d rows affected and no row left alone", n)
	}
}

// Commit commits tx. An error is retryable when it leaves the outcome
// unknown, as a broken connection does. So is one that a later attempt may
// not hit, such as SQLITE_BUSY. A tx already ended wraps [store.ErrTxDone].
func (d *Driver) Commit(_ context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	if a, ok := d.dialect.(sqldialect.Aborter); ok && err != nil {
		if aerr := a.Aborted(err, true); aerr != nil {
			return fmt.Errorf("sqlstore: %w", aerr)
		}
	}
	return d.fail("commit", err)
}

// CheckTx releases the savepoint. That fails when tx can no longer commit
// what it did since. PostgreSQL aborts a transaction after a failed
// statement. MySQL rolls it back on a deadlock, and later statements then run
// in a new transaction that would commit without the claim.
//
// Without a savepoint, as in ProcessBatch's first pass, CheckTx checks tx
// since [Driver.ClaimBatch]. PostgreSQL makes and releases a savepoint,
// which fails in an aborted transaction and outside one. On MySQL and
// SQLite, a transaction that the server rolled back or a handler ended
// leaves nothing behind to fail. CheckTx there releases the savepoint that
// ClaimBatch created after its claim.
func (d *Driver) CheckTx(ctx context.Context, tx *sql.Tx, savepoint string) error {
	check := "RELEASE SAVEPOINT " + d.dialect.Quote(savepoint)
	switch {
	case savepoint == "" && d.q.TxAlive != "":
		check = d.q.TxAlive
	case savepoint == "":
		check = "RELEASE SAVEPOINT " + d.dialect.Quote(claimedSavepoint)
	}
	if _, err := tx.ExecContext(ctx, check); err != nil {
		if uerr := d.unusable("check", err); uerr != nil {
			return uerr
		}
		return fmt.Errorf("sqlstore: the transaction can no longer commit what it did since the claim (a failed statement's error was not returned): %w", err)
	}
	return nil
}

// unusable returns the error to report for err, that of a statement in a
// transaction after its handler ran, when it says that the handler ended
// the transaction or left a result set open, or that the database aborted
// the transaction; nil when it says none of these.
func (d *Driver) unusable(op string, err error) error {
	if errors.Is(err, sql.ErrTxDone) { // a handler ended tx
		return d.fail(op, err)
	}
	if d.dialect.ConnBusy(err) { // the handler's fault: not wrapped, so not transient
		return fmt.Errorf("sqlstore: %s: %w (a result set left open: close its rows): %v", op, store.ErrTxUnusable, err)
	}
	if a, ok := d.dialect.(sqldialect.Aborter); ok {
		if aerr := a.Aborted(err, false); aerr != nil {
			return fmt.Errorf("sqlstore: %w", aerr)
		}
	}
	return nil
}

// Rollback rolls tx back. A transaction that is already over is not an
// error, nor is a nil tx. It may have committed, rolled back or failed at
// COMMIT.
func (d *Driver) Rollback(_ context.Context, tx *sql.Tx) error {
	if tx == nil {
		return nil
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return d.fail("rollback", err)
	}
	return nil
}

func (d *Driver) rollbackQuietly(tx *sql.Tx) {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		d.log.Warn("sqlstore: rollback failed", "dialect", d.dialect.Name(), "error", err)
	}
}

// RollbackToSavepoint undoes what tx did after the named savepoint.
func (d *Driver) RollbackToSavepoint(ctx context.Context, tx *sql.Tx, name string) error {
	if name == "" {
		return errors.New("sqlstore: rollback to savepoint: empty name")
	}
	_, err := tx.ExecContext(ctx, d.q.RollbackToSavepoint+d.dialect.Quote(name))
	if errors.Is(err, sql.ErrTxDone) { // a handler ended tx
		return d.fail("rollback to savepoint", err)
	}
	if err != nil && d.dialect.ConnBusy(err) {
		return fmt.Errorf("sqlstore: rollback to savepoint: %w (a result set left open: close its rows): %v", store.ErrTxUnusable, err)
	}
	if err != nil && d.dialect.SavepointGone(err) {
		// The server rolled back the whole transaction, the claim with it:
		// nothing is left to undo. What the inbox records next must be one
		// transaction again, committed by the caller's COMMIT.
		if _, err := tx.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return d.fail("rollback to savepoint: the transaction was rolled back; starting one", err)
		}
		return fmt.Errorf("sqlstore: rollback to savepoint: %w", store.ErrTxRestarted)
	}
	return d.fail("rollback to savepoint", err)
}

// AttemptAdd counts a failed attempt or a transient failure and returns
// the counts so far.
func (d *Driver) AttemptAdd(ctx context.Context, tx *sql.Tx, p *store.AttemptParams) (store.Attempts, error) {
	var a store.Attempts
	counted, transient := p.Increments()
	args := []any{p.Consumer, p.MessageID, p.Error, counted, transient, failgroup.Of(p.Error)}
	if d.q.AttemptCount == "" {
		err := tx.QueryRowContext(ctx, d.q.AttemptAdd, args...).Scan(&a.Counted, &a.Transient)
		return a, d.fail("add attempt", err)
	}
	if _, err := tx.ExecContext(ctx, d.q.AttemptAdd, args...); err != nil {
		return a, d.fail("add attempt", err)
	}
	err := tx.QueryRowContext(ctx, d.q.AttemptCount, p.Consumer, p.MessageID).Scan(&a.Counted, &a.Transient)
	return a, d.fail("add attempt: reading the count", err)
}

// AttemptsDelete forgets a message's failed attempts.
func (d *Driver) AttemptsDelete(ctx context.Context, tx *sql.Tx, key store.Key) error {
	_, err := tx.ExecContext(ctx, d.q.AttemptsDelete, key.Consumer, key.MessageID)
	return d.fail("delete attempts", err)
}

// DeadLetterAdd inserts the message's inbox row marked dead and writes the
// dead letter. It returns false, and writes nothing, when the row exists.
func (d *Driver) DeadLetterAdd(ctx context.Context, tx *sql.Tx, p *store.DeadLetterParams) (bool, error) {
	if !p.Invalid {
		ok, err := d.insertIfAbsent(ctx, d.stmt(ctx, tx, d.q.DeadInsert, false), p.Consumer, p.MessageID, p.Type, nullBytes(p.Fingerprint))
		if err != nil {
			return false, d.fail("dead letter: inserting the inbox row", err)
		}
		if !ok {
			return false, nil
		}
	}
	if c, ok := d.dialect.(sqldialect.PacketChecker); ok {
		if err := c.CheckPacket(ctx, tx, p.Payload, p.Headers, []byte(p.Error), p.MessageID, p.Consumer, []byte(p.Type)); err != nil {
			return false, d.fail("dead letter", err)
		}
	}
	_, err := tx.ExecContext(ctx, d.q.DeadLetterInsert,
		p.Consumer, p.MessageID, p.Type, nullBytes(p.Payload), nullBytes(p.Headers), p.Error, p.Attempts, failgroup.Of(p.Error))
	if err != nil {
		if d.dialect.TooLarge(err) {
			err = fmt.Errorf("%w: %w", store.ErrTooLarge, err)
		}
		return false, d.fail("dead letter: inserting", err)
	}
	return true, nil
}

// DeadLetterList lists a consumer's dead letters in ID order, outside any
// transaction.
func (d *Driver) DeadLetterList(ctx context.Context, p *store.DeadLetterListParams) ([]*store.DeadLetter, error) {
	if p.Limit < 1 {
		return nil, fmt.Errorf("sqlstore: list dead letters: limit %d, want at least 1", p.Limit)
	}
	rows, err := d.db.QueryContext(ctx, d.q.DeadLetterList, p.Consumer, p.AfterID, p.Limit)
	if err != nil {
		return nil, d.fail("list dead letters", err)
	}
	defer rows.Close()
	var out []*store.DeadLetter
	for rows.Next() {
		dl, err := scanDeadLetter(rows)
		if err != nil {
			return nil, d.fail("list dead letters", err)
		}
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail("list dead letters", err)
	}
	return out, nil
}

// DeadLetterTake deletes one dead letter in tx and returns it. It returns
// [store.ErrNotFound] when the consumer has none with that ID.
func (d *Driver) DeadLetterTake(ctx context.Context, tx *sql.Tx, consumer []byte, id int64) (*store.DeadLetter, error) {
	dl, err := scanDeadLetter(tx.QueryRowContext(ctx, d.q.DeadLetterGet, consumer, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: take dead letter %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, d.fail("take dead letter", err)
	}
	if _, err := tx.ExecContext(ctx, d.q.DeadLetterDelete, consumer, id); err != nil {
		return nil, d.fail("take dead letter", err)
	}
	return dl, nil
}

func scanDeadLetter(row interface{ Scan(...any) error }) (*store.DeadLetter, error) {
	var dl store.DeadLetter
	var failedAt int64
	err := row.Scan(&dl.ID, &dl.Key.Consumer, &dl.Key.MessageID, &dl.Type,
		&dl.Payload, &dl.Headers, &dl.Error, &dl.Attempts, &failedAt)
	if err != nil {
		return nil, err
	}
	dl.FailedAt = time.UnixMilli(failedAt).UTC()
	return &dl, nil
}

// InboxReclaim claims a dead-lettered message again, for a replay.
func (d *Driver) InboxReclaim(ctx context.Context, tx *sql.Tx, p *store.ClaimParams) (bool, error) {
	ok, err := d.insertIfAbsent(ctx, d.stmt(ctx, tx, d.q.Reclaim, false), p.Consumer, p.MessageID, p.Type, nullBytes(p.Fingerprint))
	return ok, d.fail("reclaim", err)
}

// Prune deletes at most p.Limit inbox rows and p.Limit attempt records
// older than p.Retention, in one transaction. Age is by the database's
// clock. A database busy with another writer past its lock timeout is
// reported as Busy, not as an error.
func (d *Driver) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := checkPrune(p); err != nil {
		return nil, fmt.Errorf("sqlstore: prune: %w", err)
	}
	return d.pruneAlone(ctx, "prune", sqldialect.InboxPruner, func(tx *sql.Tx) (*store.PruneResult, error) {
		return d.pruneInbox(ctx, tx, p)
	})
}

func checkPrune(p *store.PruneParams) error {
	if p.Retention <= 0 || p.Limit < 1 {
		return fmt.Errorf("retention %v and limit %d must be positive", p.Retention, p.Limit)
	}
	return nil
}

// pruneAlone runs del in a transaction of its own, under pruner's lock. It
// reports Busy when another pruner holds the lock, or when the database
// was busy with another writer past the lock timeout.
func (d *Driver) pruneAlone(ctx context.Context, op string, pruner sqldialect.Pruner, del func(*sql.Tx) (*store.PruneResult, error)) (*store.PruneResult, error) {
	res, err := d.pruneLocked(ctx, pruner, del)
	if err != nil && d.dialect.Busy(err) && ctx.Err() == nil {
		return &store.PruneResult{Busy: true}, nil
	}
	return res, d.fail(op, err)
}

func (d *Driver) pruneLocked(ctx context.Context, pruner sqldialect.Pruner, del func(*sql.Tx) (*store.PruneResult, error)) (_ *store.PruneResult, err error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if ok, err := d.dialect.LockPrune(ctx, conn, d.tables, pruner); err != nil || !ok {
		if err != nil {
			dropConn(conn) // it may hold the lock
		}
		return &store.PruneResult{Busy: !ok}, err
	}
	defer func() {
		if uerr := d.dialect.UnlockPrune(context.WithoutCancel(ctx), conn, d.tables, pruner); uerr != nil {
			dropConn(conn) // closing the connection releases its lock
			err = errors.Join(err, uerr)
		}
	}()
	tx, err := d.beginOn(ctx, conn, store.DefaultLockTimeout)
	if err != nil {
		return nil, err
	}
	defer d.rollbackQuietly(tx)
	res, err := del(tx)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return res, nil
}

// pruneInbox deletes a batch of old inbox rows and one of attempts in tx.
func (d *Driver) pruneInbox(ctx context.Context, tx *sql.Tx, p *store.PruneParams) (*store.PruneResult, error) {
	retention := p.Retention.Milliseconds()
	var res store.PruneResult
	qs := []string{d.q.PruneInbox, d.q.PruneAttempts}
	if d.q.PruneFrom {
		var from any
		if !p.From.IsZero() {
			from = p.From
		}
		var last sql.NullTime
		if err := tx.QueryRowContext(ctx, d.q.PruneInbox, retention, p.Limit, from).Scan(&res.Deleted, &last); err != nil {
			return nil, err
		}
		res.Last = last.Time
		qs = qs[1:]
	}
	for _, q := range qs {
		n, err := execCount(ctx, tx, q, retention, p.Limit)
		if err != nil {
			return nil, err
		}
		res.Deleted += n
	}
	return &res, nil
}

// execCount runs query in tx and returns the rows it affected.
func execCount(ctx context.Context, tx *sql.Tx, query string, args ...any) (int, error) {
	r, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// Migrate applies the missing migrations on one connection, under the
// dialect's lock. A concurrent Migrate waits and then finds them applied.
//
// On SQLite, Migrate runs in one transaction begun with BEGIN IMMEDIATE,
// which takes the write lock. It waits up to the connection's busy_timeout.
// Without one it fails at once with a retryable SQLITE_BUSY.
//
// On MySQL, Migrate runs under GET_LOCK. DDL commits by itself there. Each
// statement of a migration is therefore idempotent, and a version is
// recorded after its statements ran. A migration cut short runs again
// cleanly.
//
// Then Migrate fills in the error groups of the dead letters and attempts
// written before the migration that records them, one row at a time.
func (d *Driver) Migrate(ctx context.Context) error {
	if err := d.applyMigrations(ctx); err != nil {
		return err
	}
	if _, ok := d.dialect.(sqldialect.Inspector); !ok {
		return nil
	}
	_, err := d.fillGroups(ctx)
	return err
}

// applyMigrations applies the missing migrations on one connection, under
// the dialect's lock.
func (d *Driver) applyMigrations(ctx context.Context) (err error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return d.fail("migrate", err)
	}
	defer func() {
		if err != nil { // a failed migration may leave conn inside a transaction or holding a lock: drop it
			dropConn(conn)
		}
		_ = conn.Close()
	}()
	if err := d.dialect.BeginMigrate(ctx, conn, d.tables); err != nil {
		return d.fail("migrate: lock", err)
	}
	if err := d.migrate(ctx, conn); err != nil {
		if rerr := d.dialect.EndMigrate(context.WithoutCancel(ctx), conn, d.tables, false); rerr != nil {
			d.log.Warn("sqlstore: migrate: rollback failed", "dialect", d.dialect.Name(), "error", rerr)
		}
		return d.fail("migrate", err)
	}
	if err := d.dialect.EndMigrate(ctx, conn, d.tables, true); err != nil {
		return d.fail("migrate: commit", err)
	}
	return nil
}

func (d *Driver) migrate(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, d.q.MigrationsCreate); err != nil {
		return err
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, d.q.MigrationsApplied)
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, m := range d.migrations {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range d.dialect.Statements(m.SQL) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, d.q.MigrationRecord, m.Version, m.Name); err != nil {
			return fmt.Errorf("recording migration %04d_%s: %w", m.Version, m.Name, err)
		}
		d.log.InfoContext(ctx, "sqlstore: applied migration", "dialect", d.dialect.Name(), "version", m.Version, "name", m.Name)
	}
	return nil
}

// Migrations returns every migration's SQL, in order, with the table names
// filled in.
func (d *Driver) Migrations() []store.Migration {
	return append([]store.Migration(nil), d.migrations...)
}

// DurabilityWarnings reads one connection's settings. It reports those that
// let a committed claim be lost, or make writers fail instead of waiting. On
// SQLite those are a journal_mode other than WAL, synchronous below FULL and
// a busy_timeout of 0.
func (d *Driver) DurabilityWarnings(ctx context.Context) ([]string, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, d.fail("durability settings", err)
	}
	defer conn.Close()
	w, err := d.dialect.DurabilityWarnings(ctx, conn)
	return w, d.fail("durability settings", err)
}

// dropConn makes conn's Close discard the connection instead of returning
// it to the pool.
func dropConn(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

// nullBytes binds an empty byte slice as NULL.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
