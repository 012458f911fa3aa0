package pgsql

import (
	"fmt"

	"github.com/inboxkit/inbox/store"
)

// Inspect are the statements of store.Inspector on PostgreSQL, for
// pgxstore and sqlstore's PostgreSQL dialect alike. Times come back as
// unix milliseconds and go in as unix milliseconds; a null argument does
// not filter.
type Inspect struct {
	// StatsInbox: $1 consumer (null: all). Per consumer: rows, dead rows,
	// least and greatest received_at.
	StatsInbox string
	// StatsDeadLetters: $1 consumer. Per consumer: dead letters, least and
	// greatest failed_at.
	StatsDeadLetters string
	// StatsAttempts: $1 consumer. Per consumer: messages, sum of attempts,
	// sum of transient failures.
	StatsAttempts string
	// StatsErrors: $1 consumer, $2 characters kept of each error group
	// (the error itself where the group is not filled in yet), $3 how
	// many per consumer. Rows: consumer, error group, messages; most
	// frequent first.
	StatsErrors string
	// DeadLetterSearch: $1 after id, $2 consumer, $3 type, $4 error
	// substring, $5 since, $6 until, $7 message ID, $8 error group, $9
	// limit. Columns: DeadLetterColumns (failed_at rounded down, as in all
	// of these) with a null payload, then the payload's size.
	DeadLetterSearch string
	// DeadLetterGroups: $1 consumer, $2 type, $3 error substring, $4
	// since, $5 until, $6 message ID, $7 limit. Rows: error group, dead
	// letters, least and greatest failed_at; the largest group first.
	DeadLetterGroups string
	// Ungrouped: $1 limit. The ID and error of dead letters whose error
	// group is not filled in, in ID order. SetGroup: $1 group, $2 ID.
	Ungrouped, SetGroup string
	// UngroupedAttempts: $1 limit. The consumer, message ID and last error
	// of attempts rows whose error group is not filled in.
	// SetAttemptGroup: $1 group, $2 consumer, $3 message ID, $4 the last
	// error the group is of (a newer attempt keeps its own).
	UngroupedAttempts, SetAttemptGroup string
	// DeadLetterDetail: $1 id. Columns: DeadLetterColumns, then the inbox
	// row's state ('dead', 'live', 'none') and received_at, the attempts'
	// counts, first and last failure and last error (null or zero when
	// there is no row).
	DeadLetterDetail string
	// DeadLetterTakeID deletes and returns one dead letter of any
	// consumer, which locks it until the transaction ends (a second
	// release waits, then finds nothing): $1 id. Columns:
	// DeadLetterColumns. pgxstore and sqlstore's PostgreSQL dialect both
	// release with it, then Release.
	DeadLetterTakeID string
	// DeadLetterDeleteID: $1 id; its tag counts the row.
	DeadLetterDeleteID string
	// DeadLetterDiscard: $1 ids bigint[]. Returns the ids deleted.
	DeadLetterDiscard string
	// Throughput: $1 consumer, $2 since. Rows: consumer, minute, inbox
	// rows; by consumer and minute.
	Throughput string
	// Retrying: $1 consumer. Rows: consumer, messages, sum of attempts,
	// least first_failed_at; of the attempts rows without an inbox row.
	Retrying string
	// RetryingList: $1 consumer, $2 after consumer, $3 after message ID,
	// $4 limit. Rows: internal/storeinspect's ScanRetryingMessage.
	RetryingList string
	// Consumers: no arguments. Rows: consumer, dead letters; by consumer,
	// those with an inbox row or a dead letter.
	Consumers string
	// Release deletes the message's attempts and its inbox row if dead:
	// $1 consumer, $2 message_id. Returns whether a live row is there.
	Release string
}

// ms is a timestamp in unix milliseconds, rounded down (as MySQL's and
// SQLite's are), so that a time read back and given as a bound of the
// search (failed_at >= since) finds the row it was read from.
func ms(col string) string { return `floor(extract(epoch FROM ` + col + `) * 1000)::bigint` }

