// Package store is the seam between package inbox and the databases.
//
// A Driver speaks one database for one transaction type TTx (pgx.Tx, *sql.Tx).
// The interface is not stable and is not meant to be implemented outside this
// module: it changes whenever package inbox needs something new from the
// databases. To run the inbox on a new database, add a store to this module and
// run the conformance suite in package storetest against it.
//
// Package store imports nothing of package inbox; package inbox imports it.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Driver is what package inbox needs from a database. Every method that takes
// a tx runs in it and leaves committing to the caller; every method without
// one runs in a transaction of its own (or none, for reads).
//
// Errors that a later attempt may not hit (serialization failures, deadlocks,
// lock timeouts, busy databases, lost connections, a COMMIT of unknown
// outcome) are returned wrapped in *RetryableError.
type Driver[TTx any] interface {
	// Dialect names the SQL dialect: "postgres", "sqlite" or "mysql".
	Dialect() string

	// Retryable reports whether err, returned by a handler, carries an
	// error of this database that a later attempt may not hit: a
	// deadlock, a serialization failure, a lock timeout, a busy database,
	// recognized by the database driver's own error type and code (a lost
	// connection too where the driver's error says so: MySQL's and
	// database/sql's; on PostgreSQL a failure to connect, not an error
	// mid-query, which pgx cannot tell from a network error of another
	// kind). It is the one place that decides which database
	// errors are transient: package inbox retries such a handler error
	// without counting it as an attempt. A timeout or network error that
	// is not the database driver's (an HTTP call's) is not transient.
	Retryable(err error) bool

	// Unrecoverable reports whether err, returned to one of the store's own
	// statements, is one that no retry fixes: the inbox's tables or
	// columns are missing, permission is denied, the database does not
	// exist, the credentials are refused.
	Unrecoverable(err error) bool

	// SchemaVersion returns the highest migration version applied to the
	// tables, 0 when they were never migrated.
	SchemaVersion(ctx context.Context) (int, error)

	// Begin opens a transaction at READ COMMITTED (where the database has
	// isolation levels) with the lock timeout.
	Begin(ctx context.Context, p *BeginParams) (TTx, error)

	// BeginClaim opens a transaction like Begin and claims the message in it,
	// in one round trip where the database allows it. On a duplicate it
	// ends the transaction itself and returns the zero TTx; on error no
	// transaction is left open.
	BeginClaim(ctx context.Context, p *ClaimParams) (TTx, *ClaimResult, error)

	// Claim claims the message in a transaction the caller opened. It sets
	// the lock timeout for the rest of that transaction where the database
	// allows it. When p.Savepoint is set it creates that savepoint just
	// before the claim, so that RollbackToSavepoint undoes the claim and
	// what followed it.
	Claim(ctx context.Context, tx TTx, p *ClaimParams) (*ClaimResult, error)

	// Commit commits tx. An error whose outcome is unknown (the connection
	// broke during COMMIT) is retryable: the caller must not ack. A COMMIT
	// that certainly did not happen for a reason the handler caused (it
	// left a result set open) is not retryable.
	Commit(ctx context.Context, tx TTx) error

	// CheckTx returns an error when tx can no longer commit what it did
	// since the savepoint: PostgreSQL aborted it after a failed statement,
	// the server rolled it back (a MySQL deadlock), or its connection
	// cannot run a statement (ErrTxUnusable), or it is over (ErrTxDone:
	// a handler committed or rolled it back). A handler that
	// swallowed such an error would otherwise see its COMMIT roll back, or
	// commit its later writes without the claim.
	CheckTx(ctx context.Context, tx TTx, savepoint string) error

	// Rollback rolls tx back. It is safe to call after a failed Commit.
	Rollback(ctx context.Context, tx TTx) error

	// RollbackToSavepoint undoes what tx did after the named savepoint.
	// When the server already rolled back the whole transaction (MySQL,
	// after a deadlock), nothing is left to undo: it begins a transaction
	// again on tx's connection, for what the inbox records next, and
	// returns an error wrapping ErrTxRestarted. An error wrapping
	// ErrTxUnusable: tx can only be rolled back; ErrTxDone: tx is over.
	RollbackToSavepoint(ctx context.Context, tx TTx, name string) error

	// AttemptAdd counts one failed attempt of a message in tx (a
	// transient failure when p.Transient) and returns the counts recorded
	// so far, this one included.
	AttemptAdd(ctx context.Context, tx TTx, p *AttemptParams) (Attempts, error)

	// AttemptsDelete forgets the failed attempts of a message in tx.
	AttemptsDelete(ctx context.Context, tx TTx, key Key) error

	// DeadLetterAdd writes a dead letter in tx and inserts the message's
	// inbox row marked dead. If the row already exists (another delivery
	// processed the message meanwhile) it writes nothing and returns false.
	// With p.Invalid it writes only the dead letter (the ID is unusable as a
	// key) and returns true.
	DeadLetterAdd(ctx context.Context, tx TTx, p *DeadLetterParams) (bool, error)

	// DeadLetterList lists a consumer's dead letters in ID order.
	DeadLetterList(ctx context.Context, p *DeadLetterListParams) ([]*DeadLetter, error)

	// DeadLetterTake locks and deletes one dead letter of a consumer in tx
	// and returns it; ErrNotFound if there is none with that ID.
	DeadLetterTake(ctx context.Context, tx TTx, consumer []byte, id int64) (*DeadLetter, error)

	// InboxReclaim claims a dead-lettered message again in tx, for a replay:
	// it turns its dead inbox row into a live one, or inserts the row if
	// pruning removed it. It returns false, changing nothing, when the row is
	// live: a redelivery processed the message after it was dead-lettered.
	InboxReclaim(ctx context.Context, tx TTx, p *ClaimParams) (bool, error)

	// Prune deletes at most p.Limit inbox rows and attempt records older than
	// p.Retention by the database's clock, in a transaction of its own. When
	// another pruner holds the table, it deletes nothing and reports Busy.
	// It takes the oldest rows through a btree on the time column, so that a
	// batch reads its own rows only and costs the same on any table.
	Prune(ctx context.Context, p *PruneParams) (*PruneResult, error)

	// Migrate applies the migrations that are missing, safely when several
	// processes migrate at once.
	Migrate(ctx context.Context) error

	// Migrations returns the SQL of every migration, in order, with the
	// table names filled in, for teams that apply SQL themselves.
	Migrations() []Migration

	// DurabilityWarnings reports settings that let a committed claim be
	// lost in a crash (synchronous_commit=off, ...), one sentence each.
	DurabilityWarnings(ctx context.Context) ([]string, error)
}

