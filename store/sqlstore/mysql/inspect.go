package mysql

import "github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"

var _ sqldialect.Inspector = mysqlDialect{}

// InspectTemplates: MySQL's placeholders cannot be used twice, so the
// statements that test an argument for NULL read the arguments from a
// derived table of one row (p), which the optimizer reads as constants.
// Text arguments are compared as bytes (CAST AS BINARY): the columns'
// collation is utf8mb4_bin, the connection's may differ.
func (mysqlDialect) InspectTemplates() sqldialect.InspectQueries { return mysqlInspect }

// mysqlMs is a DATETIME(6) expression (UTC) in unix milliseconds.
func mysqlMs(expr string) string {
	return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + expr + `) DIV 1000`
}

// mysqlFromMs is unix milliseconds as a DATETIME(6), UTC.
func mysqlFromMs(expr string) string {
	return `TIMESTAMP('1970-01-01 00:00:00') + INTERVAL (` + expr + ` * 1000) MICROSECOND`
}

const mysqlConsumerIs = `(p.c IS NULL OR t.consumer = CAST(p.c AS BINARY))`

// mysqlDeadArgs are the filter's arguments of the dead letters, as the
// columns of the derived table p: consumer, type, error substring, since,
// until, message ID. mysqlDeadWhere filters on them; a NULL one does not.
var (
	mysqlDeadArgs  = `CAST(? AS BINARY) AS c, ? AS typ, ? AS err, ? AS since, ? AS until, CAST(? AS BINARY) AS mid`
	mysqlDeadWhere = mysqlConsumerIs + `
    AND (p.typ IS NULL OR CAST(t.message_type AS BINARY) = CAST(p.typ AS BINARY))
    AND (p.err IS NULL OR LOCATE(CAST(p.err AS BINARY), CAST(t.error AS BINARY)) > 0)
    AND (p.since IS NULL OR t.failed_at >= ` + mysqlFromMs("p.since") + `)
    AND (p.until IS NULL OR t.failed_at < ` + mysqlFromMs("p.until") + `)
    AND (p.mid IS NULL OR t.message_id = CAST(p.mid AS BINARY))`
)

