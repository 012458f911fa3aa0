package sqlite

import (
	"strconv"

	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.Inspector = sqliteDialect{}

// InspectTemplates: times are stored in unix milliseconds already;
// numbered placeholders (?NNN) bind an argument once and use it twice.
func (sqliteDialect) InspectTemplates() sqldialect.InspectQueries { return sqliteInspect }

const sqliteConsumerIs = `(?1 IS NULL OR consumer = ?1)`

// sqliteDeadWhere filters the dead letters on the arguments from ?n on:
// consumer, type, error substring, since, until, message ID. A NULL one
// does not filter.
func sqliteDeadWhere(n int) string {
	arg := func(i int) string { return "?" + strconv.Itoa(n+i) }
	return `(` + arg(0) + ` IS NULL OR consumer = ` + arg(0) + `) AND (` + arg(1) + ` IS NULL OR message_type = ` + arg(1) + `)
    AND (` + arg(2) + ` IS NULL OR instr(error, ` + arg(2) + `) > 0)
    AND (` + arg(3) + ` IS NULL OR failed_at >= ` + arg(3) + `) AND (` + arg(4) + ` IS NULL OR failed_at < ` + arg(4) + `)
    AND (` + arg(5) + ` IS NULL OR message_id = ` + arg(5) + `)`
}

var sqliteInspect = sqldialect.InspectQueries{
	StatsInbox: `SELECT consumer, count(*), sum(dead), min(received_at), max(received_at)
FROM {inbox} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsDeadLetters: `SELECT consumer, count(*), min(failed_at), max(failed_at)
FROM {dead_letters} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsAttempts: `SELECT consumer, count(*), sum(attempts), sum(transient_failures)
FROM {attempts} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsErrors: `SELECT consumer, e, n FROM (
    SELECT consumer, e, count(*) AS n, row_number() OVER (PARTITION BY consumer ORDER BY count(*) DESC, e) AS r
    FROM (SELECT consumer, substr(CASE WHEN error_group <> '' THEN error_group ELSE last_error END, 1, ?2) AS e
        FROM {attempts} WHERE ` + sqliteConsumerIs + `)
    GROUP BY consumer, e)
WHERE r <= ?3 ORDER BY consumer, n DESC, e`,
	DeadLetterSearch: `SELECT id, consumer, message_id, message_type, NULL, headers, error, attempts, failed_at, coalesce(length(payload), 0)
FROM {dead_letters}
WHERE id > ?1 AND ` + sqliteDeadWhere(2) + ` AND (?8 IS NULL OR error_group = ?8)
ORDER BY id LIMIT ?9`,
	DeadLetterGroups: `SELECT error_group, count(*), min(failed_at), max(failed_at)
FROM {dead_letters} WHERE ` + sqliteDeadWhere(1) + `
GROUP BY error_group ORDER BY count(*) DESC, error_group LIMIT ?7`,
	Throughput: `SELECT consumer, (received_at / 60000) * 60000 AS m, count(*)
FROM {inbox} WHERE received_at >= ?2 AND ` + sqliteConsumerIs + `
GROUP BY consumer, m ORDER BY consumer, m`,
	Retrying: `SELECT a.consumer, count(*), sum(a.attempts), min(a.first_failed_at)
FROM {attempts} a
WHERE (?1 IS NULL OR a.consumer = ?1)
    AND NOT EXISTS (SELECT 1 FROM {inbox} i WHERE i.consumer = a.consumer AND i.message_id = a.message_id)
GROUP BY a.consumer ORDER BY a.consumer`,
	RetryingList: `SELECT a.consumer, a.message_id, a.attempts, a.transient_failures, a.first_failed_at, a.last_failed_at, a.last_error
FROM {attempts} a
WHERE (?1 IS NULL OR a.consumer = ?1)
    AND (a.consumer > ?2 OR (a.consumer = ?2 AND a.message_id > ?3))
    AND NOT EXISTS (SELECT 1 FROM {inbox} i WHERE i.consumer = a.consumer AND i.message_id = a.message_id)
ORDER BY a.consumer, a.message_id LIMIT ?4`,
	// The inbox's consumers by a loose scan of its primary key: one probe
	// per consumer.
	Consumers: `WITH RECURSIVE c(consumer) AS (
    SELECT (SELECT consumer FROM {inbox} ORDER BY consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT i.consumer FROM {inbox} i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
    FROM c WHERE c.consumer IS NOT NULL
)
SELECT consumer, sum(n) FROM (
    SELECT consumer, 0 AS n FROM c WHERE consumer IS NOT NULL
    UNION ALL
    SELECT consumer, count(*) FROM {dead_letters} GROUP BY consumer
) x GROUP BY consumer ORDER BY consumer`,
	Ungrouped:         `SELECT id, error FROM {dead_letters} WHERE error_group = '' AND error <> '' ORDER BY id LIMIT ?`,
	SetGroup:          `UPDATE {dead_letters} SET error_group = ? WHERE id = ?`,
	UngroupedAttempts: `SELECT consumer, message_id, last_error FROM {attempts} WHERE error_group = '' AND last_error <> '' LIMIT ?`,
	SetAttemptGroup: `UPDATE {attempts} SET error_group = ?1
WHERE consumer = ?2 AND message_id = ?3 AND last_error = ?4 AND error_group = ''`,
	DeadLetterDetail: `SELECT d.id, d.consumer, d.message_id, d.message_type, d.payload, d.headers, d.error, d.attempts, d.failed_at,
    CASE WHEN i.consumer IS NULL THEN 'none' WHEN i.dead THEN 'dead' ELSE 'live' END, i.received_at,
    coalesce(a.attempts, 0), coalesce(a.transient_failures, 0), a.first_failed_at, a.last_failed_at, coalesce(a.last_error, '')
FROM {dead_letters} d
LEFT JOIN {inbox} i ON i.consumer = d.consumer AND i.message_id = d.message_id
LEFT JOIN {attempts} a ON a.consumer = d.consumer AND a.message_id = d.message_id
WHERE d.id = ?`,
	// The write transaction is the lock: SQLite has one writer.
	DeadLetterLockID:   `SELECT ` + sqliteDeadLetterColumns + ` FROM {dead_letters} WHERE id = ?`,
	DeadLetterDeleteID: `DELETE FROM {dead_letters} WHERE id = ?`,
	ReleaseDead:        `DELETE FROM {inbox} WHERE consumer = ? AND message_id = ? AND dead = 1`,
	LiveRow:            `SELECT count(*) FROM {inbox} WHERE consumer = ? AND message_id = ?`,
}