// deadWhere filters the dead letters on the arguments from $n on:
// consumer, type, error substring, since, until, message ID. A null one
// does not filter.
func deadWhere(n int) string {
	arg := func(i int, typ string) string { return fmt.Sprintf("$%d::%s", n+i, typ) }
	return `(` + arg(0, "bytea") + ` IS NULL OR consumer = ` + arg(0, "bytea") + `)
	AND (` + arg(1, "text") + ` IS NULL OR message_type = ` + arg(1, "text") + `)
	AND (` + arg(2, "text") + ` IS NULL OR strpos(error, ` + arg(2, "text") + `) > 0)
	AND (` + arg(3, "bigint") + ` IS NULL OR failed_at >= 'epoch'::timestamptz + ` + arg(3, "bigint") + ` * interval '1 millisecond')
	AND (` + arg(4, "bigint") + ` IS NULL OR failed_at < 'epoch'::timestamptz + ` + arg(4, "bigint") + ` * interval '1 millisecond')
	AND (` + arg(5, "bytea") + ` IS NULL OR message_id = ` + arg(5, "bytea") + `)`
}

// inspectColumns are DeadLetterColumns with failed_at rounded down.
var inspectColumns = `id, consumer, message_id, message_type, payload, headers, error, attempts, ` + ms("failed_at")

