// Package store is the seam between package inbox and the databases.
//
// A [Driver] speaks one database for one transaction type TTx, such as
// pgx.Tx or *sql.Tx. The interface is not stable. It is not meant to be
// implemented outside this repository, and it changes whenever package inbox
// needs something new from the databases. To run the inbox on a new
// database, add a store to this repository. Then run the conformance suite in
// package storetest against it.
//
// Package store imports nothing of package inbox. Package inbox imports it.
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Driver is what package inbox needs from a database.
//
// Every method that takes a tx runs in it and leaves committing to the
// caller. Every method without one runs in a transaction of its own, or in
// none for reads.
//
// Errors that a later attempt may not hit are returned wrapped in
// [*RetryableError]. They are serialization failures, deadlocks, lock
// timeouts, busy databases, lost connections and a COMMIT of unknown
// outcome.
type Driver[TTx any] interface {
	// Dialect names the SQL dialect: "postgres", "sqlite" or "mysql".
	Dialect() string

	// Retryable reports whether err, returned by a handler, carries an error of
	// this database that a later attempt may not hit. Such errors are
	// deadlocks, serialization failures, lock timeouts and busy databases. The
	// database driver's own error type and code tell them.
	//
	// A lost connection counts too where the driver's error says so, as MySQL's
	// and database/sql's do. On PostgreSQL only a failure to connect counts. pgx
	// cannot tell an error mid-query from a network error of another kind.
	//
	// Retryable is the one place that decides which database errors are
	// transient. Package inbox retries such a handler error without counting it
	// as an attempt. A timeout or network error that is not the database
	// driver's, such as an HTTP call's, is not transient.
	Retryable(err error) bool

	// Unrecoverable reports whether err, returned to one of the store's own
	// statements, is one that no retry fixes. Examples are missing tables or
	// columns, denied permissions, a database that does not exist and refused
	// credentials.
	Unrecoverable(err error) bool

	// SchemaVersion returns the highest migration version applied to the
	// tables, 0 when they were never migrated.
	SchemaVersion(ctx context.Context) (int, error)

	// Begin opens a transaction with the lock timeout. Where the database has
	// isolation levels, it runs at READ COMMITTED.
	Begin(ctx context.Context, p *BeginParams) (TTx, error)

	// BeginClaim opens a transaction like Begin and claims the message in it.
	// It takes one round trip where the database allows it. On a duplicate it
	// ends the transaction itself and returns the zero TTx. On error no
	// transaction is left open.
	BeginClaim(ctx context.Context, p *ClaimParams) (TTx, *ClaimResult, error)

	// Claim claims the message in a transaction the caller opened. It sets
	// the lock timeout for the rest of that transaction where the database
	// allows it. When p.Savepoint is set it creates that savepoint just
	// before the claim, so that RollbackToSavepoint undoes the claim and
	// what followed it.
	Claim(ctx context.Context, tx TTx, p *ClaimParams) (*ClaimResult, error)

	// Commit commits tx. An error of unknown outcome is retryable, as when the
	// connection broke during COMMIT. The caller must then not ack. A COMMIT
	// that certainly did not happen, for a reason the handler caused, is not
	// retryable. An example is a result set the handler left open.
	Commit(ctx context.Context, tx TTx) error

	// CheckTx returns an error when tx can no longer commit what it did since
	// the savepoint.
	//   - PostgreSQL aborted tx after a failed statement.
	//   - The server rolled tx back, as MySQL does on a deadlock.
	//   - Its connection cannot run a statement. The error wraps
	//     [ErrTxUnusable].
	//   - tx is over, since a handler committed or rolled it back. The error
	//     wraps [ErrTxDone].
	//
	// A handler that swallowed such an error would otherwise see its COMMIT
	// roll back. Or it would commit its later writes without the claim.
	CheckTx(ctx context.Context, tx TTx, savepoint string) error

	// Rollback rolls tx back. It is safe to call after a failed Commit.
	Rollback(ctx context.Context, tx TTx) error

	// RollbackToSavepoint undoes what tx did after the named savepoint.
	//
	// The server may already have rolled back the whole transaction, as MySQL
	// does after a deadlock. Nothing is then left to undo. RollbackToSavepoint
	// begins a transaction again on tx's connection, for what the inbox records
	// next. It returns an error wrapping [ErrTxRestarted]. An error wrapping
	// [ErrTxUnusable] means tx can only be rolled back. One wrapping [ErrTxDone]
	// means tx is over.
	RollbackToSavepoint(ctx context.Context, tx TTx, name string) error

	// AttemptAdd counts one failed attempt of a message in tx, or a transient
	// failure when p.Transient is set. It returns the counts recorded so far,
	// this one included.
	AttemptAdd(ctx context.Context, tx TTx, p *AttemptParams) (Attempts, error)

	// AttemptsDelete forgets the failed attempts of a message in tx.
	AttemptsDelete(ctx context.Context, tx TTx, key Key) error

	// DeadLetterAdd writes a dead letter in tx and inserts the message's inbox
	// row marked dead. If the row already exists, it writes nothing and returns
	// false. Another delivery then processed the message meanwhile. With
	// p.Invalid, it writes only the dead letter and returns true. The ID is
	// then unusable as a key.
	DeadLetterAdd(ctx context.Context, tx TTx, p *DeadLetterParams) (bool, error)

	// DeadLetterList lists a consumer's dead letters in ID order.
	DeadLetterList(ctx context.Context, p *DeadLetterListParams) ([]*DeadLetter, error)

	// DeadLetterTake locks and deletes one dead letter of a consumer in tx and
	// returns it. It returns [ErrNotFound] if there is none with that ID.
	DeadLetterTake(ctx context.Context, tx TTx, consumer []byte, id int64) (*DeadLetter, error)

	// InboxReclaim claims a dead-lettered message again in tx, for a replay. It
	// turns the message's dead inbox row into a live one. It inserts the row if
	// pruning removed it. It returns false, and changes nothing, when the row is
	// live. A redelivery then processed the message after it was dead-lettered.
	InboxReclaim(ctx context.Context, tx TTx, p *ClaimParams) (bool, error)

	// Prune deletes at most p.Limit inbox rows and attempt records older than
	// p.Retention, in a transaction of its own. Age is by the database's clock.
	// When another pruner holds the table, it deletes nothing and reports Busy.
	// It takes the oldest rows through a btree on the time column. A batch thus
	// reads its own rows only, and costs the same on any table.
	Prune(ctx context.Context, p *PruneParams) (*PruneResult, error)

	// Migrate applies the migrations that are missing, safely when several
	// processes migrate at once.
	Migrate(ctx context.Context) error

	// Migrations returns the SQL of every migration, in order, with the
	// table names filled in, for teams that apply SQL themselves.
	Migrations() []Migration

	// DurabilityWarnings reports settings that let a committed claim be lost in
	// a crash or a failover, one sentence each. Examples are
	// synchronous_commit=off, and standbys that commits do not wait for. A
	// database that takes no writes, such as a standby, is an error that
	// wraps [ErrReadOnly].
	DurabilityWarnings(ctx context.Context) ([]string, error)
}

