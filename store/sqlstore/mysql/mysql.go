// Package mysql is the MySQL and MariaDB dialect of package sqlstore, on
// github.com/go-sql-driver/mysql.
//
// [Open] opens a pool with the settings the inbox needs. [Dialect] goes into
// sqlstore.Config.
//
//	db, err := mysql.Open("user:password@tcp(host:3306)/db", nil)
//	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

//go:embed migrations
var migrationsFS embed.FS

// Dialect is the dialect of MySQL 8.0 and later and MariaDB 10.6 and later,
// on InnoDB tables. It goes through github.com/go-sql-driver/mysql, whose
// driver name is "mysql". Open the database with [Open], or give its DSN the
// same settings. Config.Tables.Schema names a database. Empty means the
// connection's.
//
// The claim is INSERT ... ON DUPLICATE KEY UPDATE. It reports a new row as
// one row affected, and a duplicate as none. It is never INSERT IGNORE,
// which would turn every error into a warning. A connection with
// clientFoundRows=true counts a duplicate as one row too. Open refuses such
// a DSN. On a pool opened otherwise, the claim notices it on the first
// duplicate, which the statement marks with LAST_INSERT_ID(1). The claim
// then fails with an error instead of taking the duplicate for new. That
// marker is the connection's LAST_INSERT_ID() afterwards.
//
// Transactions run at READ COMMITTED. A pool opened with Open sets it once
// per connection. On another pool, Begin sets it for each transaction,
// which costs one more round trip.
//
// The lock timeout, inbox.Config.LockTimeout, is the session's
// innodb_lock_wait_timeout, in whole seconds. It is rounded up, to at least
// 1 s. Every transaction of the inbox sets it, ProcessTx's in the caller's
// transaction included.
//   - A connection of Open remembers its value, and sends a SET only to
//     change it. Process thus costs no extra round trip while the lock
//     timeout stays the same.
//   - After a statement of the application's that names the variable, the
//     next transaction sends the SET again. After one prepared, every
//     transaction does.
//   - On another pool, each transaction sends the SET, one round trip more.
//   - The value stays on the connection after the transaction. A
//     transaction that the application begins on a pool of Open gets
//     Options.LockTimeout back, with one SET when it differs.
//   - A claim that waits longer fails with the retryable error 1205. A
//     deadlock, error 1213, is retryable too. So is Galera's 1047, a node
//     outside the primary component; a refused certification is a 1213.
//
// A handler's own deadlock or lock timeout is a *mysql.MySQLError that the
// handler returns, wrapped or not. The driver's Retryable recognizes it as
// a transient failure, which does not count towards MaxAttempts. InnoDB
// rolls back the whole transaction on a deadlock. The statements after it
// run outside that transaction. A handler must therefore return that error,
// not swallow it. ProcessTx notices a swallowed one, since its savepoint is
// gone. Process cannot without one more round trip per message. It would
// commit what the handler wrote after the deadlock without the claim.
//
// The claim and the read of a duplicate are kept prepared, once per
// connection. Each then takes one round trip, instead of prepare, execute
// and close. The server may refuse to prepare them. Error 1461 says
// max_prepared_stmt_count is reached, and a proxy may lack server-side
// prepares. The claim is then sent as text in the same transaction, and as
// text from then on, with one warning logged. With such a server, use
// interpolateParams=true. Without it the driver prepares every statement
// with arguments itself.
//
// Migrations run under GET_LOCK, one statement at a time, so they need no
// multiStatements. DDL commits by itself in MySQL, so every statement is
// idempotent. Pruning deletes in batches of DELETE ... ORDER BY received_at
// LIMIT n. One pruner per table runs at a time, under GET_LOCK. Busy is
// reported when another holds it.
//
// Times are UTC by the database's clock, from UTC_TIMESTAMP(6), in
// DATETIME(6) columns.
var Dialect = sqlstore.NewDialect(mysqlDialect{})

var _ sqldialect.PacketChecker = mysqlDialect{} // checked before a dead letter is sent

// Options are the settings of Open.
type Options struct {
	// LockTimeout is innodb_lock_wait_timeout on every connection. It is how
	// long a statement waits for a row lock before it fails with the retryable
	// error 1205. The inbox's transactions set their own, from
	// inbox.Config.LockTimeout. The application's transactions on the pool get
	// this one. MySQL counts whole seconds, so it is rounded up, to at least
	// 1 s. Default the DSN's innodb_lock_wait_timeout parameter if it has one,
	// else 5 s.
	LockTimeout time.Duration
	// MaxIdleConns is how many idle connections the pool keeps, as with
	// sql.DB.SetMaxIdleConns. A negative value keeps none. Default
	// sqlstore.DefaultMaxIdleConns.
	MaxIdleConns int
}

