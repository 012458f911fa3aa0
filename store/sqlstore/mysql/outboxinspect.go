package mysql

import (
	"strings"

	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.OutboxInspector = mysqlDialect{}

// OutboxInspectTemplates: as InspectTemplates, the search reads its
// arguments from a derived table of one row (p), which the optimizer
// reads as constants, and compares text as bytes.
func (mysqlDialect) OutboxInspectTemplates() sqldialect.OutboxInspectQueries {
	return mysqlOutboxInspect
}

// mysqlOutboxInfoColumns are ScanOutboxInfo's columns; %s is the payload's.
var mysqlOutboxInfoColumns = `t.seq, t.message_id, t.destination, t.msg_key, t.message_type, t.headers, %s, t.attempts, t.last_error,
    ` + mysqlMs("t.created_at") + `, ` + mysqlMs("t.parked_at") + `, ` + mysqlMs("t.available_at") + `, ` + mysqlMs("t.published_at") + `,
    COALESCE(LENGTH(t.payload), 0)`

// mysqlOutboxSearch is the search; {id} is the message ID's condition.
var mysqlOutboxSearch = `SELECT ` + strings.Replace(mysqlOutboxInfoColumns, "%s", "NULL", 1) + `
FROM {outbox} t CROSS JOIN (SELECT ? AS after_seq, ? AS parked, ? AS dest, ? AS typ, CAST(? AS BINARY) AS mid, ? AS err, ? AS since, ? AS until) p
WHERE t.seq > p.after_seq AND t.published_at IS NULL AND (p.parked IS NULL OR p.parked = (t.parked_at IS NOT NULL))
    AND (p.dest IS NULL OR CAST(t.destination AS BINARY) = CAST(p.dest AS BINARY))
    AND (p.typ IS NULL OR CAST(t.message_type AS BINARY) = CAST(p.typ AS BINARY))
    AND {id}
    AND (p.err IS NULL OR LOCATE(CAST(p.err AS BINARY), CAST(t.last_error AS BINARY)) > 0)
    AND (p.since IS NULL OR t.created_at >= ` + mysqlFromMs("p.since") + `)
    AND (p.until IS NULL OR t.created_at < ` + mysqlFromMs("p.until") + `)
ORDER BY t.seq LIMIT ?`

const mysqlPending = `published_at IS NULL AND parked_at IS NULL`

var mysqlOutboxInspect = sqldialect.OutboxInspectQueries{
	// UTC_TIMESTAMP(6) is the statement's start, the same at each use.
	Stats: `SELECT ` + mysqlMs(mysqlNow) + `,
    COALESCE(SUM(` + mysqlPending + `), 0),
    COALESCE(SUM(` + mysqlPending + ` AND available_at <= ` + mysqlNow + `), 0),
    ` + mysqlMs("MIN(CASE WHEN "+mysqlPending+" THEN created_at END)") + `,
    COALESCE(SUM(published_at IS NULL AND parked_at IS NOT NULL), 0),
    ` + mysqlMs("MIN(CASE WHEN published_at IS NULL THEN parked_at END)") + `,
    COALESCE(SUM(published_at IS NOT NULL), 0)
FROM {outbox}`,
	Search:     strings.Replace(mysqlOutboxSearch, "{id}", "p.mid IS NULL", 1),
	SearchByID: strings.Replace(mysqlOutboxSearch, "{id}", "t.message_id = p.mid", 1),
	Get:        `SELECT ` + strings.Replace(mysqlOutboxInfoColumns, "%s", "t.payload", 1) + ` FROM {outbox} t WHERE t.seq = ?`,
}
