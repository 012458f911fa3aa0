package inbox

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidMessage is the sentinel of [*InvalidMessageError]. The
	// message cannot be processed as it is, and no retry will change that.
	// Such a message belongs in a dead letter with its payload.
	ErrInvalidMessage = errors.New("inbox: invalid message")

	// ErrFingerprintConflict is [Outcome.Err] of a Duplicate whose payload
	// differs from the payload first processed under its ID. A producer
	// reused an ID for different content.
	ErrFingerprintConflict = errors.New("inbox: message ID reused for a different payload")

	// ErrUnrecoverable marks a database error that no retry fixes. Such
	// errors are the inbox's tables or columns missing, a permission
	// denied, a database that does not exist and credentials refused.
	// Process returns it with a Retry outcome, and nothing was committed.
	// [Consume] stops and returns it, as it does for a broker's terminal
	// error.
	ErrUnrecoverable = errors.New("inbox: database error that no retry fixes")

	// ErrNotMigrated is returned by [New] when the inbox's tables are
	// missing or at an older schema version than the code needs.
	ErrNotMigrated = errors.New("inbox: tables not migrated")

	// ErrTxEndedByHandler tells that the handler committed or rolled back
	// the inbox's transaction itself. It must not, as Process commits it.
	// Process's error wraps it, and so does a batch message's
	// [Outcome.Err] in ProcessBatch. The claim and the handler's writes
	// may or may not have committed. The attempt counts as a handler
	// failure. The package's section "Transactions handlers must not end"
	// tells the outcomes.
	ErrTxEndedByHandler = errors.New("inbox: the handler ended the inbox's transaction (Commit or Rollback in a handler)")

	// ErrPayloadLost is returned by [Inbox.Replay] for a dead letter whose
	// payload and headers the database refused to store. Then
	// [DeadLetter.PayloadLost] is true.
	ErrPayloadLost = errors.New("inbox: the dead letter's payload was not kept")
)

// InvalidMessageError says why a message is invalid. errors.Is(err,
// [ErrInvalidMessage]) is true for it.
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

// Permanent marks a handler's error as permanent. The message is then
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
// backoff's delay. The attempt still counts towards [Config.MaxAttempts].
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

// IsRetryable reports whether err is marked transient. Such an error has a
// Retryable() bool method that returns true, as *store.RetryableError does.
//
// The stores mark the transient errors of the inbox's own statements. A
// lock timeout behind a racing delivery, a lost connection and a COMMIT of
// unknown outcome are such errors. Process marks a handler's error that the
// store recognized as a transient database error, such as a deadlock. A
// handler may mark its own errors too.
//
// IsRetryable keeps no list of database errors. The store decides which are
// transient, with store.Driver.Retryable.
func IsRetryable(err error) bool {
	var r interface{ Retryable() bool }
	return errors.As(err, &r) && r.Retryable()
}
