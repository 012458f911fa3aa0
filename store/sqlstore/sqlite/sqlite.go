// Package sqlite is the SQLite dialect of package sqlstore, on
// modernc.org/sqlite.
//
// That driver is pure Go, without cgo. [Open] opens a database file with
// the settings the inbox needs. [Dialect] goes into sqlstore.Config.
//
//	db, err := sqlite.Open("inbox.db", nil)
//	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

//go:embed migrations
var migrationsFS embed.FS

// Dialect is the dialect of SQLite through modernc.org/sqlite, whose driver
// name is "sqlite". Open the database with [Open], or give its DSN the same
// settings.
//
// SQLite has one writer at a time, and no row locks. The lock timeout,
// inbox.Config.LockTimeout, thus bounds a transaction's wait for the
// database's write lock. SQLite has no isolation levels to choose. Its
// transactions are serializable.
//
// On a *sql.DB of Open, a read-write transaction of the inbox waits up to
// the lock timeout for its turn among the pool's writers. It then waits up
// to it again for other processes, with busy_timeout. Open sets that before
// BEGIN IMMEDIATE when the connection had another. The transaction then
// fails with [ErrBusy] or SQLITE_BUSY, both retryable.
//
// On another pool, Begin sets busy_timeout after BEGIN. It bounds the wait
// of the next BEGIN IMMEDIATE on that connection, and a deferred
// transaction's first write. ProcessTx sets it in the caller's transaction
// too. Begin issues BEGIN IMMEDIATE when the DSN says _txlock=immediate.
// Writers then queue at BEGIN instead of failing when a read lock cannot be
// upgraded.
var Dialect = sqlstore.NewDialect(sqliteDialect{})

// Options are the settings of Open.
type Options struct {
	// BusyTimeout is how long a writer waits for the write lock before it fails
	// with SQLITE_BUSY. It waits that long for the pool's other writers, then
	// failing with [ErrBusy]. It waits that long again for other processes, as
	// busy_timeout. The inbox's transactions wait their lock timeout instead.
	// The application's wait BusyTimeout. A negative value means not at all.
	// Default 5 s.
	BusyTimeout time.Duration
	// MaxIdleConns is how many idle connections the pool keeps, as with
	// sql.DB.SetMaxIdleConns. A negative value keeps none. Default
	// sqlstore.DefaultMaxIdleConns.
	MaxIdleConns int
}

// Open opens the SQLite database file at path with the settings the inbox
// needs. It creates the file if missing. opts may be nil. Open connects once
// to report a bad path or setting now. The settings are these.
//   - The journal is WAL.
//   - synchronous=FULL, so that a commit survives a power loss.
//   - The busy timeout, from Options.BusyTimeout.
//   - Foreign keys are on.
//   - Every read-write transaction of the pool begins with BEGIN IMMEDIATE.
//   - The pool keeps sqlstore.DefaultMaxIdleConns idle connections.
//
// The pool's read-write transactions wait for one another in the process,
// in the order they began, before BEGIN IMMEDIATE. That holds for BeginTx
// without ReadOnly, the store's own and the application's alike. SQLite's
// busy handler sleeps and retries, so whoever tries when the lock is free
// gets it. Under many busy writers, a pruner or a slow writer could thus
// wait its whole busy timeout.
//
// A transaction holds its turn until it commits or rolls back, by any path.
// database/sql's own rollback when its context is done counts too. So does
// the closing of its connection. A transaction that is never ended holds its
// turn, as it holds SQLite's lock. A writer that waited its lock timeout for
// its turn fails with [ErrBusy], which is retryable. For the application's
// transactions that timeout is BusyTimeout. A writer whose context ends
// stops waiting.
//
// Some writes do not queue. They are writes outside a transaction, as with
// db.Exec, read-only transactions that write, other pools and other
// processes. They wait for SQLite's lock up to busy_timeout, as before,
// against one writer of this pool at a time.
func Open(path string, opts *Options) (*sql.DB, error) {
	dsn, err := sqliteDSN(path, opts)
	if err != nil {
		return nil, err
	}
	base, err := msqlite.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open %q: %w", path, err)
	}
	db := sql.OpenDB(queuedConnector{Connector: base, q: newWriteQueue(sqliteBusyTimeout(opts))})
	idle := 0
	if opts != nil {
		idle = opts.MaxIdleConns
	}
	sqldialect.SetMaxIdleConns(db, idle)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlstore: open %q: %w", path, err)
	}
	return db, nil
}