// Key identifies a message within the inbox.
type Key struct {
	Consumer  []byte
	MessageID []byte
}

// BeginParams are the parameters of Driver.Begin.
type BeginParams struct {
	// LockTimeout bounds how long a statement waits for a row lock. On SQLite
	// it bounds the wait of the transaction for the write lock. The inbox
	// always passes a positive value. Zero means something else on each
	// database. PostgreSQL then waits 1 ms. MySQL waits 1 s, its least. SQLite
	// waits the busy timeout. That is Options.BusyTimeout on a pool of
	// sqlite.Open, and the connection's otherwise.
	LockTimeout time.Duration
}

// ClaimParams are the parameters of a claim.
type ClaimParams struct {
	Key
	LockTimeout time.Duration
	Type        string
	// Fingerprint is the SHA-256 of the payload.
	Fingerprint []byte
	// Savepoint, when set, is created just before the claim. Only Claim uses
	// it.
	Savepoint string
}

// ClaimResult tells whether the claim inserted the inbox row.
type ClaimResult struct {
	// Claimed is true when this transaction inserted the row, so the message is
	// new. False means the row exists, and the message is a duplicate.
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
	// Transient counts a transient failure instead of an attempt. An example is
	// a deadlock in the handler's queries.
	Transient bool
}

// Increments returns what AttemptAdd adds to the attempts and to the
// transient failures. It adds 1 to one of them.
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
	// Invalid is true for a message whose ID cannot be a key, since it is empty
	// or too long. Only the dead letter is written.
	Invalid bool
}

