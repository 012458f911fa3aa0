package sqlstore

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Dialect is the SQL dialect of a database: SQLite, MySQL/MariaDB or
// PostgreSQL. Its zero value is no dialect.
type Dialect struct{ d dialect }

// String returns the dialect's name, as Driver.Dialect does.
func (d Dialect) String() string {
	if d.d == nil {
		return "none"
	}
	return d.d.name()
}

// dialect is everything that differs between databases: the SQL, in one
// file per dialect (sqlite.go, ...), and a few behaviours. Package sqlstore's
// logic (sqlstore.go) is written once against it.
type dialect interface {
	// prepareClaims: keep the claim statements prepared (once per
	// connection) instead of letting the driver prepare, execute and close
	// them each time.
	prepareClaims() bool
	// name is what Driver.Dialect returns.
	name() string
	// quote quotes an identifier.
	quote(ident string) string
	// checkTables rejects what Tables.Validate lets through but the
	// database cannot do (a schema on SQLite), wrapping store.ErrInvalidTables.
	checkTables(t store.Tables) error
	// migrations returns where the dialect's migration files are: a file
	// system and the directory in it.
	migrations() (fs.FS, string)
	// templates returns the dialect's statements with the table tokens of
	// internal/migrate ({inbox}, {attempts}, ...) still in them.
	templates() queries

	// txOptions are the options of the transactions the driver begins on
	// db (MySQL: READ COMMITTED); nil for the connection's default.
	txOptions(db *sql.DB) *sql.TxOptions
	// setLockTimeout bounds lock waits for the rest of tx; a no-op where
	// the lock timeout is a connection setting (SQLite: busy_timeout,
	// MySQL: innodb_lock_wait_timeout).
	setLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error
	// setLockTimeoutAndSavepoint is setLockTimeout, then SAVEPOINT with
	// the quoted name, in one round trip where the database allows it.
	setLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error
	// retryable reports whether a later attempt may not hit err, an error
	// of the store's own statements.
	retryable(err error) bool
	// transient reports whether err, a handler's error, carries an error
	// of the database that a later attempt may not hit (Driver.Retryable).
	transient(err error) bool
	// unrecoverable reports whether no retry fixes err (Driver.Unrecoverable).
	unrecoverable(err error) bool
	// missingTable reports whether err says that a table does not exist.
	missingTable(err error) bool
	// busy reports whether err means that another writer held the lock.
	busy(err error) bool
	// prepareRefused reports whether err is the server refusing to prepare
	// a statement (which therefore did not run).
	prepareRefused(err error) bool
	// savepointGone reports whether err says that the savepoint does not
	// exist because the server ended the transaction that held it (MySQL
	// rolls back the whole transaction on a deadlock).
	savepointGone(err error) bool
	// connBusy reports whether err says that the transaction's connection
	// cannot run a statement while a result set the handler left open is
	// unread (database/sql does not close it before the next statement).
	connBusy(err error) bool
	// tooLarge reports whether err says that a value is too large for the
	// database (store.ErrTooLarge).
	tooLarge(err error) bool
	// claimDeadlock reports whether err, returned by the claim as the
	// first statement of BeginClaim's transaction, is a deadlock that
	// rolled the transaction back: BeginClaim then begins again.
	claimDeadlock(err error) bool

	// beginMigrate starts the migration transaction on conn, holding the
	// lock that keeps concurrent migrations of tables t apart.
	beginMigrate(ctx context.Context, conn *sql.Conn, t store.Tables) error
	// endMigrate commits or rolls back what beginMigrate started and
	// releases its lock.
	endMigrate(ctx context.Context, conn *sql.Conn, t store.Tables, commit bool) error
	// statements splits a migration into the statements to execute one
	// by one (MySQL runs one statement per call without multiStatements).
	statements(migration string) []string
	// scriptFrame is what MigrationScript puts around the migrations of
	// tables t (unused by Postgres, whose script is internal/pgsql's).
	scriptFrame(t store.Tables) (scriptFrame, error)
	// lockPrune takes the lock of the pruners of tables t on conn, before
	// the pruning transaction begins; false means another pruner holds it.
	lockPrune(ctx context.Context, conn *sql.Conn, t store.Tables) (bool, error)
	// unlockPrune releases what lockPrune took, after the transaction.
	unlockPrune(ctx context.Context, conn *sql.Conn, t store.Tables) error

	// durabilityWarnings reads the settings of conn that let a committed
	// claim be lost in a crash.
	durabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error)
}

