package pgsql

import (
	"strings"

	"github.com/inboxkit/inbox/store"
)

// OutboxInspect are the statements of store.OutboxInspector on
// PostgreSQL, for pgxstore and sqlstore's PostgreSQL dialect alike. Times
// come back as unix milliseconds, rounded down, so that a time read back
// and given as a bound (created_at >= since) finds its row.
type OutboxInspect struct {
	// Stats: no argument. One row: internal/storeinspect's
	// ScanOutboxStats. It reads every row of the table once (a sequential
	// scan of the backlog).
	Stats string
	// Search: $1 after seq, $2 parked (null: both), $3 destination, $4
	// type, $5 message_id (null here), $6 error substring, $7 since, $8
	// until, $9 limit (internal/storeinspect's OutboxSearchArgs). Columns:
	// ScanOutboxInfo's, with a null payload. It walks the primary key
	// from $1 in order and stops at $9 rows found: with a filter few rows
	// match, it reads the rest of the table.
	Search string
	// SearchByID is Search with $5 required: it reads the row of that
	// message ID alone, through the unique index on message_id.
	SearchByID string
	// Get: $1 seq. Columns: ScanOutboxInfo's, payload included. One row
	// by the primary key.
	Get string
}

// outboxInfoColumns are ScanOutboxInfo's columns but the payload and its
// size.
var outboxInfoColumns = `seq, message_id, destination, msg_key, message_type, headers, %s, attempts, last_error, ` +
	ms("created_at") + `, ` + ms("parked_at") + `, ` + ms("available_at") + `, ` + ms("published_at")

// NewOutboxInspect returns the statements of store.OutboxInspector on
// the outbox table named o.
func NewOutboxInspect(o string) OutboxInspect {
	search := func(idIs string) string {
		return `SELECT ` + strings.Replace(outboxInfoColumns, "%s", "NULL::bytea", 1) + `, coalesce(length(payload), 0)::bigint
FROM ` + o + `
WHERE seq > $1 AND published_at IS NULL AND ($2::boolean IS NULL OR $2::boolean = (parked_at IS NOT NULL))
	AND ($3::text IS NULL OR destination = $3::text) AND ($4::text IS NULL OR message_type = $4::text)
	AND ` + idIs + ` AND ($6::text IS NULL OR strpos(last_error, $6::text) > 0)
	AND ($7::bigint IS NULL OR created_at >= 'epoch'::timestamptz + $7::bigint * interval '1 millisecond')
	AND ($8::bigint IS NULL OR created_at < 'epoch'::timestamptz + $8::bigint * interval '1 millisecond')
ORDER BY seq LIMIT $9`
	}
	pending := `parked_at IS NULL AND published_at IS NULL`
	return OutboxInspect{
		Stats: `SELECT ` + ms("now()") + `,
	count(*) FILTER (WHERE ` + pending + `),
	count(*) FILTER (WHERE ` + pending + ` AND available_at <= now()),
	` + ms("min(created_at) FILTER (WHERE "+pending+")") + `,
	count(*) FILTER (WHERE parked_at IS NOT NULL AND published_at IS NULL),
	` + ms("min(parked_at) FILTER (WHERE published_at IS NULL)") + `,
	count(*) FILTER (WHERE published_at IS NOT NULL)
FROM ` + o,
		Search:     search(`($5::bytea IS NULL)`),
		SearchByID: search(`message_id = $5::bytea`),
		Get: `SELECT ` + strings.Replace(outboxInfoColumns, "%s", "payload", 1) + `, coalesce(length(payload), 0)::bigint
FROM ` + o + ` WHERE seq = $1`,
	}
}

// OutboxInspectOf returns the statements of store.OutboxInspector on
// tables t, which must be valid.
func OutboxInspectOf(t store.Tables) OutboxInspect {
	return NewOutboxInspect(t.Name("outbox", store.QuoteDouble))
}