// ErrClientFoundRows is returned by Open for a DSN with
// clientFoundRows=true. It is also wrapped by a claim on a connection that
// counts found rows. A duplicate would look new there.
var ErrClientFoundRows = sqlstore.ErrClientFoundRows

// Open opens a pool on the MySQL or MariaDB database of dsn, with the
// settings the inbox needs.
//
// The DSN is in go-sql-driver/mysql's format,
// user:password@tcp(host:3306)/database?... opts may be nil. Open connects
// once to report a bad DSN or server now. It does the following.
//   - It keeps sqlstore.DefaultMaxIdleConns idle connections.
//   - It refuses clientFoundRows=true, with [ErrClientFoundRows].
//   - It sets parseTime=true.
//   - It sets innodb_lock_wait_timeout on every connection, as [Options]
//     tells.
//   - It sets READ COMMITTED as the session's isolation level on every
//     connection. The application's own transactions on the pool get it
//     too.
//
// The DSN's other settings are kept. With interpolateParams=true, a
// statement with arguments costs one round trip instead of two, for the
// inbox and the handlers alike.
func Open(dsn string, opts *Options) (*sql.DB, error) {
	cfg, err := mysqlConfig(dsn, opts)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: Open: %w", err)
	}
	lockWait, err := strconv.ParseInt(cfg.Params["innodb_lock_wait_timeout"], 10, 64)
	if err != nil { // mysqlConfig checked it
		return nil, invalidConfig(nil, "innodb_lock_wait_timeout: %v", err)
	}
	db := sql.OpenDB(mysqlConnector{Connector: conn, lockWait: lockWait})
	idle := 0
	if opts != nil {
		idle = opts.MaxIdleConns
	}
	sqldialect.SetMaxIdleConns(db, idle)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysql: Open %s: %w", cfg.Addr, err)
	}
	return db, nil
}

func mysqlConfig(dsn string, opts *Options) (*mysql.Config, error) {
	if isURL(dsn) {
		return nil, badDSN(dsn, nil)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, badDSN(dsn, err)
	}
	if cfg.ClientFoundRows {
		return nil, invalidConfig(ErrClientFoundRows, "%v", ErrClientFoundRows)
	}
	cfg.ParseTime = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	timeout := store.DefaultLockTimeout
	if opts != nil && opts.LockTimeout != 0 {
		timeout = opts.LockTimeout
	} else if s, ok := cfg.Params["innodb_lock_wait_timeout"]; ok {
		if _, err := strconv.ParseUint(s, 10, 32); err != nil {
			return nil, invalidConfig(nil, "innodb_lock_wait_timeout=%q, want whole seconds", s)
		}
		return cfg, nil
	}
	if timeout < 0 {
		return nil, invalidConfig(nil, "negative LockTimeout %v", timeout)
	}
	cfg.Params["innodb_lock_wait_timeout"] = strconv.FormatInt(mysqlSeconds(timeout), 10)
	return cfg, nil
}

// mysqlConnector sets READ COMMITTED on each new connection, and wraps it
// in a lockWaitConn whose session has innodb_lock_wait_timeout lockWait
// (the DSN's parameter). New tells its pools by their driver,
// mysqlOpened, and then leaves the isolation level out of Begin.
type mysqlConnector struct {
	driver.Connector
	lockWait int64
}

const mysqlSessionReadCommitted = `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED`