// Key identifies a message within the inbox.
type Key struct {
	Consumer  []byte
	MessageID []byte
}

// BeginParams are the parameters of Driver.Begin.
type BeginParams struct {
	// LockTimeout bounds how long a statement waits for a row lock (on
	// SQLite: the transaction for the write lock). The inbox always
	// passes a positive value. Zero means something else on each
	// database. PostgreSQL waits 1 ms. MySQL waits 1 s, its least.
	// SQLite waits the busy timeout: Options.BusyTimeout on a pool of
	// sqlite.Open, else the connection's.
	LockTimeout time.Duration
}

// ClaimParams are the parameters of a claim.
type ClaimParams struct {
	Key
	LockTimeout time.Duration
	Type        string
	// Fingerprint is the SHA-256 of the payload.
	Fingerprint []byte
	// Savepoint, when set, is created just before the claim (Claim only).
	Savepoint string
}

// ClaimResult tells whether the claim inserted the inbox row.
type ClaimResult struct {
	// Claimed is true when this transaction inserted the row: the message
	// is new. False means the row exists: the message is a duplicate.
	Claimed bool
	// Fingerprint is the stored fingerprint of a duplicate, nil if unknown.
	Fingerprint []byte
	// Type is the stored message type of a duplicate, empty if unknown.
	Type string
}

// AttemptParams are the parameters of Driver.AttemptAdd.
type AttemptParams struct {
	Key
	// Error is the failure, valid UTF-8 without NUL bytes.
	Error string
	// Transient counts a transient failure (a deadlock in the handler's
	// queries) instead of an attempt.
	Transient bool
}

// Increments returns what AttemptAdd adds to the attempts and to the
// transient failures: 1 to one of them.
func (p *AttemptParams) Increments() (counted, transient int) {
	if p.Transient {
		return 0, 1
	}
	return 1, 0
}

// Attempts are the failures recorded for a message.
type Attempts struct {
	// Counted is the number of failed attempts that count towards
	// dead-lettering.
	Counted int
	// Transient is the number of transient failures.
	Transient int
}

// DeadLetterParams are the parameters of Driver.DeadLetterAdd.
type DeadLetterParams struct {
	ClaimParams
	Payload []byte
	// Headers are the message's headers, encoded by package inbox.
	Headers  []byte
	Error    string
	Attempts int
	// Invalid is true for a message whose ID cannot be a key (empty or too
	// long): only the dead letter is written.
	Invalid bool
}