// DeadLetterListParams are the parameters of Driver.DeadLetterList.
type DeadLetterListParams struct {
	Consumer []byte
	// AfterID lists dead letters whose ID is greater. A value of 0 starts at
	// the first.
	AfterID int64
	// Limit is the most returned, at least 1.
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
	// From, if not zero, is the Last of the previous batch. The batch then
	// starts there in the index. It does not step again over the rows already
	// deleted, which stay in the index until vacuum can remove them. Drivers
	// that cannot use From ignore it.
	From time.Time
}

// PruneResult is what one Prune call did.
type PruneResult struct {
	// Deleted counts the inbox rows and attempt records deleted.
	Deleted int
	// Busy is true when another pruner held the table.
	Busy bool
	// Last is the received_at of the newest inbox row deleted, for the next
	// batch's From. It is zero when none was deleted, or when the driver does
	// not tell.
	Last time.Time
}

// Migration is one versioned, forward-only schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// DefaultLockTimeout is how long the inbox's statements wait for a lock
// unless told otherwise. An example is a claim behind a racing delivery of
// the same message.
//
// It is inbox.DefaultLockTimeout. It is also MySQL's
// innodb_lock_wait_timeout on the pools that mysql.Open makes, and SQLite's
// busy timeout. The operations that take no lock timeout wait this long.
// They are Prune, Inspector.DeadLetterDiscard and the outbox relay's
// statements.
const DefaultLockTimeout = 5 * time.Second

// ErrReadOnly is wrapped by DurabilityWarnings's error when the database
// takes no writes: a standby, or a server whose transactions are
// read-only. Every claim would fail there.
var ErrReadOnly = errors.New("inbox store: the database is read-only")

// ErrNotFound is returned when a row that was asked for does not exist.
var ErrNotFound = errors.New("inbox store: not found")

// ErrTooLarge is wrapped by the error of DeadLetterAdd when the database
// refuses a value as too large for it. The inbox then keeps the dead letter
// without its payload and headers. The limits are MySQL's
// max_allowed_packet, 1 GB for a PostgreSQL bytea, and SQLite's
// SQLITE_MAX_LENGTH.
var ErrTooLarge = errors.New("inbox store: too large for the database")

// ErrTxUnusable is wrapped by the errors of CheckTx, Commit and
// RollbackToSavepoint when tx's connection cannot run another statement.
// With pgx, a result set left open does that. tx can then only be rolled
// back, which closes that connection.
var ErrTxUnusable = errors.New("inbox store: the transaction's connection cannot run a statement")

// ErrTxDone is wrapped by the errors of Commit, CheckTx, Savepoint and
// RollbackToSavepoint when tx had already been committed or rolled back. A
// handler called its Commit or Rollback. The error also wraps the driver's
// own, database/sql's sql.ErrTxDone or pgx's pgx.ErrTxClosed.
var ErrTxDone = errors.New("inbox store: the transaction was already committed or rolled back")

// ErrTxRestarted is wrapped by RollbackToSavepoint's error when the server
// had already rolled back the whole transaction. MySQL does that after a
// deadlock, or after a ROLLBACK the handler ran. A new transaction was then
// begun on tx's connection. What tx did before the savepoint is gone too.
// tx can go on only with what is written from now on.
var ErrTxRestarted = errors.New("inbox store: the transaction was rolled back by the server and begun again")

// RetryableError wraps an error after which trying again may succeed.
type RetryableError struct{ Err error }

func (e *RetryableError) Error() string   { return e.Err.Error() }
func (e *RetryableError) Unwrap() error   { return e.Err }
func (e *RetryableError) Retryable() bool { return true }

// Retryable wraps err in [*RetryableError]. A nil err stays nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &RetryableError{Err: err}
}