func (c mysqlConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	mc, ok := conn.(mysqlDriverConn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("sqlstore: the mysql driver's connection %T lacks an interface it used to have", conn)
	}
	if _, err := mc.ExecContext(ctx, mysqlSessionReadCommitted, nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &lockWaitConn{mysqlDriverConn: mc, base: c.lockWait, cur: c.lockWait}, nil
}

// mysqlDriverConn is what go-sql-driver's connections implement and
// database/sql uses; lockWaitConn forwards all of it.
type mysqlDriverConn interface {
	sqldialect.DriverConn
	driver.NamedValueChecker
}

// lockWaitConn remembers its session's innodb_lock_wait_timeout, so that
// setting it costs a round trip only when it changes. A transaction
// begun with sqldialect.WithLockTimeout gets that value, any other
// transaction base (Options.LockTimeout); SetLockTimeout's statement is
// skipped when it would change nothing.
//
// Any other statement that names the variable (lockWaitName, anywhere,
// in any case) makes the value unknown: the next transaction sets it
// again. One prepared on the connection may run again unseen, so from
// then on every transaction sets it. A stored routine or a statement
// that SQL's PREPARE builds is not seen. (database/sql uses a connection
// from one goroutine at a time.)
type lockWaitConn struct {
	mysqlDriverConn
	// base is the pool's value; cur the session's, 0 when unknown. In
	// seconds.
	base, cur int64
	// prepared: a statement naming the variable was prepared here, and
	// cur is never trusted again.
	prepared bool
}

// lockWaitName is in the names of innodb_lock_wait_timeout and of
// lock_wait_timeout (metadata locks): forgetting for the latter costs one
// SET; missing the former would leave the inbox the application's wait.
const lockWaitName = "lock_wait_timeout"

// setLockWait sets the session's innodb_lock_wait_timeout to s seconds
// unless it has that value.
func (c *lockWaitConn) setLockWait(ctx context.Context, s int64) error {
	if c.cur == s && !c.prepared {
		return nil
	}
	c.cur = 0
	if _, err := c.mysqlDriverConn.ExecContext(ctx, mysqlSetLockWait(s), nil); err != nil {
		return err
	}
	c.cur = s
	return nil
}

func (c *lockWaitConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	want := c.base
	if d, ok := sqldialect.LockTimeoutOf(ctx); ok {
		want = mysqlSeconds(d)
	}
	if err := c.setLockWait(ctx, want); err != nil {
		return nil, err
	}
	return c.mysqlDriverConn.BeginTx(ctx, opts)
}

// Begin is the context-free form; database/sql calls BeginTx.
func (c *lockWaitConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *lockWaitConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if d, ok := sqldialect.LockTimeoutOf(ctx); ok && len(args) == 0 && query == mysqlSetLockWait(mysqlSeconds(d)) {
		return driver.RowsAffected(0), c.setLockWait(ctx, mysqlSeconds(d))
	}
	c.forget(query)
	return c.mysqlDriverConn.ExecContext(ctx, query, args)
}

func (c *lockWaitConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.forget(query)
	return c.mysqlDriverConn.QueryContext(ctx, query, args)
}

func (c *lockWaitConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if sqldialect.MentionsName(query, lockWaitName) {
		c.prepared = true
	}
	return c.mysqlDriverConn.PrepareContext(ctx, query)
}

// forget makes the session's lock wait unknown when query may set it.
func (c *lockWaitConn) forget(query string) {
	if sqldialect.MentionsName(query, lockWaitName) {
		c.cur = 0
	}
}

// mysqlSetLockWait sets the session's innodb_lock_wait_timeout to s
// seconds. The value is in the text, so that the statement has no
// arguments to prepare.
func mysqlSetLockWait(s int64) string {
	return "SET SESSION innodb_lock_wait_timeout = " + strconv.FormatInt(s, 10)
}

func (c mysqlConnector) Driver() driver.Driver { return mysqlOpened{} }

// mysqlOpened is the driver of the pools Open opens.
type mysqlOpened struct{ mysql.MySQLDriver }

// mysqlSeconds rounds d up to whole seconds, at least 1.
func mysqlSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// mysqlNow is the database clock, UTC, to the microsecond.
const mysqlNow = `UTC_TIMESTAMP(6)`

// mysqlMillis is the dead letter's failed_at in unix milliseconds, as
// scanDeadLetter reads it (the DATETIME holds UTC).
const mysqlMillis = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', failed_at) DIV 1000`

const mysqlDeadLetterColumns = `id, consumer, message_id, message_type, payload, headers, error, attempts, ` + mysqlMillis

// mysqlOutboxColumns are the outbox reads' columns (sqldialect.Queries),
// times in unix milliseconds.
const mysqlOutboxColumns = `seq, message_id, destination, msg_key, message_type, headers, payload, attempts, last_error,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at) DIV 1000,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', parked_at) DIV 1000`

// mysqlOutboxClaim selects the oldest due rows for the claim's
// transaction to lease (OutboxLease), skipping those other relays are
// claiming, through the index on (published_at, parked_at, available_at,
// seq). ordered takes a row only when its key has no older unpublished
// row, through the index on (msg_key, published_at, seq): the subquery is
// a consistent read, which locks nothing and skips nothing (a locking
// read locks the rows of its own query block only), so an older row that
// another relay is claiming holds its key back as a leased one does.
func mysqlOutboxClaim(ordered bool) string {
	cond := ""
	if ordered {
		cond = `
    AND (d.msg_key IS NULL OR NOT EXISTS (SELECT 1 FROM {outbox} p WHERE p.msg_key = d.msg_key AND p.published_at IS NULL AND p.seq < d.seq))`
	}
	return `SELECT ` + mysqlOutboxColumns + ` FROM {outbox} d
WHERE published_at IS NULL AND parked_at IS NULL AND available_at <= ` + mysqlNow + cond + `
ORDER BY available_at, seq LIMIT ?
FOR UPDATE SKIP LOCKED`
}

// In the ON DUPLICATE KEY UPDATE clauses, IF(LAST_INSERT_ID(1), x, x)
// assigns x its own value, which changes nothing (0 rows affected), and
// marks the row as left alone (see sqldialect.Queries.returning).
var mysqlQueries = sqldialect.Queries{
	Returning: false,

	Claim: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + mysqlNow + `, ?, ?, FALSE)
ON DUPLICATE KEY UPDATE consumer = IF(LAST_INSERT_ID(1), consumer, consumer)`,
	ClaimLookup: `SELECT fingerprint, message_type FROM {inbox} WHERE consumer = ? AND message_id = ?`,

	RollbackToSavepoint: `ROLLBACK TO SAVEPOINT `,

	// MySQL has no INSERT ... RETURNING, and MariaDB's returns the
	// duplicates' existing rows too: each duplicate sets its bit (its
	// row's place among {ids}, the rows' IDs in order) in LAST_INSERT_ID,
	// which the first row's values reset to 0 (dead = FALSE), and which
	// the statement's result carries (sqldialect.BatchMask). The update
	// changes nothing: 0 rows affected.
	ClaimBatch: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES {values}
ON DUPLICATE KEY UPDATE consumer = IF(LAST_INSERT_ID(LAST_INSERT_ID() | 1 << (FIELD(VALUES(message_id), {ids}) - 1)), consumer, consumer)`,
	ClaimBatchFirst:  `(?, ?, ` + mysqlNow + `, ?, ?, LAST_INSERT_ID(0))`,
	ClaimBatchValues: `(?, ?, ` + mysqlNow + `, ?, ?, FALSE)`,
	ClaimBatchBy:     sqldialect.BatchMask,
	ClaimBatchRows:   64,
	ClaimBatchLookup: `SELECT message_id, fingerprint, message_type FROM {inbox} WHERE consumer = ? AND message_id IN ({ids})`,
	Unclaim:          `DELETE FROM {inbox} WHERE consumer = ? AND message_id = ?`,

	AttemptAdd: `INSERT INTO {attempts} (consumer, message_id, last_error, attempts, transient_failures, first_failed_at, last_failed_at, error_group)
VALUES (?, ?, ?, ?, ?, ` + mysqlNow + `, ` + mysqlNow + `, ?)
ON DUPLICATE KEY UPDATE
    attempts = attempts + VALUES(attempts),
    transient_failures = transient_failures + VALUES(transient_failures),
    last_failed_at = VALUES(last_failed_at),
    last_error = VALUES(last_error),
    error_group = VALUES(error_group)`,
	AttemptCount:   `SELECT attempts, transient_failures FROM {attempts} WHERE consumer = ? AND message_id = ?`,
	AttemptsDelete: `DELETE FROM {attempts} WHERE consumer = ? AND message_id = ?`,

	DeadInsert: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + mysqlNow + `, ?, ?, TRUE)
ON DUPLICATE KEY UPDATE consumer = IF(LAST_INSERT_ID(1), consumer, consumer)`,
	DeadLetterInsert: `INSERT INTO {dead_letters} (consumer, message_id, message_type, payload, headers, error, attempts, failed_at, error_group)
VALUES (?, ?, ?, ?, ?, ?, ?, ` + mysqlNow + `, ?)`,
	DeadLetterList: `SELECT ` + mysqlDeadLetterColumns + ` FROM {dead_letters}
WHERE consumer = ? AND id > ? ORDER BY id LIMIT ?`,
	DeadLetterGet:    `SELECT ` + mysqlDeadLetterColumns + ` FROM {dead_letters} WHERE consumer = ? AND id = ? FOR UPDATE`,
	DeadLetterDelete: `DELETE FROM {dead_letters} WHERE consumer = ? AND id = ?`,

	// A dead row turns live (2 rows affected); a live one is left alone.
	Reclaim: `INSERT INTO {inbox} (consumer, message_id, received_at, message_type, fingerprint, dead)
VALUES (?, ?, ` + mysqlNow + `, ?, ?, FALSE)
ON DUPLICATE KEY UPDATE dead = IF(dead, FALSE, IF(LAST_INSERT_ID(1), dead, dead))`,

	PruneInbox: `DELETE FROM {inbox}
WHERE received_at < ` + mysqlNow + ` - INTERVAL (? * 1000) MICROSECOND
ORDER BY received_at
LIMIT ?`,
	PruneAttempts: `DELETE FROM {attempts}
WHERE last_failed_at < ` + mysqlNow + ` - INTERVAL (? * 1000) MICROSECOND
ORDER BY last_failed_at
LIMIT ?`,

	MigrationsCreate: `CREATE TABLE IF NOT EXISTS {migrations} (
    version    INT          NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	MigrationsApplied: `SELECT version FROM {migrations}`,
	SchemaVersion:     `SELECT coalesce(max(version), 0) FROM {migrations}`,
	MigrationRecord:   `INSERT INTO {migrations} (version, name, applied_at) VALUES (?, ?, ` + mysqlNow + `)`,

	// A duplicate ID is left alone (0 rows affected), never IGNOREd: every
	// other error stays an error.
	OutboxWrite: `INSERT INTO {outbox} (message_id, destination, msg_key, message_type, headers, payload, created_at, available_at, last_error)
VALUES {values}
ON DUPLICATE KEY UPDATE message_id = message_id`,
	OutboxWriteValues:  `(?, ?, ?, ?, ?, ?, ` + mysqlNow + `, ` + mysqlNow + `, '')`,
	OutboxClaim:        mysqlOutboxClaim(false),
	OutboxClaimOrdered: mysqlOutboxClaim(true),
	OutboxLease: `UPDATE {outbox} SET available_at = ` + mysqlNow + ` + INTERVAL (? * 1000) MICROSECOND, lease_token = ?
WHERE seq IN ({seqs})`,
	OutboxDelete: `DELETE FROM {outbox} WHERE lease_token = ? AND seq IN ({seqs})`,
	OutboxMarkPublished: `UPDATE {outbox} SET published_at = ` + mysqlNow + `, lease_token = NULL
WHERE lease_token = ? AND seq IN ({seqs})`,
	OutboxPrunePublished: `DELETE FROM {outbox}
WHERE published_at < ` + mysqlNow + ` - INTERVAL (? * 1000) MICROSECOND
ORDER BY published_at
LIMIT ?`,
	OutboxFail: `UPDATE {outbox} o JOIN ({failures}) f ON o.seq = f.seq SET
    o.attempts = o.attempts + IF(f.released, 0, 1),
    o.last_error = IF(f.error = '', o.last_error, f.error),
    o.available_at = ` + mysqlNow + ` + INTERVAL (f.delay_ms * 1000) MICROSECOND,
    o.parked_at = IF(f.park, ` + mysqlNow + `, NULL),
    o.lease_token = NULL
WHERE o.lease_token = ?`,
	OutboxFailValues: `SELECT CAST(? AS SIGNED) AS seq, ? AS error, CAST(? AS SIGNED) AS delay_ms, CAST(? AS SIGNED) AS park, CAST(? AS SIGNED) AS released`,
	OutboxParked: `SELECT ` + mysqlOutboxColumns + ` FROM {outbox}
WHERE parked_at IS NOT NULL AND seq > ? ORDER BY seq LIMIT ?`,
	OutboxUnpark: `UPDATE {outbox} SET parked_at = NULL, attempts = 0, available_at = ` + mysqlNow + `, lease_token = NULL
WHERE seq = ? AND parked_at IS NOT NULL`,
	OutboxDiscard: `DELETE FROM {outbox} WHERE seq = ? AND parked_at IS NOT NULL`,

	Keys: sqldialect.KeyQueries{
		// As Claim: never INSERT IGNORE; a duplicate is left alone and
		// marked.
		Claim: `INSERT INTO {idempotency_keys} (scope, idem_key, method, route, fingerprint, created_at)
VALUES (?, ?, ?, ?, ?, ` + mysqlNow + `)
ON DUPLICATE KEY UPDATE scope = IF(LAST_INSERT_ID(1), scope, scope)`,
		ClaimMarked: true,
		Lookup: `SELECT fingerprint, status, header, body, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at) DIV 1000
FROM {idempotency_keys} WHERE scope = ? AND idem_key = ?`,
		Save:        `UPDATE {idempotency_keys} SET status = ?, header = ?, body = ? WHERE scope = ? AND idem_key = ?`,
		SaveKeyLast: true,
		Prune: `DELETE FROM {idempotency_keys}
WHERE created_at < ` + mysqlNow + ` - INTERVAL (? * 1000) MICROSECOND
ORDER BY created_at
LIMIT ?`,
	},
}

// mysqlLockName is a GET_LOCK name for what (migrate, prune) on the
// tables of one database and prefix. Lock names are server-wide and at
// most 64 characters: the database and prefix are hashed.
// Args: what, schema, prefix.
const mysqlLockName = `CONCAT('inboxkit/', ?, '/', MD5(CONCAT(IF(? = '', IFNULL(DATABASE(), ''), ?), '.', ?)))`

// mysqlMigrateWait bounds how long Migrate waits for another migrator, in
// seconds; a migration takes far less.
const mysqlMigrateWait = 600

type mysqlDialect struct{}

func (mysqlDialect) Name() string                  { return "mysql" }
func (mysqlDialect) PrepareClaims() bool           { return true }
func (mysqlDialect) Quote(ident string) string     { return store.QuoteBacktick(ident) }
func (mysqlDialect) Migrations() (fs.FS, string)   { return migrationsFS, "migrations" }
func (mysqlDialect) Templates() sqldialect.Queries { return mysqlQueries }

func (mysqlDialect) CheckTables(store.Tables) error { return nil }

var mysqlTxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// txOptions: READ COMMITTED for each transaction, unless Open opened
// db and so set it for each connection.
func (mysqlDialect) TxOptions(db *sql.DB) *sql.TxOptions {
	if _, ok := db.Driver().(mysqlOpened); ok {
		return nil
	}
	return mysqlTxOptions
}

// SetLockTimeout sets the session's innodb_lock_wait_timeout: one round
// trip, unless tx's connection is one of Open's and has the value already
// (lockWaitConn).
func (mysqlDialect) SetLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error {
	_, err := tx.ExecContext(sqldialect.WithLockTimeout(ctx, d), mysqlSetLockWait(mysqlSeconds(d)))
	return err
}

// SetLockTimeoutAndSavepoint is SetLockTimeout, then the savepoint: two
// statements, as the driver sends one at a time.
func (m mysqlDialect) SetLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error {
	if err := m.SetLockTimeout(ctx, tx, d); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "SAVEPOINT "+savepoint)
	return err
}

