// Package sqldialect is the seam between package sqlstore, written once
// against database/sql, and its dialects (SQLite, MySQL, PostgreSQL):
// what differs between the databases.
package sqldialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Dialect is everything that differs between databases: the SQL, in one
// file per dialect (sqlite.go, ...), and a few behaviours. Package sqlstore's
// logic (sqlstore.go) is written once against it.
type Dialect interface {
	// PrepareClaims: keep the claim statements prepared (once per
	// connection) instead of letting the driver prepare, execute and close
	// them each time.
	PrepareClaims() bool
	// Name is what Driver.Dialect returns.
	Name() string
	// Quote quotes an identifier.
	Quote(ident string) string
	// CheckTables rejects what Tables.Validate lets through but the
	// database cannot do (a schema on SQLite), wrapping store.ErrInvalidTables.
	CheckTables(t store.Tables) error
	// Migrations returns where the dialect's migration files are: a file
	// system and the directory in it.
	Migrations() (fs.FS, string)
	// Templates returns the dialect's statements with the table tokens of
	// internal/migrate ({inbox}, {attempts}, ...) still in them.
	Templates() Queries

	// TxOptions are the options of the transactions the driver begins on
	// db (MySQL: READ COMMITTED); nil for the connection's default.
	TxOptions(db *sql.DB) *sql.TxOptions
	// SetLockTimeout bounds lock waits for the rest of tx. Where the lock
	// timeout is a setting of the connection (MySQL:
	// innodb_lock_wait_timeout; SQLite: busy_timeout), the connections of
	// the dialect's Open remember theirs and skip a statement that would
	// not change it (see WithLockTimeout).
	SetLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error
	// SetLockTimeoutAndSavepoint is setLockTimeout, then SAVEPOINT with
	// the quoted name, in one round trip where the database allows it.
	SetLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error
	// Retryable reports whether a later attempt may not hit err, an error
	// of the store's own statements.
	Retryable(err error) bool
	// Transient reports whether err, a handler's error, carries an error
	// of the database that a later attempt may not hit (Driver.Retryable).
	Transient(err error) bool
	// Conflict reports whether err is a lock conflict with another
	// transaction (Driver.Conflict).
	Conflict(err error) bool
	// Deadlock reports whether the database rolled the transaction back
	// at once to break a deadlock, or as a serialization failure: running
	// it again may well succeed. A lock wait that timed out is not one.
	Deadlock(err error) bool
	// Unrecoverable reports whether no retry fixes err (Driver.Unrecoverable).
	Unrecoverable(err error) bool
	// MissingTable reports whether err says that a table does not exist.
	MissingTable(err error) bool
	// Busy reports whether err means that another writer held the lock.
	Busy(err error) bool
	// PrepareRefused reports whether err is the server refusing to prepare
	// a statement (which therefore did not run).
	PrepareRefused(err error) bool
	// SavepointGone reports whether err says that the savepoint does not
	// exist because the server ended the transaction that held it (MySQL
	// rolls back the whole transaction on a deadlock).
	SavepointGone(err error) bool
	// ConnBusy reports whether err says that the transaction's connection
	// cannot run a statement while a result set the handler left open is
	// unread (database/sql does not close it before the next statement).
	ConnBusy(err error) bool
	// TooLarge reports whether err says that a value is too large for the
	// database (store.ErrTooLarge).
	TooLarge(err error) bool
	// ClaimDeadlock reports whether err, returned by the claim as the
	// first statement of BeginClaim's transaction, is a deadlock that
	// rolled the transaction back: BeginClaim then begins again.
	ClaimDeadlock(err error) bool

	// BeginMigrate starts the migration transaction on conn, holding the
	// lock that keeps concurrent migrations of tables t apart.
	BeginMigrate(ctx context.Context, conn *sql.Conn, t store.Tables) error
	// EndMigrate commits or rolls back what beginMigrate started and
	// releases its lock.
	EndMigrate(ctx context.Context, conn *sql.Conn, t store.Tables, commit bool) error
	// Statements splits a migration into the statements to execute one
	// by one (MySQL runs one statement per call without multiStatements).
	Statements(migration string) []string
	// ScriptFrame is what MigrationScript puts around the migrations of
	// tables t (unused by Postgres, whose script is internal/pgsql's).
	ScriptFrame(t store.Tables) (ScriptFrame, error)
	// LockPrune takes the lock of pruner on tables t on conn, before the
	// pruning transaction begins; false means another pruner holds it.
	LockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, pruner Pruner) (bool, error)
	// UnlockPrune releases what LockPrune took, after the transaction.
	UnlockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, pruner Pruner) error

	// DurabilityWarnings reads the settings of conn that let a committed
	// Claim be lost in a crash.
	DurabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error)
}

