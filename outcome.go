package inbox

import "time"

// Status is what became of a message.
type Status int

const (
	// Retry: the message was not processed; nothing of it was committed.
	// Do not ack: redeliver it after Outcome.Delay (Nack with that delay).
	Retry Status = iota
	// Processed: the handler's writes and the claim committed. Ack.
	Processed
	// Duplicate: the message was processed (or dead-lettered) before;
	// nothing ran. Ack.
	Duplicate
	// DeadLettered: the message failed for good, or is invalid; its dead
	// letter, with the payload, committed. Ack.
	DeadLettered
)

func (s Status) String() string {
	switch s {
	case Retry:
		return "retry"
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case DeadLettered:
		return "dead-lettered"
	}
	return "unknown"
}

// Outcome tells a broker adapter what to do with a delivery. Act on
// Status alone; the error Process returns explains it.
type Outcome struct {
	Status Status
	// Delay is how long to wait before redelivery (Retry only).
	Delay time.Duration
	// Attempts counts the failed attempts recorded for the message
	// (Retry after a handler error, DeadLettered).
	Attempts int
	// Err says why the message was not simply processed:
	//   - Retry after a handler failure: the handler's error (a
	//     *PanicError for a panic), or the reason its transaction could
	//     not commit: a COMMIT that certainly failed ("inbox: commit: …",
	//     such as a result set left open), a statement that failed in it
	//     and whose error the handler swallowed, ErrTxEndedByHandler.
	//   - DeadLettered: the last such error, or an *InvalidMessageError
	//     for an invalid message.
	//   - Duplicate: ErrFingerprintConflict when the payload differs from
	//     the one first processed under the ID, or the *InvalidMessageError
	//     of an invalid message whose dead letter exists; nil otherwise.
	// It is nil for Processed, and for a Retry that is not the handler's
	// doing (a database error, a COMMIT of unknown outcome, shutting
	// down): the error Process returns says why.
	Err error

	commit bool
}

// Commit reports, after ProcessTx, whether the caller should commit its
// transaction: true when the inbox wrote in it something that must persist
// (the claim with the handler's writes; or, after a handler failure, the
// attempt record or the dead letter). Roll back otherwise.
func (o Outcome) Commit() bool { return o.commit }

// Ack reports whether the delivery may be acknowledged: the message's fate
// is committed (Processed, Duplicate, DeadLettered). After ProcessTx, ack
// only once the caller's COMMIT succeeded.
func (o Outcome) Ack() bool {
	return o.Status == Processed || o.Status == Duplicate || o.Status == DeadLettered
}