// MySQL error numbers the dialect tells apart.
const (
	mysqlErrCheckRead       = 1020 // record changed since last read: a serialization failure
	mysqlErrLockWaitTimeout = 1205
	mysqlErrDeadlock        = 1213
	// A Galera node outside the primary component, or not yet synced,
	// refuses statements and COMMITs with "WSREP has not yet prepared node
	// for application use". A refused COMMIT's outcome is unknown, as after
	// a lost connection: the redelivery is a duplicate or processed.
	// Without Galera, 1047 is "Unknown command", which no retry fixes:
	// wsrepNotReady tells them apart by the message.
	mysqlErrWsrepNotReady = 1047

	mysqlErrUnknownStmtHandler   = 1243
	mysqlErrUnsupportedPS        = 1295
	mysqlErrMaxPreparedStmtCount = 1461

	mysqlErrSavepointDoesNotExist = 1305
	mysqlErrNetPacketTooLarge     = 1153
)

// mysqlNumber returns the error number of a MySQL error, 0 if err is not one.
func mysqlNumber(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

func (mysqlDialect) Retryable(err error) bool {
	switch mysqlNumber(err) {
	case mysqlErrCheckRead, mysqlErrLockWaitTimeout, mysqlErrDeadlock:
		return true
	}
	return wsrepNotReady(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn)
}

// wsrepNotReady reports whether err is Galera's 1047, a node that takes
// no queries yet.
func wsrepNotReady(err error) bool {
	var e *mysql.MySQLError
	return errors.As(err, &e) && e.Number == mysqlErrWsrepNotReady && strings.Contains(e.Message, "WSREP")
}

// ErrTooLarge is returned by DeadLetterAdd on MySQL for a dead letter larger
// than the server's max_allowed_packet. It is checked before the dead
// letter is sent. The server would refuse it and close the connection.
var ErrTooLarge = errors.New("sqlstore: larger than the server's max_allowed_packet")

// packetCheckFrom is the size from which a dead letter's size is checked
// against max_allowed_packet (1 MiB and more; the smallest default is 4 MiB).
const packetCheckFrom = 1 << 20

// CheckPacket returns an error wrapping store.ErrTooLarge when a statement with
// args would exceed max_allowed_packet. It counts every byte that
// interpolateParams=true would escape into the statement's text twice, and
// leaves packetMargin for the text and the protocol. Too large, the server
// refuses the statement and closes the connection: from the client's side
// a lost connection, which is transient, and would be tried again for ever.
func (mysqlDialect) CheckPacket(ctx context.Context, tx *sql.Tx, args ...[]byte) error {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if n < packetCheckFrom {
		return nil
	}
	for _, a := range args {
		for _, c := range a {
			switch c {
			case 0, '\n', '\r', 0x1a, '\'', '"', '\\':
				n++
			}
		}
	}
	var limit int
	if err := tx.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		return err
	}
	if n+packetMargin > limit {
		return fmt.Errorf("%w: %d bytes of arguments (escapes counted), more than max_allowed_packet %d", store.ErrTooLarge, n, limit)
	}
	return nil
}