var mysqlInspect = sqldialect.InspectQueries{
	StatsInbox: `SELECT t.consumer, COUNT(*), SUM(t.dead), ` + mysqlMs("MIN(t.received_at)") + `, ` + mysqlMs("MAX(t.received_at)") + `
FROM {inbox} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c) p WHERE ` + mysqlConsumerIs + ` GROUP BY t.consumer`,
	StatsDeadLetters: `SELECT t.consumer, COUNT(*), ` + mysqlMs("MIN(t.failed_at)") + `, ` + mysqlMs("MAX(t.failed_at)") + `
FROM {dead_letters} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c) p WHERE ` + mysqlConsumerIs + ` GROUP BY t.consumer`,
	StatsAttempts: `SELECT t.consumer, COUNT(*), SUM(t.attempts), SUM(t.transient_failures)
FROM {attempts} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c) p WHERE ` + mysqlConsumerIs + ` GROUP BY t.consumer`,
	StatsErrors: `SELECT consumer, e, n FROM (
    SELECT consumer, e, n, top, ROW_NUMBER() OVER (PARTITION BY consumer ORDER BY n DESC, e) AS r FROM (
        SELECT t.consumer, SUBSTRING(IF(t.error_group <> '', t.error_group, t.last_error), 1, p.chars) AS e, COUNT(*) AS n, MIN(p.top) AS top
        FROM {attempts} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c, ? AS chars, ? AS top) p WHERE ` + mysqlConsumerIs + `
        GROUP BY t.consumer, e) g) w
WHERE r <= top ORDER BY consumer, n DESC, e`,
	DeadLetterSearch: `SELECT t.id, t.consumer, t.message_id, t.message_type, NULL, t.headers, t.error, t.attempts, ` + mysqlMs("t.failed_at") + `,
    COALESCE(LENGTH(t.payload), 0)
FROM {dead_letters} t CROSS JOIN (SELECT ? AS after_id, ` + mysqlDeadArgs + `, ? AS grp) p
WHERE t.id > p.after_id AND ` + mysqlDeadWhere + `
    AND (p.grp IS NULL OR CAST(t.error_group AS BINARY) = CAST(p.grp AS BINARY))
ORDER BY t.id LIMIT ?`,
	DeadLetterGroups: `SELECT t.error_group, COUNT(*), ` + mysqlMs("MIN(t.failed_at)") + `, ` + mysqlMs("MAX(t.failed_at)") + `
FROM {dead_letters} t CROSS JOIN (SELECT ` + mysqlDeadArgs + `) p
WHERE ` + mysqlDeadWhere + `
GROUP BY t.error_group ORDER BY COUNT(*) DESC, t.error_group LIMIT ?`,
	Throughput: `SELECT t.consumer, (` + mysqlMs("t.received_at") + ` DIV 60000) * 60000 AS m, COUNT(*)
FROM {inbox} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c, ? AS since) p
WHERE t.received_at >= ` + mysqlFromMs("p.since") + ` AND ` + mysqlConsumerIs + `
GROUP BY t.consumer, m ORDER BY t.consumer, m`,
	Retrying: `SELECT t.consumer, COUNT(*), SUM(t.attempts), ` + mysqlMs("MIN(t.first_failed_at)") + `
FROM {attempts} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c) p
WHERE ` + mysqlConsumerIs + `
    AND NOT EXISTS (SELECT 1 FROM {inbox} i WHERE i.consumer = t.consumer AND i.message_id = t.message_id)
GROUP BY t.consumer ORDER BY t.consumer`,
	RetryingList: `SELECT t.consumer, t.message_id, t.attempts, t.transient_failures, ` + mysqlMs("t.first_failed_at") + `, ` + mysqlMs("t.last_failed_at") + `, t.last_error
FROM {attempts} t CROSS JOIN (SELECT CAST(? AS BINARY) AS c, CAST(? AS BINARY) AS ac, CAST(? AS BINARY) AS am) p
WHERE ` + mysqlConsumerIs + `
    AND (t.consumer > p.ac OR (t.consumer = p.ac AND t.message_id > p.am))
    AND NOT EXISTS (SELECT 1 FROM {inbox} i WHERE i.consumer = t.consumer AND i.message_id = t.message_id)
ORDER BY t.consumer, t.message_id LIMIT ?`,
	// DISTINCT on the primary key's first column is a loose index scan in
	// MySQL and MariaDB: one probe per consumer.
	Consumers: `SELECT consumer, CAST(SUM(n) AS SIGNED) FROM (
    SELECT consumer, 0 AS n FROM (SELECT DISTINCT consumer FROM {inbox}) i
    UNION ALL
    SELECT consumer, COUNT(*) FROM {dead_letters} GROUP BY consumer
) x GROUP BY consumer ORDER BY consumer`,
	Ungrouped:         `SELECT id, error FROM {dead_letters} WHERE error_group = '' AND error <> '' ORDER BY id LIMIT ?`,
	SetGroup:          `UPDATE {dead_letters} SET error_group = ? WHERE id = ?`,
	UngroupedAttempts: `SELECT consumer, message_id, last_error FROM {attempts} WHERE error_group = '' AND last_error <> '' LIMIT ?`,
	SetAttemptGroup: `UPDATE {attempts} SET error_group = ?
WHERE consumer = ? AND message_id = ? AND CAST(last_error AS BINARY) = CAST(? AS BINARY) AND error_group = ''`,
	DeadLetterDetail: `SELECT d.id, d.consumer, d.message_id, d.message_type, d.payload, d.headers, d.error, d.attempts, ` + mysqlMs("d.failed_at") + `,
    CASE WHEN i.consumer IS NULL THEN 'none' WHEN i.dead THEN 'dead' ELSE 'live' END, ` + mysqlMs("i.received_at") + `,
    COALESCE(a.attempts, 0), COALESCE(a.transient_failures, 0), ` + mysqlMs("a.first_failed_at") + `, ` + mysqlMs("a.last_failed_at") + `,
    COALESCE(a.last_error, '')
FROM {dead_letters} d
LEFT JOIN {inbox} i ON i.consumer = d.consumer AND i.message_id = d.message_id
LEFT JOIN {attempts} a ON a.consumer = d.consumer AND a.message_id = d.message_id
WHERE d.id = ?`,
	DeadLetterLockID:   `SELECT ` + mysqlDeadLetterColumns + ` FROM {dead_letters} WHERE id = ? FOR UPDATE`,
	DeadLetterDeleteID: `DELETE FROM {dead_letters} WHERE id = ?`,
	ReleaseDead:        `DELETE FROM {inbox} WHERE consumer = ? AND message_id = ? AND dead`,
	LiveRow:            `SELECT COUNT(*) FROM {inbox} WHERE consumer = ? AND message_id = ?`,
}
