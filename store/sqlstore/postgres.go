package sqlstore

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
)

// Postgres is PostgreSQL through database/sql with pgx's stdlib driver
// (import _ "github.com/jackc/pgx/v5/stdlib"; sql.Open("pgx", dsn)), for a
// service that owns *sql.Tx transactions (sqlx, sqlc, GORM's *sql.DB, ent).
// It shares the schema, migrations and statements of store/pgxstore, which
// is faster: there BEGIN and the claim take one round trip, here
// database/sql sends them apart (the claim sets the lock timeout itself).
// sql.Open keeps 2 idle connections: call db.SetMaxIdleConns with at least
// the consumer's Workers (see DefaultMaxIdleConns).
var Postgres = Dialect{d: postgresDialect{}}

type postgresDialect struct{}

func (postgresDialect) name() string                     { return "postgres" }
func (postgresDialect) prepareClaims() bool              { return false }
func (postgresDialect) quote(ident string) string        { return store.QuoteDouble(ident) }
func (postgresDialect) migrations() (fs.FS, string)      { return pgsql.MigrationFS, "migrations" }
func (postgresDialect) checkTables(store.Tables) error   { return nil }
func (postgresDialect) statements(m string) []string     { return []string{m} } // simple protocol: several at once
func (postgresDialect) txOptions(*sql.DB) *sql.TxOptions { return postgresTxOptions }

// scriptFrame: MigrationScript uses internal/pgsql's Script instead.
func (postgresDialect) scriptFrame(store.Tables) (scriptFrame, error) {
	return scriptFrame{}, errors.New("the PostgreSQL script is internal/pgsql's")
}

var postgresTxOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// templates maps internal/pgsql's statements, with internal/migrate's
// table tokens, onto the dialect's.
func (postgresDialect) templates() queries {
	s := pgsql.NewStatements(pgsql.Tokens)
	return queries{
		returning:               true,
		claim:                   s.Claim,
		claimSettingLockTimeout: s.ClaimSettingLockTimeout,
		claimLookup:             s.ClaimLookup,
		rollbackToSavepoint:     "ROLLBACK TO SAVEPOINT ",
		attemptAdd:              s.AttemptAdd,
		attemptsDelete:          s.AttemptsDelete,
		deadInsert:              s.DeadInsert,
		deadLetterInsert:        s.DeadLetterInsert,
		deadLetterList:          s.DeadLetterList,
		deadLetterGet:           s.DeadLetterGet,
		deadLetterDelete:        s.DeadLetterDelete,
		reclaim:                 s.InboxReclaim,
		pruneInbox:              s.PruneInbox,
		pruneAttempts:           s.PruneAttempts,
		pruneFrom:               true,
		migrationsCreate:        s.CreateMigrations,
		migrationsApplied:       s.AppliedVersions,
		schemaVersion:           s.SchemaVersion,
		migrationRecord:         s.RecordMigration,
	}
}

var postgresStatements = pgsql.NewStatements(pgsql.Tokens)

// setLockTimeout sets lock_timeout for the rest of tx.
func (postgresDialect) setLockTimeout(ctx context.Context, tx *sql.Tx, d time.Duration) error {
	_, err := tx.ExecContext(ctx, postgresStatements.SetLockTimeout, pgsql.LockTimeout(d))
	return err
}

// setLockTimeoutAndSavepoint sets lock_timeout for the rest of tx, then
// creates the savepoint (quoted), in one round trip: without arguments pgx
// sends them as one simple query. In this order, since a rollback to the
// savepoint would undo a setting made after it.
func (postgresDialect) setLockTimeoutAndSavepoint(ctx context.Context, tx *sql.Tx, d time.Duration, savepoint string) error {
	_, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', '"+pgsql.LockTimeout(d)+"', true); SAVEPOINT "+savepoint)
	return err
}

func (postgresDialect) retryable(err error) bool {
	var r *store.RetryableError
	return errors.As(pgsql.Classify(err), &r)
}

func (postgresDialect) transient(err error) bool     { return pgsql.Transient(err) }
func (postgresDialect) unrecoverable(err error) bool { return pgsql.Unrecoverable(err) }

func (postgresDialect) missingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// prepareRefused: the dialect keeps no statements prepared.
func (postgresDialect) prepareRefused(error) bool { return false }

// savepointGone: PostgreSQL keeps an aborted transaction and its savepoints.
func (postgresDialect) savepointGone(error) bool { return false }

// connBusy: pgx's stdlib reports its "conn busy" as driver.ErrBadConn, as
// it does a connection lost before a statement was sent; after a handler
// that returned nil, the first is by far the likelier.
func (postgresDialect) tooLarge(err error) bool { return pgsql.TooLarge(err) }

func (postgresDialect) connBusy(err error) bool  { return errors.Is(err, driver.ErrBadConn) }
func (postgresDialect) claimDeadlock(error) bool { return false }

// busy: a lock timeout (55P03) behind another transaction.
func (postgresDialect) busy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// beginMigrate opens the migration transaction and takes the advisory lock
// of the schema; it creates the schema.
func (postgresDialect) beginMigrate(ctx context.Context, conn *sql.Conn, t store.Tables) error {
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

func (postgresDialect) endMigrate(ctx context.Context, conn *sql.Conn, _ store.Tables, commit bool) error {
	return endConnTx(ctx, conn, commit)
}

// lockPrune takes the session advisory lock of the tables' pruners.
func (postgresDialect) lockPrune(ctx context.Context, conn *sql.Conn, t store.Tables) (bool, error) {
	var ok bool
	err := conn.QueryRowContext(ctx, postgresStatements.TrySessionLock, pgsql.PruneLockKey(t)).Scan(&ok)
	return ok, err
}

func (postgresDialect) unlockPrune(ctx context.Context, conn *sql.Conn, t store.Tables) error {
	var ok bool
	err := conn.QueryRowContext(ctx, postgresStatements.SessionUnlock, pgsql.PruneLockKey(t)).Scan(&ok)
	if err == nil && !ok {
		err = errors.New("pg_advisory_unlock: the prune lock was not held")
	}
	return err
}

func (postgresDialect) durabilityWarnings(ctx context.Context, conn *sql.Conn) ([]string, error) {
	var sc, fsync string
	if err := conn.QueryRowContext(ctx, postgresStatements.Durability).Scan(&sc, &fsync); err != nil {
		return nil, err
	}
	return pgsql.DurabilityWarnings(sc, fsync), nil
}