// DriverConn is what the database drivers' connections implement and
// database/sql uses: a connection that a dialect's Open wraps forwards
// all of it.
type DriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// lockTimeoutKey is the context key of WithLockTimeout.
type lockTimeoutKey struct{}

// WithLockTimeout returns ctx carrying d, the lock timeout that a
// transaction begun with ctx (sql.DB.BeginTx) wants, or a statement run
// with ctx sets. The driver connections of the dialects' Open functions
// read it: they set their session's lock timeout before BEGIN when it
// differs (SQLite waits for its lock at BEGIN IMMEDIATE), and skip a
// SetLockTimeout statement that would not change it.
func WithLockTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, lockTimeoutKey{}, d)
}

// LockTimeoutOf returns the lock timeout of WithLockTimeout, false when
// ctx carries none.
func LockTimeoutOf(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(lockTimeoutKey{}).(time.Duration)
	return d, ok
}

// MentionsName reports whether query contains name, ASCII letters in
// either case, without allocating: the wrapping connections look for a
// session variable's name in every statement, large batches included.
// name is in lower case. When it has a '_', which has no case, IndexByte
// finds each '_' of query fast, and only a window around it is compared.
func MentionsName(query, name string) bool {
	pivot := strings.IndexByte(name, '_')
	if pivot < 0 {
		for i := 0; i+len(name) <= len(query); i++ {
			if lowerEqual(query[i:i+len(name)], name) {
				return true
			}
		}
		return false
	}
	for off := 0; ; {
		i := strings.IndexByte(query[off:], '_')
		if i < 0 {
			return false
		}
		start := off + i - pivot
		if start >= 0 && start+len(name) <= len(query) && lowerEqual(query[start:start+len(name)], name) {
			return true
		}
		off += i + 1
	}
}

