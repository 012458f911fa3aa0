package inbox

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidMessage is the sentinel of *InvalidMessageError: the message
	// (or the consumer name) cannot be processed as it is, and no retry will
	// change that. Such a message belongs in a dead letter with its payload.
	ErrInvalidMessage = errors.New("inbox: invalid message")

	// ErrFingerprintConflict is Outcome.Err of a Duplicate whose payload
	// differs from the payload first processed under its ID: a producer
	// reused an ID for different content.
	ErrFingerprintConflict = errors.New("inbox: message ID reused for a different payload")

	// ErrUnrecoverable marks a database error that no retry fixes: the
	// inbox's tables or columns are missing, permission is denied, the
	// database does not exist, the credentials are refused. Process
	// returns it with a Retry outcome (nothing was committed); Consume
	// stops and returns it, as it does for a broker's terminal error.
	ErrUnrecoverable = errors.New("inbox: database error that no retry fixes")

	// ErrNotMigrated is returned by New when the inbox's tables are
	// missing or at an older schema version than the code needs.
	ErrNotMigrated = errors.New("inbox: tables not migrated")

	// ErrTxEndedByHandler is wrapped by Process's error (and a batch
	// message's Outcome.Err in ProcessBatch) when the handler
	// committed or rolled back the inbox's transaction itself (it must
	// not: Process commits it): the claim and the handler's writes may or
	// may not have committed. The attempt counts as a handler failure:
	// the outcome is Retry (DeadLettered at MaxAttempts, or Duplicate
	// when the dead letter finds the handler's commit), and a redelivery
	// is then a Duplicate if they did commit, or runs the handler again
	// if they did not.
	ErrTxEndedByHandler = errors.New("inbox: the handler ended the inbox's transaction (Commit or Rollback in a handler)")

	// ErrPayloadLost is returned by Replay for a dead letter whose payload
	// and headers the database refused to store (DeadLetter.PayloadLost).
	ErrPayloadLost = errors.New("inbox: the dead letter's payload was not kept")
)

// InvalidMessageError says why a message is invalid. errors.Is(err,
// ErrInvalidMessage) is true for it.
type InvalidMessageError struct {
	// Reason is a short sentence, such as "empty ID".
	Reason string
}

func (e *InvalidMessageError) Error() string        { return "inbox: invalid message: " + e.Reason }
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

func invalid(reason string) error { return &InvalidMessageError{Reason: reason} }

// permanentError marks a handler error that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a handler's error as permanent: the message is
// dead-lettered at once instead of being retried.
//
//	if errors.Is(err, ErrUnknownAccount) {
//		return inbox.Permanent(err)
//	}
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryAfterError carries a handler's own retry delay.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter makes a handler's error retried after d instead of the
// backoff's delay. The attempt still counts towards MaxAttempts.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, delay: d}
}

// PanicError is the error a handler's recovered panic becomes.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("inbox: handler panicked: %v", e.Value) }

// IsRetryable reports whether err is marked transient: it has a
// Retryable() bool method that returns true, as *store.RetryableError does.
// The stores mark the transient errors of the inbox's own statements (a
// lock timeout behind a racing delivery, a lost connection, a COMMIT of
// unknown outcome), and Process marks a handler's error that the store
// recognized as a transient database error (a deadlock); a handler may
// mark its own errors too. It keeps no list of database errors: the store
// decides which are transient (store.Driver.Retryable).
func IsRetryable(err error) bool {
	var r interface{ Retryable() bool }
	return errors.As(err, &r) && r.Retryable()
}