const packetMargin = 16 << 10

func (mysqlDialect) Busy(err error) bool { return mysqlNumber(err) == mysqlErrLockWaitTimeout }

// claimDeadlock: racing claims of one message deadlock on InnoDB when the
// transaction that inserted the row rolls back. Each waiter's claim holds
// (or waits for) a lock on the duplicate key; when the row is removed,
// InnoDB turns those locks into gap locks, which the waiters all keep, and
// each waiter's insert then waits for the others' gap locks: InnoDB rolls
// back all but one (1213). Beginning again is safe, as the claim was the
// transaction's first statement, and the new claim waits behind the
// survivor's row like any duplicate.
func (mysqlDialect) ClaimDeadlock(err error) bool { return mysqlNumber(err) == mysqlErrDeadlock }

// TooLarge: 1153, a packet larger than max_allowed_packet (the server
// then closes the connection).
func (mysqlDialect) TooLarge(err error) bool { return mysqlNumber(err) == mysqlErrNetPacketTooLarge }

// ConnBusy: go-sql-driver's buffer still holds a result set the handler
// did not read to its end.
func (mysqlDialect) ConnBusy(err error) bool { return errors.Is(err, mysql.ErrBusyBuffer) }

// SavepointGone: InnoDB rolled back the whole transaction (a deadlock),
// savepoints with it; nothing else removes the inbox's savepoint.
func (mysqlDialect) SavepointGone(err error) bool {
	return mysqlNumber(err) == mysqlErrSavepointDoesNotExist
}

