package sqldialect

import (
	"strings"

	"github.com/inboxkit/inbox/store"
)

// Inspector is implemented by a dialect that has the statements of
// store.Inspector.
type Inspector interface {
	// InspectTemplates returns them with the table tokens of
	// internal/migrate ({inbox}, ...) still in them.
	InspectTemplates() InspectQueries
}

// InspectQueries are a dialect's statements of store.Inspector. Times
// come back as unix milliseconds and go in as such; a nil argument does
// not filter. Each statement binds each argument once, in the order
// listed (a dialect whose placeholders cannot repeat, MySQL's, reads them
// from a derived table of one row).
type InspectQueries struct {
	// StatsInbox: arg consumer. Per consumer: rows, dead rows, least and
	// greatest received_at.
	StatsInbox string
	// StatsDeadLetters: arg consumer. Per consumer: dead letters, least
	// and greatest failed_at.
	StatsDeadLetters string
	// StatsAttempts: arg consumer. Per consumer: messages, sum of
	// attempts, sum of transient failures.
	StatsAttempts string
	// StatsErrors: args consumer, characters kept of each error group
	// (the error itself where the group is not filled in), groups per
	// consumer. Rows: consumer, error group, messages.
	StatsErrors string
	// DeadLetterSearch: args after id, consumer, type, error substring,
	// since, until, message ID, error group, limit
	// (internal/storeinspect's SearchArgs). Columns: the dead letter's (as
	// DeadLetterList's) with a NULL payload, then the payload's size.
	DeadLetterSearch string
	// DeadLetterGroups: args consumer, type, error substring, since,
	// until, message ID, limit (internal/storeinspect's GroupArgs). Rows:
	// error group, dead letters, least and greatest failed_at; the
	// largest group first.
	DeadLetterGroups string
	// Throughput: args consumer, since. Rows: consumer, minute, inbox
	// rows; by consumer and minute.
	Throughput string
	// Retrying: arg consumer. Rows: consumer, messages, sum of attempts,
	// least first_failed_at; of the attempts rows without an inbox row.
	Retrying string
	// RetryingList: args consumer, after consumer, after message ID,
	// limit. Rows: internal/storeinspect's ScanRetryingMessage, in key
	// order.
	RetryingList string
	// Consumers: no arguments. Rows: consumer, dead letters; by consumer,
	// those with an inbox row or a dead letter. The inbox's consumers come
	// from its primary key, one probe per consumer where the database can.
	Consumers string
	// Ungrouped: arg limit. The ID and error of dead letters whose group
	// is not filled in, in ID order. SetGroup: args group, ID.
	Ungrouped, SetGroup string
	// UngroupedAttempts: arg limit. The consumer, message ID and last
	// error of attempts rows whose group is not filled in.
	// SetAttemptGroup: args group, consumer, message ID, and the last
	// error the group is of.
	UngroupedAttempts, SetAttemptGroup string
	// DeadLetterDetail: arg id. Columns: the dead letter's, then the
	// inbox row's state ('dead', 'live', 'none') and received_at, the
	// attempts' counts, first and last failure and last error
	// (internal/storeinspect's ScanDetail).
	DeadLetterDetail string
	// DeadLetterTakeID, if set, deletes and returns one dead letter of any
	// consumer (columns as DeadLetterList's), locking it: arg id.
	// Otherwise DeadLetterLockID locks and returns it, and
	// DeadLetterDeleteID deletes it (MySQL has no DELETE … RETURNING).
	DeadLetterTakeID, DeadLetterLockID string
	// DeadLetterDeleteID: arg id; RowsAffected counts the row.
	DeadLetterDeleteID string
	// Release, if set, deletes a message's attempts and its inbox row if
	// dead, and returns whether a live row is there: args consumer,
	// message_id. Otherwise ReleaseDead deletes the dead row (args
	// consumer, message_id), Queries.AttemptsDelete the attempts, and
	// LiveRow counts the rows left (only a live one can be).
	Release, ReleaseDead, LiveRow string
}

// RenderInspect fills in the table names of t in every statement of q.
func RenderInspect(q InspectQueries, t store.Tables, quote func(string) string) InspectQueries {
	r := strings.NewReplacer(
		"{inbox}", t.Name("inbox", quote),
		"{attempts}", t.Name("inbox_attempts", quote),
		"{dead_letters}", t.Name("inbox_dead_letters", quote),
	)
	for _, s := range []*string{
		&q.StatsInbox, &q.StatsDeadLetters, &q.StatsAttempts, &q.StatsErrors,
		&q.DeadLetterSearch, &q.DeadLetterGroups, &q.Throughput, &q.Retrying, &q.Consumers, &q.RetryingList, &q.Ungrouped, &q.SetGroup, &q.UngroupedAttempts, &q.SetAttemptGroup,
		&q.DeadLetterDetail, &q.DeadLetterTakeID, &q.DeadLetterLockID, &q.DeadLetterDeleteID,
		&q.Release, &q.ReleaseDead, &q.LiveRow,
	} {
		*s = r.Replace(*s)
	}
	return q
}