// lowerEqual reports whether s, ASCII letters lowered, is lower. SQL's
// names fold only ASCII: MariaDB refuses innodb_locK_wait_timeout with
// the Kelvin sign, which strings.EqualFold would take for a k.
func lowerEqual(s, lower string) bool {
	for i := range len(lower) {
		b := s[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != lower[i] {
			return false
		}
	}
	return true
}

// Queries are a dialect's statements. Each comment lists the arguments in
// order: IDs and consumers are always bound as []byte, times are computed
// by the database (unix milliseconds on SQLite).
type Queries struct {
	// Returning: the insert-if-absent statements (claim, deadInsert,
	// Reclaim) return a row when they insert (RETURNING). Otherwise (MySQL's
	// ON DUPLICATE KEY UPDATE) they report an inserted or changed row as
	// RowsAffected >= 1, and mark a row they leave alone with
	// LAST_INSERT_ID(1), which the result carries as LastInsertId 1 while
	// RowsAffected is 0: a connection that counts found rows instead of
	// changed ones (clientFoundRows) reports 1 for that row too and is
	// caught, instead of a duplicate being taken for new.
	Returning bool

	// Claim inserts the inbox row unless it exists.
	// Args: consumer, message_id, message_type, fingerprint.
	Claim string
	// ClaimSettingLockTimeout, when set, is claim with a fifth argument, the
	// lock timeout as LockTimeoutText formats it ("5000ms"), which it sets
	// for the rest of the transaction itself, so that BeginClaim skips
	// setLockTimeout.
	ClaimSettingLockTimeout string
	// LockTimeoutText formats ClaimSettingLockTimeout's argument; set with it.
	LockTimeoutText func(time.Duration) string
	// ClaimLookup reads a duplicate's fingerprint and message type.
	// Args: consumer, message_id.
	ClaimLookup string

	// RollbackToSavepoint: the prefix for a quoted savepoint name (the
	// savepoint itself: setLockTimeoutAndSavepoint).
	RollbackToSavepoint string

	// ClaimBatch claims many messages of one consumer in one statement,
	// in the order of its rows, inserting each row unless it exists;
	// ClaimBatchBy says how it tells the rows it inserted. Except for
	// BatchArrays, {values} stands for the rows: the first is
	// ClaimBatchFirst, the others ClaimBatchValues, each with args
	// consumer, message_id, message_type, fingerprint; then come the args
	// of {ids} (BatchMask: every row's message_id again, in order).
	ClaimBatch                        string
	ClaimBatchFirst, ClaimBatchValues string
	ClaimBatchBy                      BatchReport
	// ClaimBatchRows bounds the rows of one ClaimBatch statement (0: no
	// bound, BatchArrays).
	ClaimBatchRows int
	// ClaimBatchLookup reads the message_id, fingerprint and message_type
	// of duplicates: args consumer, then the IDs of {ids} (at most
	// ClaimBatchRows). Unused with BatchArrays.
	ClaimBatchLookup string
	// Unclaim deletes an inbox row. Args: consumer, message_id.
	Unclaim string
	// TxAlive, when set, is a statement that fails when the transaction
	// can no longer commit (PostgreSQL: a savepoint made and released,
	// which fails in an aborted transaction and outside one): CheckTx
	// without a savepoint runs it. Where it is empty (a
	// transaction that the server or the handler ended leaves none
	// behind, and later statements commit on their own: MySQL, SQLite),
	// ClaimBatch creates a savepoint after its claim, which CheckTx
	// without a savepoint releases.
	TxAlive string

	// AttemptAdd counts a failed attempt or a transient failure
	// (RETURNING attempts, transient_failures when attemptCount is empty).
	// Args: consumer, message_id, error, attempts to add, transient
	// failures to add.
	AttemptAdd string
	// AttemptCount, when set, reads attempts and transient_failures after
	// AttemptAdd. Args: consumer, message_id.
	AttemptCount string
	// AttemptsDelete: args consumer, message_id.
	AttemptsDelete string

	// DeadInsert inserts a dead inbox row unless the row exists.
	// Args: consumer, message_id, message_type, fingerprint.
	DeadInsert string
	// DeadLetterInsert: args consumer, message_id, message_type, payload,
	// headers, error, attempts.
	DeadLetterInsert string
	// DeadLetterList returns id, consumer, message_id, message_type,
	// payload, headers, error, attempts, failed_at.
	// Args: consumer, after_id, limit.
	DeadLetterList string
	// DeadLetterGet locks and returns one dead letter, columns as
	// DeadLetterList. Args: consumer, id.
	DeadLetterGet string
	// DeadLetterDelete: args consumer, id.
	DeadLetterDelete string

	// Reclaim inserts the inbox row, or turns a dead row live; it reports
	// either (as the insert-if-absent statements do) and does nothing to a
	// live row. Args: consumer, message_id, message_type, fingerprint.
	Reclaim string

	// PruneInbox, pruneAttempts delete at most limit rows older than the
	// retention by the database clock. Args: retention_ms, limit.
	PruneInbox    string
	PruneAttempts string
	// PruneFrom: pruneInbox takes a third argument, the received_at to
	// start from (null: the first), and returns the number of rows deleted
	// and the received_at of the newest (store.PruneParams.From).
	PruneFrom bool

	// MigrationsCreate creates the migrations table if it is missing.
	MigrationsCreate string
	// MigrationsApplied returns the applied versions.
	MigrationsApplied string
	// SchemaVersion returns the highest applied version, 0 for none.
	SchemaVersion string
	// MigrationRecord: args version, name.
	MigrationRecord string

	// The outbox's statements (store.OutboxWriter, store.OutboxRelayer),
	// on {outbox}. Reads return OutboxColumns: seq, message_id,
	// destination, msg_key, message_type, headers, payload, attempts,
	// last_error, then created_at and parked_at in unix milliseconds
	// (parked_at NULL when not parked). Times are the database's clock;
	// durations are bound in milliseconds. The core fills in {values},
	// {seqs} and {failures} for each call (ExpandList), except for a
	// dialect that implements OutboxArrays.

	// OutboxWrite inserts rows in their order, skipping IDs already there,
	// and reports the rows it inserted as RowsAffected. {values} stands for
	// the rows, each OutboxWriteValues: args message_id, destination,
	// msg_key (NULL: none), message_type, headers, payload.
	OutboxWrite, OutboxWriteValues string
	// OutboxWriteQuiet is OutboxWrite without notifying listening relays;
	// empty where OutboxWrite notifies nobody. (A published row's ID is
	// still in the table: a Write of it is skipped.)
	OutboxWriteQuiet string
	// OutboxClaim and OutboxClaimOrdered lease the oldest due rows (not
	// parked, not published, available_at passed), which they return:
	// args limit, lease_ms, token. The ordered claim takes a row only when
	// no unpublished row of its key has a lower seq. Where OutboxLease is set
	// (no UPDATE ... RETURNING: MySQL), they only select the rows (FOR
	// UPDATE SKIP LOCKED; arg limit), in the transaction in which
	// OutboxLease then leases them: args lease_ms, token, then {seqs}.
	OutboxClaim, OutboxClaimOrdered, OutboxLease string
	// OutboxDelete deletes rows still leased by the token: args token,
	// then {seqs}.
	OutboxDelete string
	// OutboxMarkPublished marks rows still leased by the token published
	// (published_at now, lease_token NULL): args as OutboxDelete's.
	OutboxMarkPublished string
	// OutboxPrunePublished deletes at most limit rows published more than
	// age ago, oldest first: args age_ms, limit.
	OutboxPrunePublished string
	// OutboxFail records failures on rows still leased by the token:
	// {failures} stands for a derived table of them, columns seq, error,
	// delay_ms, park, released, whose rows are OutboxFailValues (a SELECT
	// that names them) joined by UNION ALL; then arg token.
	OutboxFail, OutboxFailValues string
	// OutboxParked: args after_seq, limit.
	OutboxParked string
	// OutboxUnpark: arg seq. RowsAffected is 0 when no parked row has it.
	OutboxUnpark string
	// OutboxDiscard deletes a parked row: arg seq. RowsAffected is 0
	// when no parked row has it.
	OutboxDiscard string

	// Keys are the statements of the idempotency keys' table.
	Keys KeyQueries
}

// KeyQueries are the statements of store.KeyStore, on {idempotency_keys}.
// Keys, scopes, methods, routes and fingerprints are bound as []byte;
// created_at is the database's clock.
type KeyQueries struct {
	// Lock, if set, waits for a claim of the same key in flight, before
	// Claim: args scope, idem_key, the wait as Queries.LockTimeoutText
	// formats it. Its lock timeout alone means that the key is in use;
	// Claim then runs with the transaction's lock timeout (PostgreSQL).
	// Without it, Claim waits for the key's row itself, under the wait.
	Lock string
	// Claim inserts the key's row unless it exists, and reports the row it
	// inserted as RowsAffected 1. Args: scope, idem_key, method, route,
	// fingerprint.
	Claim string
	// ClaimMarked: Claim marks a row it leaves alone with LAST_INSERT_ID(1),
	// as the insert-if-absent statements do where Queries.Returning is
	// false (MySQL); otherwise RowsAffected alone tells.
	ClaimMarked bool
	// WaitAtBegin: the database has one writer at a time, which waits for
	// its write lock at BEGIN (SQLite). KeyBegin's BEGIN waits the lock
	// timeout there, and its claim never meets another's uncommitted one.
	WaitAtBegin bool
	// Lookup reads a stored key: fingerprint, status, header, body and
	// created_at in unix milliseconds. Args: scope, idem_key.
	Lookup string
	// Save writes the response into the claimed row. Args: scope,
	// idem_key, status, header, body; with SaveKeyLast, status, header,
	// body, scope, idem_key (placeholders in the text's order: MySQL).
	Save        string
	SaveKeyLast bool
	// Prune deletes at most limit keys created more than retention ago,
	// oldest first, through the created_at index. Args: retention_ms,
	// limit. RowsAffected counts them.
	Prune string
}

// Pruner names a pruner, whose lock keeps a second one of the same tables
// away (LockPrune).
type Pruner int

const (
	// InboxPruner prunes the inbox and its attempts (Driver.Prune).
	InboxPruner Pruner = iota
	// KeysPruner prunes the idempotency keys (Driver.KeyPrune).
	KeysPruner
)

// BatchReport is how a dialect's ClaimBatch statement tells the rows it
// inserted from the duplicates.
type BatchReport int

const (
	// BatchNone: the dialect claims no batches.
	BatchNone BatchReport = iota
	// BatchReturning: it returns the message_id of each row it inserted
	// (RETURNING), in no particular order (SQLite).
	BatchReturning
	// BatchMask: LastInsertId is a bit mask of the duplicates, bit i for
	// the statement's row i, and RowsAffected the number of rows inserted:
	// each duplicate's ON DUPLICATE KEY UPDATE sets its bit with
	// LAST_INSERT_ID(expr), which the first row's values reset to 0
	// (MySQL and MariaDB, of which only MariaDB has INSERT ... RETURNING,
	// and that returns the existing rows too). At most 64 rows.
	BatchMask
	// BatchArrays: it takes args consumer, then arrays of the message
	// IDs, types and fingerprints, and returns a row per claim, in order:
	// claimed, and a duplicate's fingerprint and message type
	// (PostgreSQL, internal/pgsql's).
	BatchArrays
)

// ScriptFrame is what a dialect's MigrationScript puts around the
// migrations: header comment, lines that take and release Migrate's lock,
// and the clause that keeps the record statement from recording a version
// twice.
type ScriptFrame struct{ Header, Begin, End, RecordOnce string }

// EndConnTx commits or rolls back the transaction that a BEGIN on conn
// started.
func EndConnTx(ctx context.Context, conn *sql.Conn, commit bool) error {
	stmt := "ROLLBACK"
	if commit {
		stmt = "COMMIT"
	}
	_, err := conn.ExecContext(ctx, stmt)
	return err
}

// DefaultMaxIdleConns is how many idle connections the dialects' Open
// functions keep in their pools. database/sql keeps 2 by default, so a
// consumer with more workers closes connections after each burst and opens
// them again for the next: on MariaDB, bursts of 8 claims closed 6
// connections each and took 1.5-2.7 times as long (BenchmarkMySQLIdleConns,
// on a loaded machine). Keep at least as many
// as the consumer's Workers plus the connections the application uses
// besides; on a *sql.DB you open yourself (sql.Open("pgx", dsn) for
// Postgres), call db.SetMaxIdleConns likewise.
const DefaultMaxIdleConns = 16

// SetMaxIdleConns keeps n idle connections in db's pool: 0 means
// DefaultMaxIdleConns, negative none.
func SetMaxIdleConns(db *sql.DB, n int) {
	if n == 0 {
		n = DefaultMaxIdleConns
	}
	db.SetMaxIdleConns(max(n, 0))
}

// Render fills in the table names of t in every statement of q, with the
// tokens internal/migrate uses.
func Render(q Queries, t store.Tables, quote func(string) string) Queries {
	r := strings.NewReplacer(
		"{inbox}", t.Name("inbox", quote),
		"{attempts}", t.Name("inbox_attempts", quote),
		"{dead_letters}", t.Name("inbox_dead_letters", quote),
		"{migrations}", t.Name("inbox_migrations", quote),
		"{outbox}", t.Name("outbox", quote),
		"{idempotency_keys}", t.Name("idempotency_keys", quote),
	)
	for _, s := range []*string{
		&q.Claim, &q.ClaimSettingLockTimeout, &q.ClaimLookup, &q.RollbackToSavepoint,
		&q.ClaimBatch, &q.ClaimBatchLookup, &q.Unclaim,
		&q.AttemptAdd, &q.AttemptCount, &q.AttemptsDelete,
		&q.DeadInsert, &q.DeadLetterInsert, &q.DeadLetterList, &q.DeadLetterGet, &q.DeadLetterDelete,
		&q.Reclaim, &q.PruneInbox, &q.PruneAttempts,
		&q.MigrationsCreate, &q.MigrationsApplied, &q.SchemaVersion, &q.MigrationRecord,
		&q.OutboxWrite, &q.OutboxWriteQuiet, &q.OutboxClaim, &q.OutboxClaimOrdered, &q.OutboxLease,
		&q.OutboxDelete, &q.OutboxMarkPublished, &q.OutboxPrunePublished,
		&q.OutboxFail, &q.OutboxParked, &q.OutboxUnpark, &q.OutboxDiscard,
		&q.Keys.Lock, &q.Keys.Claim, &q.Keys.Lookup, &q.Keys.Save, &q.Keys.Prune,
	} {
		*s = r.Replace(*s)
	}
	return q
}

// FillLiterals replaces the statement's ? placeholders, in order, with
// args: an int as a number, a string as a string literal. Strings with a
// quote or a backslash are refused: MySQL reads a backslash as an escape,
// and the strings here are schema, prefix and migration file names.
func FillLiterals(stmt string, args ...any) (string, error) {
	parts := strings.Split(stmt, "?")
	if len(parts) != len(args)+1 {
		return "", fmt.Errorf("sqlstore: statement has %d placeholders, want %d", len(parts)-1, len(args))
	}
	var b strings.Builder
	for i, a := range args {
		b.WriteString(parts[i])
		switch a := a.(type) {
		case int:
			b.WriteString(strconv.Itoa(a))
		case string:
			if strings.ContainsAny(a, `'\`) {
				return "", fmt.Errorf("sqlstore: cannot print %q as an SQL literal", a)
			}
			b.WriteString("'" + a + "'")
		default:
			return "", fmt.Errorf("sqlstore: cannot print a %T as an SQL literal", a)
		}
	}
	b.WriteString(parts[len(args)])
	return b.String(), nil
}

// PacketChecker is implemented by a dialect whose server refuses, and then
// drops the connection for, a statement larger than a limit (MySQL's
// max_allowed_packet): CheckPacket returns an error wrapping
// store.ErrTooLarge before such a statement with args is sent.
type PacketChecker interface {
	CheckPacket(ctx context.Context, tx *sql.Tx, args ...[]byte) error
}

// Scripter is implemented by a dialect whose migration script is made
// elsewhere (PostgreSQL's: internal/pgsql's, shared with pgxstore).
type Scripter interface {
	Script(t store.Tables) (string, error)
}

// ExpandList replaces token in stmt with n copies of item joined by sep:
// the rows of a multi-row statement ("{values}", "(?, ?)", ", ").
func ExpandList(stmt, token, item string, n int, sep string) string {
	var b strings.Builder
	b.Grow(n * (len(item) + len(sep)))
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(item)
	}
	return strings.Replace(stmt, token, b.String(), 1)
}

// OutboxArrays is implemented by a dialect whose outbox statements take
// arrays (PostgreSQL): OutboxWrite, OutboxDelete and OutboxFail then run
// once, with these arguments and nothing to fill in, and OutboxWrite
// returns the number of rows it inserted as a row.
type OutboxArrays interface {
	// OutboxWriteArgs are OutboxWrite's arguments, with what notifies the
	// relays listening to tables t unless quiet (OutboxWriteQuiet).
	OutboxWriteArgs(t store.Tables, rows []*store.OutboxRow, quiet bool) []any
	// OutboxDeleteArgs are OutboxDelete's and OutboxMarkPublished's.
	OutboxDeleteArgs(token []byte, seqs []int64) []any
	OutboxFailArgs(token []byte, fails []store.OutboxFailure) []any
}

// Listener is implemented by a dialect whose database tells relays that
// outbox rows were committed (PostgreSQL's LISTEN/NOTIFY): OutboxListen
// listens for tables t on a connection of db that it holds, and drops
// rather than pools, until the notifications' Close. Its error wraps
// store.ErrNoNotifications where db's connections cannot listen.
type Listener interface {
	OutboxListen(ctx context.Context, db *sql.DB, t store.Tables) (store.OutboxNotifications, error)
}