// PrepareRefused: the server's prepared-statement limit is reached, the
// statement cannot be prepared, or the connection no longer knows it.
func (mysqlDialect) PrepareRefused(err error) bool {
	switch mysqlNumber(err) {
	case mysqlErrMaxPreparedStmtCount, mysqlErrUnsupportedPS, mysqlErrUnknownStmtHandler:
		return true
	}
	return false
}

func (d mysqlDialect) Transient(err error) bool { return d.Retryable(err) }

// Deadlock: InnoDB chose this transaction as a deadlock's victim. A lock
// wait timeout (1205) took the whole wait and is not one.
func (mysqlDialect) Deadlock(err error) bool { return mysqlNumber(err) == mysqlErrDeadlock }

func (mysqlDialect) Conflict(err error) bool {
	switch mysqlNumber(err) {
	case mysqlErrCheckRead, mysqlErrLockWaitTimeout, mysqlErrDeadlock:
		return true
	}
	return false
}

// MySQL error numbers that no retry fixes.
const (
	mysqlErrDBAccessDenied     = 1044
	mysqlErrAccessDenied       = 1045
	mysqlErrBadDB              = 1049
	mysqlErrBadField           = 1054
	mysqlErrTableAccessDenied  = 1142
	mysqlErrColumnAccessDenied = 1143
	mysqlErrNoSuchTable        = 1146
	mysqlErrSpecificAccess     = 1227
)

