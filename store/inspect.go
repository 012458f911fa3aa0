package store

import (
	"context"
	"time"
)

// Inspector is implemented by drivers that let an operator look into the
// inbox's tables across consumers.
//
// The commands inbox stats and inbox dead-letters use it. It gives
// statistics, a search of the dead letters, and the release of a dead letter
// for a replay through its broker. It is apart from Driver, and optional, so
// that the seam the consumers use does not grow. The same caveats apply. It
// is not stable, and not meant to be implemented outside this repository.
//
// Reads run outside any transaction. They scan what they count. Stats reads
// every row of the three tables, or of one consumer's. An operator pays
// that once, not per message.
type Inspector[TTx any] interface {
	// Stats counts, per consumer, the inbox rows, dead letters and failed
	// attempts, and the most frequent errors of the attempts. Consumers come in
	// byte order. A consumer with no row in any table is not listed.
	Stats(ctx context.Context, p *StatsParams) ([]*ConsumerStats, error)

	// DeadLetterSearch lists dead letters of any consumer that match p, in ID
	// order, without their payloads. PayloadSize tells their size.
	DeadLetterSearch(ctx context.Context, p *DeadLetterSearchParams) ([]*DeadLetterInfo, error)

	// DeadLetterGroups counts the dead letters that match p per error
	// group, the largest group first, at most p.Limit groups. AfterID and
	// Group do not apply. An index on the group serves it, so that it
	// stays quick on a large table.
	DeadLetterGroups(ctx context.Context, p *DeadLetterSearchParams) ([]*DeadLetterGroup, error)

	// DeadLetterGet returns one dead letter, payload included, with what the
	// other tables hold of its message. It returns [ErrNotFound] if no dead
	// letter has that ID.
	DeadLetterGet(ctx context.Context, id int64) (*DeadLetterDetail, error)

	// DeadLetterDiscard deletes the dead letters with these IDs, of any
	// consumer, in one transaction of its own. It returns the IDs it deleted,
	// those that existed, in the order given. The messages' inbox rows stay
	// marked dead, as inbox.Discard leaves them. Their redeliveries are thus
	// still duplicates.
	DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error)

	// DeadLetterRelease prepares a replay through the broker in tx.
	//
	// It locks and deletes dead letter id, of any consumer. It deletes the
	// message's failed attempts. It deletes the message's inbox row if that row
	// is marked dead. A redelivery is then claimed as new once tx commits. Until
	// then a claim waits for tx's lock.
	//
	// Live is true when the message's row is live and left alone. The message
	// was then processed after it was dead-lettered, as by a redelivery after
	// its dead row was pruned. It must not be published again. DeadLetterRelease
	// returns [ErrNotFound] if no dead letter has that ID.
	DeadLetterRelease(ctx context.Context, tx TTx, id int64) (dl *DeadLetter, live bool, err error)
}

// StatsParams are the parameters of Inspector.Stats.
type StatsParams struct {
	// Consumer, if not nil, limits the counts to this consumer.
	Consumer []byte
	// TopErrors is how many of the most frequent errors to return per
	// consumer. A value of 0 returns none.
	TopErrors int
	// ErrorChars truncates the error groups to this many characters before
	// they are counted. A group is the error with IDs, numbers, UUIDs and
	// hex replaced, so that errors that differ only in those count as one.
	// An error written before the stores recorded groups, and not yet
	// filled in by Migrate, counts as itself, truncated. It is at least 1
	// when TopErrors is set.
	ErrorChars int
}

// ConsumerStats are the counts of one consumer. Times are the database's
// clock, zero when there is no row to take them from.
type ConsumerStats struct {
	Consumer []byte
	// InboxRows counts the consumer's inbox rows, DeadRows those of them
	// marked dead.
	InboxRows, DeadRows int64
	// OldestClaim and NewestClaim are the least and greatest received_at
	// of the inbox rows.
	OldestClaim, NewestClaim time.Time
	// DeadLetters counts the dead letters. OldestDeadLetter and
	// NewestDeadLetter are their least and greatest failed_at.
	DeadLetters                        int64
	OldestDeadLetter, NewestDeadLetter time.Time
	// FailedMessages counts the messages with failed attempts recorded. They
	// are kept until pruned, also after the message succeeded. FailedAttempts
	// and TransientFailures sum their counts.
	FailedMessages, FailedAttempts, TransientFailures int64
	// TopErrors are the most frequent last errors of those messages,
	// truncated, most frequent first.
	TopErrors []ErrorCount
}

// ErrorCount is an error group and the number of messages whose last
// failed attempt ended with an error of it.
type ErrorCount struct {
	Error string
	Count int64
}

// DeadLetterSearchParams select dead letters. Zero fields do not filter.
type DeadLetterSearchParams struct {
	Consumer []byte
	// Type matches the message type exactly.
	Type string
	// ErrorContains matches a substring of the error, case-sensitively.
	ErrorContains string
	// Since and Until bound failed_at: Since <= failed_at < Until.
	Since, Until time.Time
	// MessageID, if not nil, matches the message's ID exactly, byte for
	// byte. An empty, non-nil ID matches the dead letters of messages
	// that had none.
	MessageID []byte
	// Group matches the error group exactly: the error with IDs, numbers,
	// UUIDs and hex replaced, as DeadLetterGroups returns it.
	Group string
	// AfterID lists dead letters whose ID is greater.
	AfterID int64
	// Limit is the most returned, at least 1.
	Limit int
}

// DeadLetterGroup counts the dead letters of one error group.
type DeadLetterGroup struct {
	// Group is the errors' text with IDs, numbers, UUIDs and hex replaced.
	// It is empty for dead letters written before the stores recorded
	// groups, until Migrate fills them in.
	Group string
	// Count is how many dead letters the group has.
	Count int64
	// FirstFailedAt and LastFailedAt are the least and greatest failed_at.
	FirstFailedAt, LastFailedAt time.Time
}

// DeadLetterInfo is a dead letter without its payload.
type DeadLetterInfo struct {
	// DeadLetter has a nil Payload.
	DeadLetter
	// PayloadSize is the payload's size in bytes.
	PayloadSize int64
}

// DeadLetterDetail is a dead letter and what the other tables hold of its
// message.
type DeadLetterDetail struct {
	DeadLetter
	// RowState is the state of the message's inbox row. It is "dead", or "live"
	// when processed since it was dead-lettered. It is "none" when pruned, or
	// for an invalid ID.
	RowState string
	// ReceivedAt is the inbox row's received_at, zero without a row.
	ReceivedAt time.Time
	// Counted and Transient are the failed attempts recorded, with the first
	// and last failure's times. They are zero when pruned.
	Counted, Transient          int
	FirstFailedAt, LastFailedAt time.Time
	// LastError is the attempts' last error.
	LastError string
}

// The values of DeadLetterDetail.RowState.
const (
	RowDead = "dead"
	RowLive = "live"
	RowNone = "none"
)