// NewInspect returns the statements of store.Inspector on the tables named
// n.
func NewInspect(n Names) Inspect {
	inbox, attempts, dead := n.Inbox, n.Attempts, n.DeadLetters
	const consumerIs = `($1::bytea IS NULL OR consumer = $1::bytea)`
	return Inspect{
		StatsInbox: `SELECT consumer, count(*), count(*) FILTER (WHERE dead), ` + ms("min(received_at)") + `, ` + ms("max(received_at)") + `
FROM ` + inbox + ` WHERE ` + consumerIs + ` GROUP BY consumer`,
		StatsDeadLetters: `SELECT consumer, count(*), ` + ms("min(failed_at)") + `, ` + ms("max(failed_at)") + `
FROM ` + dead + ` WHERE ` + consumerIs + ` GROUP BY consumer`,
		StatsAttempts: `SELECT consumer, count(*), sum(attempts)::bigint, sum(transient_failures)::bigint
FROM ` + attempts + ` WHERE ` + consumerIs + ` GROUP BY consumer`,
		StatsErrors: `SELECT consumer, e, n FROM (
	SELECT consumer, e, count(*) AS n, row_number() OVER (PARTITION BY consumer ORDER BY count(*) DESC, e) AS r
	FROM (SELECT consumer, substr(CASE WHEN error_group <> '' THEN error_group ELSE last_error END, 1, $2::int) AS e
		FROM ` + attempts + ` WHERE ` + consumerIs + `) t
	GROUP BY consumer, e) c
WHERE r <= $3::int ORDER BY consumer, n DESC, e`,
		DeadLetterSearch: `SELECT id, consumer, message_id, message_type, NULL::bytea, headers, error, attempts, ` + ms("failed_at") + `,
	coalesce(length(payload), 0)::bigint
FROM ` + dead + `
WHERE id > $1 AND ` + deadWhere(2) + ` AND ($8::text IS NULL OR error_group = $8::text)
ORDER BY id LIMIT $9`,
		DeadLetterGroups: `SELECT error_group, count(*), ` + ms("min(failed_at)") + `, ` + ms("max(failed_at)") + `
FROM ` + dead + ` WHERE ` + deadWhere(1) + `
GROUP BY error_group ORDER BY count(*) DESC, error_group LIMIT $7`,
		Throughput: `SELECT consumer, ` + ms("date_trunc('minute', received_at)") + ` AS m, count(*)
FROM ` + inbox + `
WHERE received_at >= 'epoch'::timestamptz + $2::bigint * interval '1 millisecond' AND ` + consumerIs + `
GROUP BY consumer, m ORDER BY consumer, m`,
		// A LATERAL subquery with a LIMIT, which PostgreSQL does not turn
		// into a join, probes the inbox's primary key once per attempts
		// row. NOT EXISTS became a hash anti-join that read the whole
		// inbox, usually far larger than the attempts table.
		Retrying: `SELECT a.consumer, count(*), sum(a.attempts)::bigint, ` + ms("min(a.first_failed_at)") + `
FROM ` + attempts + ` a
LEFT JOIN LATERAL (
	SELECT true AS found FROM ` + inbox + ` i WHERE i.consumer = a.consumer AND i.message_id = a.message_id LIMIT 1
) i ON true
WHERE ($1::bytea IS NULL OR a.consumer = $1::bytea) AND i.found IS NULL
GROUP BY a.consumer ORDER BY a.consumer`,
		RetryingList: `SELECT a.consumer, a.message_id, a.attempts, a.transient_failures, ` + ms("a.first_failed_at") + `, ` + ms("a.last_failed_at") + `, a.last_error
FROM ` + attempts + ` a
LEFT JOIN LATERAL (
	SELECT true AS found FROM ` + inbox + ` i WHERE i.consumer = a.consumer AND i.message_id = a.message_id LIMIT 1
) i ON true
WHERE ($1::bytea IS NULL OR a.consumer = $1::bytea) AND (a.consumer, a.message_id) > ($2::bytea, $3::bytea) AND i.found IS NULL
ORDER BY a.consumer, a.message_id LIMIT $4`,
		// The consumers of the inbox by a loose scan of its primary key:
		// one probe per consumer, not a read of every row.
		Consumers: `WITH RECURSIVE c(consumer) AS (
	(SELECT consumer FROM ` + inbox + ` ORDER BY consumer LIMIT 1)
	UNION ALL
	SELECT (SELECT i.consumer FROM ` + inbox + ` i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
	FROM c WHERE c.consumer IS NOT NULL
)
SELECT consumer, sum(n)::bigint FROM (
	SELECT consumer, 0 AS n FROM c WHERE consumer IS NOT NULL
	UNION ALL
	SELECT consumer, count(*) FROM ` + dead + ` GROUP BY consumer
) x GROUP BY consumer ORDER BY consumer`,
		Ungrouped:         `SELECT id, error FROM ` + dead + ` WHERE error_group = '' AND error <> '' ORDER BY id LIMIT $1`,
		SetGroup:          `UPDATE ` + dead + ` SET error_group = $1 WHERE id = $2`,
		UngroupedAttempts: `SELECT consumer, message_id, last_error FROM ` + attempts + ` WHERE error_group = '' AND last_error <> '' LIMIT $1`,
		SetAttemptGroup: `UPDATE ` + attempts + ` SET error_group = $1
WHERE consumer = $2 AND message_id = $3 AND last_error = $4 AND error_group = ''`,
		DeadLetterDetail: `SELECT d.id, d.consumer, d.message_id, d.message_type, d.payload, d.headers, d.error, d.attempts, ` + ms("d.failed_at") + `,
	CASE WHEN i.consumer IS NULL THEN 'none' WHEN i.dead THEN 'dead' ELSE 'live' END, ` + ms("i.received_at") + `,
	coalesce(a.attempts, 0), coalesce(a.transient_failures, 0), ` + ms("a.first_failed_at") + `, ` + ms("a.last_failed_at") + `,
	coalesce(a.last_error, '')
FROM ` + dead + ` d
LEFT JOIN ` + inbox + ` i ON i.consumer = d.consumer AND i.message_id = d.message_id
LEFT JOIN ` + attempts + ` a ON a.consumer = d.consumer AND a.message_id = d.message_id
WHERE d.id = $1`,
		DeadLetterTakeID:   `DELETE FROM ` + dead + ` WHERE id = $1 RETURNING ` + inspectColumns,
		DeadLetterDeleteID: `DELETE FROM ` + dead + ` WHERE id = $1`,
		DeadLetterDiscard:  `DELETE FROM ` + dead + ` WHERE id = ANY($1::bigint[]) RETURNING id`,
		// The CTEs and the SELECT see the table as the statement began: the
		// dead row is not live, whether deleted or not.
		Release: `WITH dead AS (
	DELETE FROM ` + inbox + ` WHERE consumer = $1 AND message_id = $2 AND dead
), att AS (
	DELETE FROM ` + attempts + ` WHERE consumer = $1 AND message_id = $2
)
SELECT EXISTS (SELECT 1 FROM ` + inbox + ` WHERE consumer = $1 AND message_id = $2 AND NOT dead)`,
	}
}

// InspectOf returns the statements of store.Inspector on tables t, which
// must be valid.
func InspectOf(t store.Tables) Inspect {
	return NewInspect(Names{
		Inbox:       t.Name("inbox", store.QuoteDouble),
		Attempts:    t.Name("inbox_attempts", store.QuoteDouble),
		DeadLetters: t.Name("inbox_dead_letters", store.QuoteDouble),
	})
}