func (mysqlDialect) Unrecoverable(err error) bool {
	switch mysqlNumber(err) {
	case mysqlErrDBAccessDenied, mysqlErrAccessDenied, mysqlErrBadDB, mysqlErrBadField,
		mysqlErrTableAccessDenied, mysqlErrColumnAccessDenied, mysqlErrNoSuchTable, mysqlErrSpecificAccess:
		return true
	}
	return false
}

func (mysqlDialect) MissingTable(err error) bool { return mysqlNumber(err) == mysqlErrNoSuchTable }

func mysqlLock(ctx context.Context, conn *sql.Conn, what string, t store.Tables, wait int) (bool, error) {
	var got sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+mysqlLockName+`, ?)`,
		what, t.Schema, t.Schema, t.Prefix, wait).Scan(&got)
	if err != nil {
		return false, err
	}
	if !got.Valid {
		return false, fmt.Errorf("GET_LOCK of the %s lock failed", what)
	}
	return got.Int64 == 1, nil
}

func mysqlUnlock(ctx context.Context, conn *sql.Conn, what string, t store.Tables) error {
	var released sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(`+mysqlLockName+`)`,
		what, t.Schema, t.Schema, t.Prefix).Scan(&released)
	if err == nil && released.Int64 != 1 {
		err = fmt.Errorf("RELEASE_LOCK: the %s lock was not held", what)
	}
	return err
}

// beginMigrate takes the migration lock of the tables, waiting for
// another migrator; there is no transaction to begin, as DDL commits.
func (mysqlDialect) BeginMigrate(ctx context.Context, conn *sql.Conn, t store.Tables) error {
	ok, err := mysqlLock(ctx, conn, "migrate", t, mysqlMigrateWait)
	if err == nil && !ok {
		err = fmt.Errorf("another migration held the lock for %d s", mysqlMigrateWait)
	}
	return err
}

// endMigrate releases the lock. A failed migration stays partly applied:
// its statements are idempotent, and the next Migrate runs it again.
func (mysqlDialect) EndMigrate(ctx context.Context, conn *sql.Conn, t store.Tables, _ bool) error {
	return mysqlUnlock(ctx, conn, "migrate", t)
}

// scriptFrame: Migrate's GET_LOCK around the script; DDL commits by
// itself, so every statement is idempotent, as for Migrate.
func (mysqlDialect) ScriptFrame(t store.Tables) (sqldialect.ScriptFrame, error) {
	lock, err := sqldialect.FillLiterals(mysqlLockName, "migrate", t.Schema, t.Schema, t.Prefix)
	if err != nil {
		return sqldialect.ScriptFrame{}, err
	}
	return sqldialect.ScriptFrame{
		Header: "-- The inbox's tables: apply with mariadb (or mysql) DATABASE < SCRIPT. MySQL commits\n" +
			"-- each DDL statement by itself: every statement is idempotent, and each version is\n" +
			"-- recorded once, as Migrate records it: applying this twice, or after Migrate (even\n" +
			"-- one cut short), changes nothing.\n",
		Begin:      "DO GET_LOCK(" + lock + ", " + strconv.Itoa(mysqlMigrateWait) + ");\n",
		End:        "DO RELEASE_LOCK(" + lock + ");\n",
		RecordOnce: " ON DUPLICATE KEY UPDATE version = version",
	}, nil
}

// statements splits a migration at the lines that end with ";". The
// migration files keep to that: no statement has a line ending in ";"
// inside it.
func (mysqlDialect) Statements(migration string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(migration) {
		cur.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if s := mysqlStatement(cur.String()); s != "" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := mysqlStatement(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// mysqlStatement trims a statement's terminator and leading comment lines;
// "" if nothing but comments and blanks is left.
func mysqlStatement(s string) string {
	var keep []string
	for line := range strings.Lines(s) {
		if t := strings.TrimSpace(line); len(keep) == 0 && (t == "" || strings.HasPrefix(t, "--")) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.TrimSuffix(strings.TrimSpace(strings.Join(keep, "")), ";")
}

// LockPrune takes pruner p's GET_LOCK at once, or reports it held.
func (mysqlDialect) LockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, p sqldialect.Pruner) (bool, error) {
	return mysqlLock(ctx, conn, mysqlPruneLock(p), t, 0)
}

func (mysqlDialect) UnlockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, p sqldialect.Pruner) error {
	return mysqlUnlock(ctx, conn, mysqlPruneLock(p), t)
}

// mysqlPruneLock is the lock name's what of pruner p: the keys' pruner
// runs apart from the inbox's.
func mysqlPruneLock(p sqldialect.Pruner) string {
	if p == sqldialect.KeysPruner {
		return "prune-keys"
	}
	return "prune"
}
