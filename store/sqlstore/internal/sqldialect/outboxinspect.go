package sqldialect

import (
	"strings"

	"github.com/inboxkit/inbox/store"
)

// OutboxInspector is implemented by a dialect that has the statements of
// store.OutboxInspector.
type OutboxInspector interface {
	// OutboxInspectTemplates returns them with the token {outbox} for the
	// table's name.
	OutboxInspectTemplates() OutboxInspectQueries
}

// OutboxInspectQueries are a dialect's statements of
// store.OutboxInspector. Times come back as unix milliseconds and go in
// as such; a nil argument does not filter.
type OutboxInspectQueries struct {
	// Stats: no argument. One row: internal/storeinspect's
	// ScanOutboxStats. It reads every row of the table once.
	Stats string
	// Search: internal/storeinspect's OutboxSearchArgs, the message ID
	// nil. Columns: ScanOutboxInfo's, with a NULL payload. It walks the
	// primary key from the after seq, in order, and stops at the limit.
	Search string
	// SearchByID is Search with the message ID required: it reads that
	// ID's row alone, through the unique index on message_id.
	SearchByID string
	// Get: arg seq. Columns: ScanOutboxInfo's, payload included; one row
	// by the primary key.
	Get string
}

// RenderOutboxInspect fills in the outbox table's name of t in every
// statement of q.
func RenderOutboxInspect(q OutboxInspectQueries, t store.Tables, quote func(string) string) OutboxInspectQueries {
	r := strings.NewReplacer("{outbox}", t.Name("outbox", quote))
	for _, s := range []*string{&q.Stats, &q.Search, &q.SearchByID, &q.Get} {
		*s = r.Replace(*s)
	}
	return q
}
