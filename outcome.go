package inbox

import "time"

// Status is what became of a message.
type Status int

const (
	// Retry means the message was not processed. Nothing of it was
	// committed. Do not ack. Nack it with Outcome.Delay, to redeliver it
	// after that delay.
	Retry Status = iota
	// Processed means the handler's writes and the claim committed. Ack.
	Processed
	// Duplicate means the message was processed or dead-lettered before.
	// Nothing of it applied again. Ack.
	Duplicate
	// DeadLettered means the message failed for good, or is invalid. Its
	// dead letter, with the payload, committed. Ack.
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

// Outcome tells a broker adapter what to do with a delivery. Act on Status
// alone. The error Process returns explains it.
type Outcome struct {
	Status Status
	// Delay is how long to wait before redelivery. It is set for Retry
	// only.
	Delay time.Duration
	// Attempts counts the failed attempts recorded for the message. It is
	// set for a Retry after a handler error, and for DeadLettered.
	Attempts int
	// Err says why the message was not simply processed.
	//   - A Retry after a handler failure holds the handler's error. A
	//     panic gives a *PanicError. Err may also be why the handler's
	//     transaction could not commit. A COMMIT that certainly failed
	//     gives "inbox: commit: …", such as after a result set left open.
	//     A statement may have failed in the transaction, and the handler
	//     swallowed its error. Or Err wraps ErrTxEndedByHandler.
	//   - DeadLettered holds the last such error. An invalid message gives
	//     an *InvalidMessageError.
	//   - A Duplicate holds ErrFingerprintConflict when the payload differs
	//     from the one first processed under the ID. An invalid message
	//     whose dead letter exists gives its *InvalidMessageError. Err is
	//     nil otherwise.
	// Err is nil for Processed. It is nil for a Retry that is not the
	// handler's doing, such as a database error, a COMMIT of unknown
	// outcome or a shutdown. The error Process returns then says why.
	Err error

	commit bool
}

// Commit reports, after [Inbox.ProcessTx], whether the caller should
// commit its transaction. It is true when the inbox wrote in it something
// that must persist. That is the claim with the handler's writes. After a
// handler failure, it is the attempt record or the dead letter. Roll back
// otherwise.
func (o Outcome) Commit() bool { return o.commit }

// Ack reports whether the delivery may be acknowledged. It is true for
// Processed, Duplicate and DeadLettered, whose fate is committed. After
// [Inbox.ProcessTx], ack only once the caller's COMMIT succeeded.
func (o Outcome) Ack() bool {
	return o.Status == Processed || o.Status == Duplicate || o.Status == DeadLettered
}
