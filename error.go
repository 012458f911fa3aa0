package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidMessage is the sentinel of *InvalidMessageError: the message
	// (or the consumer name) cannot be processed as it is, and no retry will
	// change that. Such a message belongs in a dead letter with its payload.
	ErrInvalidMessage = errors.New("inbox: invalid message")

	// ErrFingerprintConflict is returned with a Duplicate outcome when
	// Config.FingerprintConflictError is set and a duplicate's payload
	// differs from the payload first processed under its ID.
	ErrFingerprintConflict = errors.New("inbox: message ID reused for a different payload")
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

// IsRetryable reports whether err is one after which the same message may
// succeed if tried again, without anything changing: a serialization failure
// or deadlock (PostgreSQL 40001, 40P01), a lock timeout (55P03), a busy or
// locked SQLite database, a lost connection, a COMMIT whose outcome is
// unknown. The stores mark such errors; errors from a handler's own queries
// are recognized by their SQLSTATE or SQLite code. A retryable error never
// leads to an ack: a handler failing with one is retried without limit,
// never dead-lettered (unless marked Permanent).
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) && r.Retryable() {
		return true
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch pg.SQLState() {
		case "40001", "40P01", "55P03":
			return true
		}
		if len(pg.SQLState()) == 5 && pg.SQLState()[:2] == "08" { // connection exception
			return true
		}
	}
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded)
}