// sqliteDSN is modernc's URI form: file:PATH?_pragma=...&_txlock=immediate.
// modernc runs busy_timeout first, then the other _pragma values in
// lexical order, on every new connection.
func sqliteDSN(path string, opts *Options) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: Open: empty path", sqlstore.ErrInvalidConfig)
	}
	busy := sqliteBusyTimeout(opts)
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return "file:" + sqliteURIPath(path) + "?" + q.Encode(), nil
}

// sqliteBusyTimeout is opts' busy timeout: default store.DefaultLockTimeout
// (5 s), 0 for none.
func sqliteBusyTimeout(opts *Options) time.Duration {
	if opts != nil && opts.BusyTimeout != 0 {
		return max(opts.BusyTimeout, 0)
	}
	return store.DefaultLockTimeout
}

// sqliteURIPath escapes what a file: URI would read as its query, fragment
// or an escape; a leading "//" would be read as an authority.
func sqliteURIPath(path string) string {
	path = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	if strings.HasPrefix(path, "//") {
		path = "///" + strings.TrimLeft(path, "/")
	}
	return path
}

// sqliteNow is the database clock in unix milliseconds. 'now' is fixed for
// the whole statement; 'subsec' needs SQLite 3.42.
const sqliteNow = `CAST(ROUND(unixepoch('now', 'subsec') * 1000) AS INTEGER)`

// sqliteNowPortable is sqliteNow for the migrations table, which the
// printed script (MigrationScript) writes in whatever sqlite3 a team has:
// 'subsec' is NULL before 3.42 (Debian 12 ships 3.40); julianday keeps
// milliseconds in every version.
const sqliteNowPortable = `CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`

// sqliteOutboxColumns are the outbox reads' columns (sqldialect.Queries):
// times are stored in unix milliseconds already.
const sqliteOutboxColumns = `seq, message_id, destination, msg_key, message_type, headers, payload, attempts, last_error, created_at, parked_at`

// sqliteOutboxClaim leases the oldest due rows in one statement, which the
// write transaction it runs in keeps from any other claim (SQLite has one
// writer): the partial index of due rows yields them in order. ordered
// takes a row only when its key has no older unpublished row, through the
// key's partial index.
func sqliteOutboxClaim(ordered bool) string {
	cond := ""
	if ordered {
		cond = `
        AND (d.msg_key IS NULL OR NOT EXISTS (SELECT 1 FROM {outbox} p WHERE p.msg_key = d.msg_key AND p.seq < d.seq AND p.published_at IS NULL))`
	}
	return `UPDATE {outbox} SET available_at = ` + sqliteNow + ` + ?2, lease_token = ?3
WHERE seq IN (
    SELECT seq FROM {outbox} d
    WHERE parked_at IS NULL AND published_at IS NULL AND available_at <= ` + sqliteNow + cond + `
    ORDER BY available_at, seq LIMIT ?1)
RETURNING ` + sqliteOutboxColumns
}

const sqliteClaimBatchValues = `(?, ?, ` + sqliteNow + `, ?, ?, 0)`

const sqliteDeadLetterColumns = `id, consumer, message_id, message_type, payload, headers, error, attempts, failed_at`

