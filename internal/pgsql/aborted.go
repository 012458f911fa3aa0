package pgsql

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AbortedError is the error of a transaction that PostgreSQL aborted
// after a statement failed whose error the handler did not return. It
// wraps ErrTxAborted and the driver's error, but not the statement's: a
// swallowed deadlock must not make the handler's failure look transient.
type AbortedError struct {
	// Committing: the COMMIT rolled back, rather than a check before it.
	Committing bool
	// Cause is the failed statement's error, nil when the driver did not
	// keep it.
	Cause error
	// Err is the driver's error: pgx.ErrTxCommitRollback, or the check's.
	Err error
}

func (e *AbortedError) Error() string {
	s := "a statement in its transaction failed and PostgreSQL aborted it"
	if e.Committing {
		s = "the handler returned nil, but " + s
	}
	if e.Cause != nil {
		return s + ": " + e.Cause.Error()
	}
	return s + ", so it cannot commit (return a failed statement's error from the handler)"
}

func (e *AbortedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrTxAborted}
	}
	return []error{ErrTxAborted, e.Err}
}

// CommitAborted reports whether err is the error of a COMMIT that
// PostgreSQL turned into a rollback (pgx.ErrTxCommitRollback).
func CommitAborted(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) }

// LockNotAvailable reports whether err is lock_not_available (55P03): a
// lock timeout.
func LockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// DivisionByZero reports whether err is division_by_zero (22012), as
// KeySaveClaimed fails when its row is gone.
func DivisionByZero(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// InAborted reports whether err is in_failed_sql_transaction (25P02): a
// statement sent in a transaction already aborted.
func InAborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}