// DeadLetterListParams are the parameters of Driver.DeadLetterList.
type DeadLetterListParams struct {
	Consumer []byte
	// AfterID lists dead letters whose ID is greater; 0 starts at the first.
	AfterID int64
	// Limit is the most returned; at least 1.
	Limit int
}

// DeadLetter is a stored dead letter.
type DeadLetter struct {
	ID       int64
	Key      Key
	Type     string
	Payload  []byte
	Headers  []byte
	Error    string
	Attempts int
	FailedAt time.Time
}

// PruneParams are the parameters of Driver.Prune.
type PruneParams struct {
	Retention time.Duration
	Limit     int
	// From, if not zero, is the Last of the previous batch: the batch
	// starts there in the index instead of stepping again over the rows
	// already deleted, which stay in it until vacuum can remove them.
	// Drivers that cannot use it ignore it.
	From time.Time
}

// PruneResult is what one Prune call did.
type PruneResult struct {
	// Deleted counts the inbox rows and attempt records deleted.
	Deleted int
	// Busy is true when another pruner held the table.
	Busy bool
	// Last is the received_at of the newest inbox row deleted, for the
	// next batch's From; zero when none was, or the driver does not tell.
	Last time.Time
}

// Migration is one versioned, forward-only schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// DefaultLockTimeout is how long the inbox's statements wait for a lock
// (a claim behind a racing delivery of the same message) unless told
// otherwise: inbox.DefaultLockTimeout, MySQL's innodb_lock_wait_timeout of
// the pools its Open makes, SQLite's busy timeout. The operations that
// take no lock timeout wait this long: Prune, Inspector.DeadLetterDiscard
// and the outbox relay's statements.
const DefaultLockTimeout = 5 * time.Second

// ErrNotFound is returned when a row that was asked for does not exist.
var ErrNotFound = errors.New("inbox store: not found")

// ErrTooLarge is wrapped by the error of DeadLetterAdd when the database
// refuses a value as too large for it (MySQL's max_allowed_packet, 1 GB
// for a PostgreSQL bytea, SQLite's SQLITE_MAX_LENGTH): the inbox then
// keeps the dead letter without its payload and headers.
var ErrTooLarge = errors.New("inbox store: too large for the database")

// ErrTxUnusable is wrapped by the errors of CheckTx, Commit and
// RollbackToSavepoint when tx's connection cannot run another statement
// (pgx, with a result set left open): tx can only be rolled back, which
// closes that connection.
var ErrTxUnusable = errors.New("inbox store: the transaction's connection cannot run a statement")

// ErrTxDone is wrapped by the errors of Commit, CheckTx, Savepoint and
// RollbackToSavepoint when tx had already been committed or rolled back (a
// handler called its Commit or Rollback), together with the driver's own
// error: database/sql's sql.ErrTxDone, pgx's pgx.ErrTxClosed.
var ErrTxDone = errors.New("inbox store: the transaction was already committed or rolled back")

// ErrTxRestarted is wrapped by RollbackToSavepoint's error when the server
// had already rolled back the whole transaction (MySQL, after a deadlock
// or a ROLLBACK the handler ran) and a new one was begun on tx's
// connection: what tx did before the savepoint is gone too, and tx can
// go on only with what is written from now on.
var ErrTxRestarted = errors.New("inbox store: the transaction was rolled back by the server and begun again")

// RetryableError wraps an error after which trying again may succeed.
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string   { return e.Err.Error() }
func (e *RetryableError) Unwrap() error   { return e.Err }
func (e *RetryableError) Retryable() bool { return true }

// Retryable wraps err in *RetryableError; nil stays nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// Tables names the inbox's tables: Schema (optional) and Prefix, each
// matching ^[A-Za-z_][A-Za-z0-9_]{0,40}$ or empty. They are checked before
// any SQL runs and quoted anyway.
type Tables struct {
	// Schema is the PostgreSQL schema (MySQL: database) holding the tables.
	// Empty means the connection's default (search_path).
	Schema string
	// Prefix is put before every table name: Prefix+"inbox",
	// Prefix+"inbox_attempts", Prefix+"inbox_dead_letters",
	// Prefix+"inbox_migrations". Empty by default.
	Prefix string
}