var sqliteQueries = sqldialect.Queries{
	Returning: true,

	Claim: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + sqliteNow + `, ?, ?, 0)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING 1`,
	ClaimLookup: `SELECT fingerprint, message_type FROM {inbox} WHERE consumer = ? AND message_id = ?`,

	RollbackToSavepoint: `ROLLBACK TO SAVEPOINT `,

	// RETURNING returns the rows inserted, in no particular order.
	ClaimBatch: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES {values}
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING message_id`,
	ClaimBatchFirst:  sqliteClaimBatchValues,
	ClaimBatchValues: sqliteClaimBatchValues,
	ClaimBatchBy:     sqldialect.BatchReturning,
	ClaimBatchRows:   500, // 2000 placeholders, of SQLite's 32766
	ClaimBatchLookup: `SELECT message_id, fingerprint, message_type FROM {inbox} WHERE consumer = ? AND message_id IN ({ids})`,
	Unclaim:          `DELETE FROM {inbox} WHERE consumer = ? AND message_id = ?`,

	AttemptAdd: `INSERT INTO {attempts} (consumer, message_id, last_error, attempts, transient_failures, first_failed_at, last_failed_at, error_group)
VALUES (?, ?, ?, ?, ?, ` + sqliteNow + `, ` + sqliteNow + `, ?)
ON CONFLICT (consumer, message_id) DO UPDATE SET
    attempts = attempts + excluded.attempts,
    transient_failures = transient_failures + excluded.transient_failures,
    last_failed_at = excluded.last_failed_at,
    last_error = excluded.last_error,
    error_group = excluded.error_group
RETURNING attempts, transient_failures`,
	AttemptsDelete: `DELETE FROM {attempts} WHERE consumer = ? AND message_id = ?`,

	DeadInsert: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + sqliteNow + `, ?, ?, 1)
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING 1`,
	DeadLetterInsert: `INSERT INTO {dead_letters} (consumer, message_id, message_type, payload, headers, error, attempts, failed_at, error_group)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + sqliteNow + `, ?)`,
	DeadLetterList: `SELECT ` + sqliteDeadLetterColumns + ` FROM {dead_letters}
WHERE consumer = ? AND id > ? ORDER BY id LIMIT ?`,
	// The write transaction is the lock: SQLite has one writer.
	DeadLetterGet:    `SELECT ` + sqliteDeadLetterColumns + ` FROM {dead_letters} WHERE consumer = ? AND id = ?`,
	DeadLetterDelete: `DELETE FROM {dead_letters} WHERE consumer = ? AND id = ?`,

	Reclaim: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + sqliteNow + `, ?, ?, 0)
ON CONFLICT (consumer, message_id) DO UPDATE SET dead = 0 WHERE dead = 1
RETURNING 1`,

	PruneInbox: `DELETE FROM {inbox} WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM {inbox}
    WHERE received_at < ` + sqliteNow + ` - ?
    ORDER BY received_at
    LIMIT ?)`,
	PruneAttempts: `DELETE FROM {attempts} WHERE (consumer, message_id) IN (
    SELECT consumer, message_id FROM {attempts}
    WHERE last_failed_at < ` + sqliteNow + ` - ?
    ORDER BY last_failed_at
    LIMIT ?)`,

	MigrationsCreate: `CREATE TABLE IF NOT EXISTS {migrations} (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT`,
	MigrationsApplied: `SELECT version FROM {migrations}`,
	SchemaVersion:     `SELECT coalesce(max(version), 0) FROM {migrations}`,
	MigrationRecord:   `INSERT INTO {migrations} (version, name, applied_at) VALUES (?, ?, ` + sqliteNowPortable + `)`,

	// 'now' is the same for every row of a statement.
	OutboxWrite: `INSERT INTO {outbox} (message_id, destination, msg_key, message_type, headers, payload, created_at, available_at)
VALUES {values}
ON CONFLICT (message_id) DO NOTHING`,
	OutboxWriteValues:  `(?, ?, ?, ?, ?, ?, ` + sqliteNow + `, ` + sqliteNow + `)`,
	OutboxClaim:        sqliteOutboxClaim(false),
	OutboxClaimOrdered: sqliteOutboxClaim(true),
	OutboxDelete:       `DELETE FROM {outbox} WHERE lease_token = ? AND seq IN ({seqs})`,
	OutboxMarkPublished: `UPDATE {outbox} SET published_at = ` + sqliteNow + `, lease_token = NULL
WHERE lease_token = ? AND seq IN ({seqs})`,
	OutboxPrunePublished: `DELETE FROM {outbox} WHERE seq IN (
    SELECT seq FROM {outbox}
    WHERE published_at < ` + sqliteNow + ` - ?
    ORDER BY published_at
    LIMIT ?)`,
	OutboxFail: `UPDATE {outbox} AS o SET
    attempts = o.attempts + CASE WHEN f.released THEN 0 ELSE 1 END,
    last_error = CASE WHEN f.error = '' THEN o.last_error ELSE f.error END,
    available_at = ` + sqliteNow + ` + f.delay_ms,
    parked_at = CASE WHEN f.park THEN ` + sqliteNow + ` END,
    lease_token = NULL
FROM ({failures}) AS f
WHERE o.seq = f.seq AND o.lease_token = ?`,
	OutboxFailValues: `SELECT CAST(? AS INTEGER) AS seq, CAST(? AS TEXT) AS error, CAST(? AS INTEGER) AS delay_ms, ? AS park, ? AS released`,
	OutboxParked: `SELECT ` + sqliteOutboxColumns + ` FROM {outbox}
WHERE parked_at IS NOT NULL AND seq > ? ORDER BY seq LIMIT ?`,
	OutboxUnpark: `UPDATE {outbox} SET parked_at = NULL, attempts = 0, available_at = ` + sqliteNow + `, lease_token = NULL
WHERE seq = ? AND parked_at IS NOT NULL`,
	OutboxDiscard: `DELETE FROM {outbox} WHERE seq = ? AND parked_at IS NOT NULL`,

	// One writer at a time: BEGIN IMMEDIATE waits for the write lock, and
	// the claim then meets no uncommitted claim of another transaction.
	Keys: sqldialect.KeyQueries{
		Claim: `INSERT INTO {idempotency_keys} (scope, idem_key, method, route, fingerprint, created_at)
VALUES (?, ?, ?, ?, ?, ` + sqliteNow + `)
ON CONFLICT (scope, idem_key) DO NOTHING`,
		WaitAtBegin: true,
		Lookup:      `SELECT fingerprint, status, header, body, created_at FROM {idempotency_keys} WHERE scope = ? AND idem_key = ?`,
		Save:        `UPDATE {idempotency_keys} SET status = ?3, header = ?4, body = ?5 WHERE scope = ?1 AND idem_key = ?2`,
		// By rowid, which the created_at index holds: the batch is read
		// in index order, without a sort.
		Prune: `DELETE FROM {idempotency_keys} WHERE rowid IN (
    SELECT rowid FROM {idempotency_keys}
    WHERE created_at < ` + sqliteNow + ` - ?
    ORDER BY created_at
    LIMIT ?)`,
	},
}

