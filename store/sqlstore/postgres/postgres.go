// Package postgres is the PostgreSQL dialect of package sqlstore, for
// services on database/sql.
//
// It registers pgx's stdlib driver, as "pgx". Services on pgx itself use
// store/pgxstore.
//
//	db, err := sql.Open("pgx", dsn)
//	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect})
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// Dialect is PostgreSQL through database/sql with pgx's stdlib driver. This
// package imports that driver. Open the pool with sql.Open and the driver
// name "pgx".
//
// Dialect is for a service that owns *sql.Tx transactions, as with sqlx,
// sqlc, GORM's *sql.DB or ent. It shares the schema, migrations and
// statements of store/pgxstore. pgxstore is faster, since there BEGIN and
// the claim take one round trip. Here database/sql sends them apart, and
// the claim sets the lock timeout itself.
//
// sql.Open keeps 2 idle connections. Call db.SetMaxIdleConns with at least
// the consumer's Workers, as sqlstore.DefaultMaxIdleConns tells.
var Dialect = sqlstore.NewDialect(postgresDialect{})

var (
	_ sqldialect.Scripter     = postgresDialect{}
	_ sqldialect.OutboxArrays = postgresDialect{}
	_ sqldialect.Listener     = postgresDialect{}
)

type postgresDialect struct{}

func (postgresDialect) Name() string                     { return "postgres" }
func (postgresDialect) PrepareClaims() bool              { return false }
func (postgresDialect) Quote(ident string) string        { return store.QuoteDouble(ident) }
func (postgresDialect) Migrations() (fs.FS, string)      { return pgsql.MigrationFS, "migrations" }
func (postgresDialect) CheckTables(store.Tables) error   { return nil }
func (postgresDialect) Statements(m string) []string     { return []string{m} } // simple protocol: several at once
func (postgresDialect) TxOptions(*sql.DB) *sql.TxOptions { return postgresTxOptions }

// scriptFrame: MigrationScript uses internal/pgsql's Script instead.
func (postgresDialect) ScriptFrame(store.Tables) (sqldialect.ScriptFrame, error) {
	return sqldialect.ScriptFrame{}, errors.New("the PostgreSQL script is internal/pgsql's")
}

// postgresTxAlive fails in an aborted transaction, and outside a
// transaction block (a handler ended it: later statements commit on their
// own); one round trip (a simple query, without arguments), and no
// subtransaction left.
const postgresTxAlive = `SAVEPOINT "inbox_batch_check"; RELEASE SAVEPOINT "inbox_batch_check"`

var postgresTxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// templates maps internal/pgsql's statements, with internal/migrate's
// table tokens, onto the dialect's.
func (postgresDialect) Templates() sqldialect.Queries {
	s := pgsql.NewStatements(pgsql.Tokens)
	return sqldialect.Queries{
		Returning:               true,
		Claim:                   s.Claim,
		ClaimSettingLockTimeout: s.ClaimSettingLockTimeout,
		LockTimeoutText:         pgsql.LockTimeout,
		ClaimLookup:             s.ClaimLookup,
		RollbackToSavepoint:     "ROLLBACK TO SAVEPOINT ",
		ClaimBatch:              s.ClaimBatch,
		ClaimBatchBy:            sqldialect.BatchArrays,
		Unclaim:                 s.Unclaim,
		TxAlive:                 postgresTxAlive,
		AttemptAdd:              s.AttemptAdd,
		AttemptsDelete:          s.AttemptsDelete,
		DeadInsert:              s.DeadInsert,
		DeadLetterInsert:        s.DeadLetterInsert,
		DeadLetterList:          s.DeadLetterList,
		DeadLetterGet:           s.DeadLetterGet,
		DeadLetterDelete:        s.DeadLetterDelete,
		Reclaim:                 s.InboxReclaim,
		PruneInbox:              s.PruneInbox,
		PruneAttempts:           s.PruneAttempts,
		PruneFrom:               true,
		MigrationsCreate:        s.CreateMigrations,
		MigrationsApplied:       s.AppliedVersions,
		SchemaVersion:           s.SchemaVersion,
		MigrationRecord:         s.RecordMigration,
		OutboxWrite:             s.OutboxWrite,
		OutboxWriteQuiet:        s.OutboxWriteQuiet,
		OutboxClaim:             s.OutboxClaim,
		OutboxClaimOrdered:      s.OutboxClaimOrdered,
		OutboxDelete:            s.OutboxDelete,
		OutboxMarkPublished:     s.OutboxMarkPublished,
		OutboxPrunePublished:    s.OutboxPrunePublished,
		OutboxFail:              s.OutboxFail,
		OutboxParked:            s.OutboxParked,
		OutboxUnpark:            s.OutboxUnpark,
		OutboxDiscard:           s.OutboxDiscard,
		Keys: sqldialect.KeyQueries{
			Lock:   s.KeyLock,
			Claim:  s.KeyClaim,
			Lookup: s.KeyLookup,
			Save:   s.KeySave,
			Prune:  s.KeyPrune,
		},
	}
}

