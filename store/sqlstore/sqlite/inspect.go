package sqlite

import "github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"

var _ sqldialect.Inspector = sqliteDialect{}

// InspectTemplates: times are stored in unix milliseconds already;
// numbered placeholders (?NNN) bind an argument once and use it twice.
func (sqliteDialect) InspectTemplates() sqldialect.InspectQueries { return sqliteInspect }

const sqliteConsumerIs = `(?1 IS NULL OR consumer = ?1)`

var sqliteInspect = sqldialect.InspectQueries{
	StatsInbox: `SELECT consumer, count(*), sum(dead), min(received_at), max(received_at)
FROM {inbox} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsDeadLetters: `SELECT consumer, count(*), min(failed_at), max(failed_at)
FROM {dead_letters} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsAttempts: `SELECT consumer, count(*), sum(attempts), sum(transient_failures)
FROM {attempts} WHERE ` + sqliteConsumerIs + ` GROUP BY consumer`,
	StatsErrors: `SELECT consumer, e, n FROM (
    SELECT consumer, e, count(*) AS n, row_number() OVER (PARTITION BY consumer ORDER BY count(*) DESC, e) AS r
    FROM (SELECT consumer, substr(last_error, 1, ?2) AS e FROM {attempts} WHERE ` + sqliteConsumerIs + `)
    GROUP BY consumer, e)
WHERE r <= ?3 ORDER BY consumer, n DESC, e`,
	DeadLetterSearch: `SELECT id, consumer, message_id, message_type, NULL, headers, error, attempts, failed_at, coalesce(length(payload), 0)
FROM {dead_letters}
WHERE id > ?1 AND (?2 IS NULL OR consumer = ?2) AND (?3 IS NULL OR message_type = ?3)
    AND (?4 IS NULL OR instr(error, ?4) > 0)
    AND (?5 IS NULL OR failed_at >= ?5) AND (?6 IS NULL OR failed_at < ?6)
ORDER BY id LIMIT ?7`,
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