type sqliteDialect struct{}

func (sqliteDialect) Name() string                  { return "sqlite" }
func (sqliteDialect) PrepareClaims() bool           { return false }
func (sqliteDialect) Quote(ident string) string     { return store.QuoteDouble(ident) }
func (sqliteDialect) Migrations() (fs.FS, string)   { return migrationsFS, "migrations" }
func (sqliteDialect) Templates() sqldialect.Queries { return sqliteQueries }

func (sqliteDialect) CheckTables(t store.Tables) error {
	if t.Schema != "" {
		return fmt.Errorf("%w: SQLite has no schemas, leave Schema empty (got %q)", store.ErrInvalidTables, t.Schema)
	}
	return nil
}

func (sqliteDialect) TxOptions(*sql.DB) *sql.TxOptions { return nil }

// SetLockTimeout sets the connection's busy_timeout, which bounds the
// wait for the write lock from then on (a deferred transaction's first
// write; the next BEGIN IMMEDIATE). A connection of Open set it before
// BEGIN already, and skips the PRAGMA. Zero keeps the connection's.
func (sqliteDialect) SetLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	_, err := tx.ExecContext(sqldialect.WithLockTimeout(ctx, d), sqliteSetBusy(d))
	return err
}

// SetLockTimeoutAndSavepoint is SetLockTimeout, then the savepoint.
func (s sqliteDialect) SetLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error {
	if err := s.SetLockTimeout(ctx, tx, d); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint)
	return err
}

// sqliteCode returns the primary result code of a SQLite error, 0 if err
// is not one.
func sqliteCode(err error) int {
	var e *msqlite.Error
	if errors.As(err, &e) {
		return e.Code() & 0xff // extended codes carry the primary one in the low byte
	}
	return 0
}

func (d sqliteDialect) Retryable(err error) bool {
	return d.Busy(err) || errors.Is(err, driver.ErrBadConn)
}

func (d sqliteDialect) Transient(err error) bool { return d.Retryable(err) }

// Conflict: SQLite has one writer at a time, which waits for the write
// lock (BUSY) instead of deadlocking; splitting a batch would not help.
func (sqliteDialect) Conflict(error) bool { return false }

// Deadlock: one writer at a time, no deadlock to break.
func (sqliteDialect) Deadlock(error) bool { return false }

