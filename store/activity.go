package store

import (
	"context"
	"time"
)

// ActivityInspector is implemented by drivers that tell what the consumers
// did lately: the console's overview draws it. Like [Inspector] it is
// optional, not stable, and not meant to be implemented outside this
// repository. Reads run outside any transaction.
type ActivityInspector interface {
	// Throughput counts the inbox rows per consumer and per minute of their
	// received_at, from p.Since on, by the database's clock. Minutes without
	// a row are left out. Rows marked dead count too: they were claimed.
	// It reads the index on received_at for the window only, so its cost
	// grows with the rows in the window, not with the table.
	Throughput(ctx context.Context, p *ThroughputParams) ([]*ThroughputBucket, error)

	// Retrying counts, per consumer, the messages being retried: those with
	// failed attempts recorded and no inbox row, neither processed nor
	// dead-lettered yet. Consumers come in byte order; one with none is not
	// listed.
	Retrying(ctx context.Context, consumer []byte) ([]*RetryingStats, error)

	// Consumers lists every consumer with an inbox row or a dead letter,
	// in byte order, with its count of dead letters. A consumer that
	// stopped is thus listed too. It finds the consumers in the inbox's
	// primary key with one probe each, and counts the dead letters from
	// their (consumer, id) index, unlike [Inspector.Stats], which reads
	// every row of the three tables.
	Consumers(ctx context.Context) ([]*ConsumerCount, error)

	// RetryingList lists the messages being retried, as Retrying counts
	// them, in (consumer, message ID) byte order after p.After, at most
	// p.Limit. It walks the attempts table's primary key.
	RetryingList(ctx context.Context, p *RetryingListParams) ([]*RetryingMessage, error)
}

// RetryingListParams select messages being retried.
type RetryingListParams struct {
	// Consumer, if not nil, limits the list to this consumer.
	Consumer []byte
	// After lists the messages whose key follows it. The zero Key starts
	// at the first.
	After Key
	// Limit is the most returned, at least 1.
	Limit int
}

// RetryingMessage is a message being retried: its failed attempts, and
// no inbox row yet.
type RetryingMessage struct {
	Key Key
	// Attempts counts its failed attempts, TransientFailures those of
	// them that did not count towards MaxAttempts.
	Attempts, TransientFailures int
	// FirstFailedAt and LastFailedAt are its first and last failure.
	FirstFailedAt, LastFailedAt time.Time
	// LastError is the last attempt's error.
	LastError string
}

// ThroughputParams are the parameters of ActivityInspector.Throughput.
type ThroughputParams struct {
	// Consumer, if not nil, limits the counts to this consumer.
	Consumer []byte
	// Since is the start of the window. It is required.
	Since time.Time
}

// ThroughputBucket is how many inbox rows a consumer claimed in one
// minute.
type ThroughputBucket struct {
	Consumer []byte
	// Minute is the start of the minute, in UTC.
	Minute time.Time
	Count  int64
}

// RetryingStats are the messages of one consumer being retried.
type RetryingStats struct {
	Consumer []byte
	// Messages counts them. Attempts sums their failed attempts.
	Messages, Attempts int64
	// OldestFailedAt is the least first_failed_at among them: how long the
	// oldest has been failing.
	OldestFailedAt time.Time
}

// ConsumerCount is one consumer of ActivityInspector.Consumers.
type ConsumerCount struct {
	Consumer []byte
	// DeadLetters counts its dead letters.
	DeadLetters int64
}
