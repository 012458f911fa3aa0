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
	// DeadLettered: the message failed for good; its dead letter, with the
	// payload, committed. Ack.
	DeadLettered
	// Invalid: the message cannot be processed as it is (see
	// ErrInvalidMessage); nothing was written. Keep its payload (a broker
	// dead-letter queue, or a dead letter of your own), then ack: a retry
	// would fail the same way.
	Invalid
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
	case Invalid:
		return "invalid"
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
	// Err is the handler's error (Retry after a handler error,
	// DeadLettered).
	Err error

	commit bool
}

// Commit reports, after ProcessTx, whether the caller should commit its
// transaction: true when the inbox wrote in it something that must persist
// (a claim with the handler's writes, an attempt record, a dead letter).
func (o Outcome) Commit() bool { return o.commit }

// Ack reports whether the delivery may be acknowledged: the message's fate
// is committed (Processed, Duplicate, DeadLettered).
func (o Outcome) Ack() bool {
	return o.Status == Processed || o.Status == Duplicate || o.Status == DeadLettered
}