// unrecoverable: a missing table or column, a read-only, unopenable,
// corrupt or foreign file, permission denied.
func (d sqliteDialect) Unrecoverable(err error) bool {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_ERROR:
		return d.MissingTable(err) || strings.Contains(err.Error(), "no such column")
	case sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOTADB,
		sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_AUTH:
		return true
	}
	return false
}

func (sqliteDialect) MissingTable(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_ERROR && strings.Contains(err.Error(), "no such table")
}

// prepareRefused: the dialect keeps no statements prepared.
func (sqliteDialect) PrepareRefused(error) bool { return false }
func (sqliteDialect) SavepointGone(error) bool  { return false }
func (sqliteDialect) ConnBusy(error) bool       { return false } // statements interleave
func (sqliteDialect) TooLarge(err error) bool   { return sqliteCode(err) == sqlite3.SQLITE_TOOBIG }
func (sqliteDialect) ClaimDeadlock(error) bool  { return false }

func (sqliteDialect) Busy(err error) bool {
	if errors.Is(err, ErrBusy) {
		return true
	}
	switch sqliteCode(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// beginMigrate takes the write lock at BEGIN, whatever the pool's _txlock:
// a second migrator waits (busy_timeout) and then sees the versions applied.
// It queues for the pool's write slot first (Open), which endMigrate
// gives back, or Migrate's closing of a connection it drops.
func (sqliteDialect) BeginMigrate(ctx context.Context, conn *sql.Conn, _ store.Tables) error {
	if err := conn.Raw(func(raw any) error {
		return slotOf(raw, func(c *queuedConn) error { return c.takeSlot(ctx, c.q.wait) })
	}); err != nil {
		return err
	}
	_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	return err
}

func (sqliteDialect) EndMigrate(ctx context.Context, conn *sql.Conn, _ store.Tables, commit bool) error {
	if err := sqldialect.EndConnTx(ctx, conn, commit); err != nil {
		return err // Migrate drops conn, whose Close gives the slot back
	}
	return conn.Raw(func(raw any) error { return slotOf(raw, func(c *queuedConn) error { c.giveSlot(); return nil }) })
}

// scriptFrame: the write lock, as beginMigrate takes it, for the whole
// script. SQLite has no conditional DDL and no ADD COLUMN IF NOT EXISTS:
// applied again, the script fails in its transaction and changes nothing.
func (sqliteDialect) ScriptFrame(store.Tables) (sqldialect.ScriptFrame, error) {
	return sqldialect.ScriptFrame{
		Header: "-- The inbox's tables: apply with sqlite3 -bail FILE.db < SCRIPT (or one Exec on a *sql.DB of its own, closed after),\n" +
			"-- once: each version is recorded as Migrate records it, so Migrate afterwards has nothing to do.\n" +
			"-- Applied again (or after Migrate) it fails at the first column that exists, in its transaction,\n" +
			"-- and changes nothing: on tables made before, use Migrate.\n",
		Begin:      "BEGIN IMMEDIATE;\n",
		End:        "COMMIT;\n",
		RecordOnce: " ON CONFLICT (version) DO NOTHING",
	}, nil
}

// statements: SQLite runs a whole migration in one call.
func (sqliteDialect) Statements(migration string) []string { return []string{migration} }

// LockPrune: SQLite has one writer, so the write lock is the pruners' lock.
func (sqliteDialect) LockPrune(context.Context, *sql.Conn, store.Tables, sqldialect.Pruner) (bool, error) {
	return true, nil
}

func (sqliteDialect) UnlockPrune(context.Context, *sql.Conn, store.Tables, sqldialect.Pruner) error {
	return nil
}

func (sqliteDialect) DurabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error) {
	var mode string
	var sync, busy int
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return nil, err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return nil, err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return nil, err
	}
	var w []string
	if !strings.EqualFold(mode, "wal") {
		w = append(w, fmt.Sprintf("SQLite journal_mode is %s, not WAL: writers block readers, and the inbox expects WAL with synchronous=FULL (open the database with sqlite.Open)", mode))
	}
	if sync < 2 {
		w = append(w, fmt.Sprintf("SQLite synchronous is %d, below FULL (2): a committed claim can be lost in a power failure (open the database with sqlite.Open)", sync))
	}
	if busy == 0 {
		w = append(w, "SQLite busy_timeout is 0: a writer fails with SQLITE_BUSY at once instead of waiting for the write lock (open the database with sqlite.Open)")
	}
	return w, nil
}
