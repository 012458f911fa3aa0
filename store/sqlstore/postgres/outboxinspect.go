package postgres

import (
	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.OutboxInspector = postgresDialect{}

// OutboxInspectTemplates are internal/pgsql's statements, shared with
// pgxstore.
func (postgresDialect) OutboxInspectTemplates() sqldialect.OutboxInspectQueries {
	s := pgsql.NewOutboxInspect(pgsql.Tokens.Outbox)
	return sqldialect.OutboxInspectQueries{Stats: s.Stats, Search: s.Search, SearchByID: s.SearchByID, Get: s.Get}
}