// Tables names the inbox's tables with an optional Schema and a Prefix.
// Each is empty or matches ^[A-Za-z_][A-Za-z0-9_]{0,40}$. They are checked
// before any SQL runs, and quoted anyway.
type Tables struct {
	// Schema is the PostgreSQL schema holding the tables. On MySQL it is the
	// database. Empty means the connection's default, as its search_path says.
	Schema string
	// Prefix is put before every table name, as in Prefix+"inbox",
	// Prefix+"inbox_attempts", Prefix+"inbox_dead_letters" and
	// Prefix+"inbox_migrations". Default empty.
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

// Name returns the quoted, schema-qualified name of table base, such as
// "inbox". quote quotes an identifier in the dialect.
func (t Tables) Name(base string, quote func(string) string) string {
	name := quote(t.Prefix + base)
	if t.Schema != "" {
		name = quote(t.Schema) + "." + name
	}
	return name
}

// QuoteDouble quotes an identifier the SQL standard's way, as "name".
func QuoteDouble(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// QuoteBacktick quotes an identifier MySQL's way, as `name`.
func QuoteBacktick(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// QueuedClaimer is implemented by drivers that can claim a message and run
// statements queued for it in one round trip. They run as one implicit
// transaction. PostgreSQL on pgx sends them as a batch with one Sync.
type QueuedClaimer interface {
	// ClaimAndRun sends a plain INSERT of the claim, then stmts, then the
	// implicit COMMIT. When the claim conflicts with a duplicate, nothing is
	// applied and Claimed is false. When a statement fails, nothing is applied
	// and the error is a [*StatementError]. Other errors are classified as the
	// driver's other errors. Examples are the claim's lock timeout and a lost
	// connection, after which the COMMIT's outcome is unknown.
	ClaimAndRun(ctx context.Context, p *ClaimParams, stmts []Statement) (*ClaimResult, error)
}

// Statement is a statement and its arguments, in the driver's dialect.
type Statement struct {
	SQL  string
	Args []any
}

// StatementError is the failure of a queued statement. It is the handler's
// error, as if the handler had run the statement itself.
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
// batch that meets a conflict, so its messages stop taking their locks
// together. With a driver without it, every error of Retryable counts.
type ConflictReporter interface {
	// Conflict reports whether err, returned by a handler or a COMMIT, is a
	// lock conflict with another transaction. That is a deadlock, a
	// serialization failure or a lock wait timeout. A lost connection or a busy
	// single-writer database is not one.
	Conflict(err error) bool
}

// BatchClaimer is implemented by drivers that claim a batch of messages in
// one statement.
type BatchClaimer[TTx any] interface {
	// ClaimBatch claims p.Claims in tx in one statement, in their order. It
	// returns a result per claim in that order. The result is Claimed, or for a
	// duplicate its stored fingerprint and type where the statement can tell
	// cheaply. Otherwise they are nil and "". An ID given twice is a duplicate
	// of its first claim. The caller sorts the claims by message ID, so that
	// two overlapping batches wait for each other instead of deadlocking.
	ClaimBatch(ctx context.Context, tx TTx, p *ClaimBatchParams) ([]ClaimResult, error)
	// Savepoint creates or moves the named savepoint in tx.
	Savepoint(ctx context.Context, tx TTx, name string) error
	// Unclaim deletes the inbox row that tx claimed for key, so that a
	// message whose handler failed commits no claim with the others.
	Unclaim(ctx context.Context, tx TTx, key Key) error
}

// BatchBeginner is a BatchClaimer that also begins the transaction and
// claims the batch in one round trip, as Driver.BeginClaim does for one
// message. pgx sends BEGIN and the claim in one batch.
type BatchBeginner[TTx any] interface {
	// BeginClaimBatch is Begin, then ClaimBatch in the new transaction. On error
	// no transaction is left open.
	BeginClaimBatch(ctx context.Context, p *ClaimBatchParams) (TTx, []ClaimResult, error)
}

// ClaimBatchParams are the parameters of BatchClaimer.ClaimBatch. Every
// claim has the same consumer.
type ClaimBatchParams struct {
	Claims      []ClaimParams
	LockTimeout time.Duration
}
