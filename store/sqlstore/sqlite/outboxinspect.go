package sqlite

import (
	"strings"

	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.OutboxInspector = sqliteDialect{}

// OutboxInspectTemplates: times are stored in unix milliseconds already;
// numbered placeholders (?NNN) bind an argument once and use it twice.
func (sqliteDialect) OutboxInspectTemplates() sqldialect.OutboxInspectQueries {
	return sqliteOutboxInspect
}

// sqliteOutboxSearch is the search; {id} is the message ID's condition.
const sqliteOutboxSearch = `SELECT seq, message_id, destination, msg_key, message_type, headers, NULL, attempts, last_error,
    created_at, parked_at, available_at, published_at, coalesce(length(payload), 0)
FROM {outbox}
WHERE seq > ?1 AND published_at IS NULL AND (?2 IS NULL OR ?2 = (parked_at IS NOT NULL))
    AND (?3 IS NULL OR destination = ?3) AND (?4 IS NULL OR message_type = ?4) AND {id}
    AND (?6 IS NULL OR instr(last_error, ?6) > 0)
    AND (?7 IS NULL OR created_at >= ?7) AND (?8 IS NULL OR created_at < ?8)
ORDER BY seq LIMIT ?9`

const sqlitePending = `parked_at IS NULL AND published_at IS NULL`

var sqliteOutboxInspect = sqldialect.OutboxInspectQueries{
	// 'now' is the same at each use within a statement.
	Stats: `SELECT ` + sqliteNow + `,
    count(*) FILTER (WHERE ` + sqlitePending + `),
    count(*) FILTER (WHERE ` + sqlitePending + ` AND available_at <= ` + sqliteNow + `),
    min(created_at) FILTER (WHERE ` + sqlitePending + `),
    count(*) FILTER (WHERE parked_at IS NOT NULL AND published_at IS NULL),
    min(parked_at) FILTER (WHERE published_at IS NULL),
    count(*) FILTER (WHERE published_at IS NOT NULL)
FROM {outbox}`,
	Search:     strings.Replace(sqliteOutboxSearch, "{id}", "?5 IS NULL", 1),
	SearchByID: strings.Replace(sqliteOutboxSearch, "{id}", "message_id = ?5", 1),
	Get: `SELECT seq, message_id, destination, msg_key, message_type, headers, payload, attempts, last_error,
    created_at, parked_at, available_at, published_at, coalesce(length(payload), 0)
FROM {outbox} WHERE seq = ?`,
}