// ErrInvalidTables is returned for a schema or prefix that does not match
// the allowed pattern.
var ErrInvalidTables = errors.New("inbox store: invalid table names")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,40}$`)

// Validate checks Schema and Prefix.
func (t Tables) Validate() error {
	if t.Schema != "" && !identRE.MatchString(t.Schema) {
		return fmt.Errorf("%w: schema %q must match %s", ErrInvalidTables, truncate(t.Schema, 60), identRE)
	}
	if t.Prefix != "" && !identRE.MatchString(t.Prefix) {
		return fmt.Errorf("%w: prefix %q must match %s", ErrInvalidTables, truncate(t.Prefix, 60), identRE)
	}
	return nil
}

// Name returns the quoted, schema-qualified name of table base (for
// example "inbox"), with quote quoting an identifier in the dialect.
func (t Tables) Name(base string, quote func(string) string) string {
	name := quote(t.Prefix + base)
	if t.Schema != "" {
		name = quote(t.Schema) + "." + name
	}
	return name
}

// QuoteDouble quotes an identifier the SQL standard's way ("name").
func QuoteDouble(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// QuoteBacktick quotes an identifier MySQL's way (`name`).
func QuoteBacktick(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Pipeliner is implemented by drivers that can claim a message and run
// statements queued for it as one implicit transaction in one round trip
// (PostgreSQL on pgx: a batch with one Sync).
type Pipeliner interface {
	// ClaimAndRun sends a plain INSERT of the claim, then stmts, then the
	// implicit COMMIT. When the claim conflicts (a duplicate), nothing is
	// applied and Claimed is false. When a statement fails, nothing is
	// applied and the error is a *StatementError. Another error (the
	// claim's lock timeout, a lost connection: the COMMIT's outcome is then
	// unknown) is classified as the driver's other errors.
	ClaimAndRun(ctx context.Context, p *ClaimParams, stmts []Statement) (*ClaimResult, error)
}

// Statement is a statement and its arguments, in the driver's dialect.
type Statement struct {
	SQL  string
	Args []any
}

// StatementError is the failure of a queued statement: the handler's
// error, as if it had run the statement itself.
type StatementError struct {
	// Index is the statement's position in the queue.
	Index int
	Err   error
}

func (e *StatementError) Error() string {
	return fmt.Sprintf("queued statement %d: %v", e.Index, e.Err)
}
func (e *StatementError) Unwrap() error { return e.Err }

// ConflictReporter is implemented by drivers that can tell a lock conflict
// from the other transient errors of Driver.Retryable. Consume splits a
// batch that meets a conflict, so that its messages stop taking their
// locks together; a driver without it has every error of Retryable count.
type ConflictReporter interface {
	// Conflict reports whether err, returned by a handler or a COMMIT,
	// is a lock conflict with another transaction: a deadlock, a
	// serialization failure or a lock wait timeout. A lost connection or
	// a busy single-writer database is not one.
	Conflict(err error) bool
}

// BatchClaimer is implemented by drivers that claim a batch of messages in
// one statement.
type BatchClaimer[TTx any] interface {
	// ClaimBatch claims p.Claims in tx in one statement, in their order
	// (the caller sorts them by message ID, so that two overlapping
	// batches wait for each other instead of deadlocking), and returns
	// a result per claim in that order: Claimed, or for a duplicate its
	// stored fingerprint and type where the statement can tell cheaply
	// (nil, "" otherwise). An ID given twice is a duplicate of its first
	// claim.
	ClaimBatch(ctx context.Context, tx TTx, p *ClaimBatchParams) ([]ClaimResult, error)
	// Savepoint creates (or moves) the named savepoint in tx.
	Savepoint(ctx context.Context, tx TTx, name string) error
	// Unclaim deletes the inbox row that tx claimed for key, so that a
	// message whose handler failed commits no claim with the others.
	Unclaim(ctx context.Context, tx TTx, key Key) error
}

// BatchBeginner is a BatchClaimer that also begins the transaction and
// claims the batch in one round trip (pgx: BEGIN and the claim in one
// batch), as Driver.BeginClaim does for one message.
type BatchBeginner[TTx any] interface {
	// BeginClaimBatch is Begin, then ClaimBatch in the new transaction;
	// on error no transaction is left open.
	BeginClaimBatch(ctx context.Context, p *ClaimBatchParams) (TTx, []ClaimResult, error)
}

// ClaimBatchParams are the parameters of BatchClaimer.ClaimBatch; every
// claim has the same consumer.
type ClaimBatchParams struct {
	Claims      []ClaimParams
	LockTimeout time.Duration
}