// queries are a dialect's statements. Each comment lists the arguments in
// order: IDs and consumers are always bound as []byte, times are computed
// by the database (unix milliseconds on SQLite).
type queries struct {
	// returning: the insert-if-absent statements (claim, deadInsert,
	// reclaim) return a row when they insert (RETURNING). Otherwise (MySQL's
	// ON DUPLICATE KEY UPDATE) they report an inserted or changed row as
	// RowsAffected >= 1, and mark a row they leave alone with
	// LAST_INSERT_ID(1), which the result carries as LastInsertId 1 while
	// RowsAffected is 0: a connection that counts found rows instead of
	// changed ones (clientFoundRows) reports 1 for that row too and is
	// caught, instead of a duplicate being taken for new.
	returning bool

	// claim inserts the inbox row unless it exists.
	// Args: consumer, message_id, message_type, fingerprint.
	claim string
	// claimSettingLockTimeout, when set, is claim with a fifth argument, the
	// lock timeout ("5000ms"), which it sets for the rest of the
	// transaction itself, so that BeginClaim skips setLockTimeout.
	claimSettingLockTimeout string
	// claimLookup reads a duplicate's fingerprint and message type.
	// Args: consumer, message_id.
	claimLookup string

	// rollbackToSavepoint: the prefix for a quoted savepoint name (the
	// savepoint itself: setLockTimeoutAndSavepoint).
	rollbackToSavepoint string

	// attemptAdd counts a failed attempt or a transient failure
	// (RETURNING attempts, transient_failures when attemptCount is empty).
	// Args: consumer, message_id, error, attempts to add, transient
	// failures to add.
	attemptAdd string
	// attemptCount, when set, reads attempts and transient_failures after
	// attemptAdd. Args: consumer, message_id.
	attemptCount string
	// attemptsDelete: args consumer, message_id.
	attemptsDelete string

	// deadInsert inserts a dead inbox row unless the row exists.
	// Args: consumer, message_id, message_type, fingerprint.
	deadInsert string
	// deadLetterInsert: args consumer, message_id, message_type, payload,
	// headers, error, attempts.
	deadLetterInsert string
	// deadLetterList returns id, consumer, message_id, message_type,
	// payload, headers, error, attempts, failed_at.
	// Args: consumer, after_id, limit.
	deadLetterList string
	// deadLetterGet locks and returns one dead letter, columns as
	// deadLetterList. Args: consumer, id.
	deadLetterGet string
	// deadLetterDelete: args consumer, id.
	deadLetterDelete string

	// reclaim inserts the inbox row, or turns a dead row live; it reports
	// either (as the insert-if-absent statements do) and does nothing to a
	// live row. Args: consumer, message_id, message_type, fingerprint.
	reclaim string

	// pruneInbox, pruneAttempts delete at most limit rows older than the
	// retention by the database clock. Args: retention_ms, limit.
	pruneInbox    string
	pruneAttempts string
	// pruneFrom: pruneInbox takes a third argument, the received_at to
	// start from (null: the first), and returns the number of rows deleted
	// and the received_at of the newest (store.PruneParams.From).
	pruneFrom bool

	// migrationsCreate creates the migrations table if it is missing.
	migrationsCreate string
	// migrationsApplied returns the applied versions.
	migrationsApplied string
	// schemaVersion returns the highest applied version, 0 for none.
	schemaVersion string
	// migrationRecord: args version, name.
	migrationRecord string
}

// render fills in the table names of t in every statement of q, with the
// tokens internal/migrate uses.
func render(q queries, t store.Tables, quote func(string) string) queries {
	r := strings.NewReplacer(
		"{inbox}", t.Name("inbox", quote),
		"{attempts}", t.Name("inbox_attempts", quote),
		"{dead_letters}", t.Name("inbox_dead_letters", quote),
		"{migrations}", t.Name("inbox_migrations", quote),
	)
	for _, s := range []*string{
		&q.claim, &q.claimSettingLockTimeout, &q.claimLookup, &q.rollbackToSavepoint,
		&q.attemptAdd, &q.attemptCount, &q.attemptsDelete,
		&q.deadInsert, &q.deadLetterInsert, &q.deadLetterList, &q.deadLetterGet, &q.deadLetterDelete,
		&q.reclaim, &q.pruneInbox, &q.pruneAttempts,
		&q.migrationsCreate, &q.migrationsApplied, &q.schemaVersion, &q.migrationRecord,
	} {
		*s = r.Replace(*s)
	}
	return q
}

// endConnTx commits or rolls back the transaction that a BEGIN on conn
// started.
func endConnTx(ctx context.Context, conn *sql.Conn, commit bool) error {
	stmt := "ROLLBACK"
	if commit {
		stmt = "COMMIT"
	}
	_, err := conn.ExecContext(ctx, stmt)
	return err
}