// OutboxWriteArgs: internal/pgsql's arrays, and the channel to notify
// unless quiet. pgx's stdlib driver binds Go slices as arrays.
func (postgresDialect) OutboxWriteArgs(t store.Tables, rows []*store.OutboxRow, quiet bool) []any {
	args := pgsql.OutboxWriteArgs(rows)
	if !quiet {
		args = append(args, pgsql.OutboxChannel(t))
	}
	return args
}

func (postgresDialect) OutboxDeleteArgs(token []byte, seqs []int64) []any {
	return []any{seqs, token}
}

func (postgresDialect) OutboxFailArgs(token []byte, fails []store.OutboxFailure) []any {
	return pgsql.OutboxFailArgs(token, fails)
}

var postgresStatements = pgsql.NewStatements(pgsql.Tokens)

// setLockTimeout sets lock_timeout for the rest of tx.
func (postgresDialect) SetLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error {
	_, err := tx.ExecContext(ctx, postgresStatements.SetLockTimeout, pgsql.LockTimeout(d))
	return err
}

// setLockTimeoutAndSavepoint sets lock_timeout for the rest of tx, then
// creates the savepoint (quoted), in one round trip: without arguments pgx
// sends them as one simple query. In this order, since a rollback to the
// savepoint would undo a setting made after it.
func (postgresDialect) SetLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error {
	_, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', '"+pgsql.LockTimeout(d)+"', true); SAVEPOINT "+savepoint)
	return err
}

func (postgresDialect) Retryable(err error) bool {
	var r *store.RetryableError
	return errors.As(pgsql.Classify(err), &r)
}

func (postgresDialect) Transient(err error) bool     { return pgsql.Transient(err) }
func (postgresDialect) Conflict(err error) bool      { return pgsql.Conflict(err) }
func (postgresDialect) Deadlock(err error) bool      { return pgsql.Deadlock(err) }
func (postgresDialect) Unrecoverable(err error) bool { return pgsql.Unrecoverable(err) }

func (postgresDialect) MissingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// prepareRefused: the dialect keeps no statements prepared.
func (postgresDialect) PrepareRefused(error) bool { return false }

// savepointGone: PostgreSQL keeps an aborted transaction and its savepoints.
func (postgresDialect) SavepointGone(error) bool { return false }

// TooLarge: program_limit_exceeded (54000).
func (postgresDialect) TooLarge(err error) bool { return pgsql.TooLarge(err) }

// ConnBusy: pgx's stdlib reports its "conn busy" as driver.ErrBadConn, as
// it does a connection lost or closed before a statement was sent; after a
// handler that returned nil, the first is by far the likelier (the other
// is then counted as a handler failure too, as Process would).
func (postgresDialect) ConnBusy(err error) bool  { return errors.Is(err, driver.ErrBadConn) }
func (postgresDialect) ClaimDeadlock(error) bool { return false }

// busy: a lock timeout (55P03) behind another transaction.
func (postgresDialect) Busy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// beginMigrate opens the migration transaction and takes the advisory lock
// of the schema; it creates the schema.
func (postgresDialect) BeginMigrate(ctx context.Context, conn *sql.Conn, t store.Tables) error {
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, postgresStatements.Lock, pgsql.MigrateLockKey(t)); err != nil {
		return err
	}
	if create := pgsql.CreateSchema(t); create != "" {
		if _, err := conn.ExecContext(ctx, create); err != nil {
			return err
		}
	}
	return nil
}

func (postgresDialect) EndMigrate(ctx context.Context, conn *sql.Conn, _ store.Tables, commit bool) error {
	return sqldialect.EndConnTx(ctx, conn, commit)
}

// LockPrune takes the session advisory lock of the tables' pruner. The
// keys' pruner takes the key that pgxstore's takes for its transaction, so
// the two exclude each other too.
func (postgresDialect) LockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, p sqldialect.Pruner) (bool, error) {
	var ok bool
	err := conn.QueryRowContext(ctx, postgresStatements.TrySessionLock, postgresPruneLockKey(t, p)).Scan(&ok)
	return ok, err
}

func (postgresDialect) UnlockPrune(ctx context.Context, conn *sql.Conn, t store.Tables, p sqldialect.Pruner) error {
	var ok bool
	err := conn.QueryRowContext(ctx, postgresStatements.SessionUnlock, postgresPruneLockKey(t, p)).Scan(&ok)
	if err == nil && !ok {
		err = errors.New("pg_advisory_unlock: the prune lock was not held")
	}
	return err
}

// postgresPruneLockKey is the advisory lock key of pruner p on tables t.
func postgresPruneLockKey(t store.Tables, p sqldialect.Pruner) int64 {
	if p == sqldialect.KeysPruner {
		return pgsql.KeysPruneLockKey(t)
	}
	return pgsql.PruneLockKey(t)
}

func (postgresDialect) DurabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error) {
	dur, err := pgsql.ScanDurability(conn.QueryRowContext(ctx, postgresStatements.Durability).Scan)
	if err != nil {
		return nil, err
	}
	return dur.Warnings()
}

// Script is the migration script of tables t, internal/pgsql's (the one
// pgxstore prints too).
func (postgresDialect) Script(t store.Tables) (string, error) {
	q, err := pgsql.New(t)
	if err != nil {
		return "", err
	}
	return q.Script()
}
