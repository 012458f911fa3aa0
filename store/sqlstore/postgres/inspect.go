package postgres

import (
	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.Inspector = postgresDialect{}

// InspectTemplates maps internal/pgsql's statements, shared with
// pgxstore, onto the dialect's: a release takes the same two statements
// (DeadLetterTakeID, Release) as pgxstore's.
func (postgresDialect) InspectTemplates() sqldialect.InspectQueries {
	s := pgsql.NewInspect(pgsql.Tokens)
	return sqldialect.InspectQueries{
		StatsInbox:         s.StatsInbox,
		StatsDeadLetters:   s.StatsDeadLetters,
		StatsAttempts:      s.StatsAttempts,
		StatsErrors:        s.StatsErrors,
		DeadLetterSearch:   s.DeadLetterSearch,
		DeadLetterGroups:   s.DeadLetterGroups,
		Throughput:         s.Throughput,
		Retrying:           s.Retrying,
		Consumers:          s.Consumers,
		RetryingList:       s.RetryingList,
		Ungrouped:          s.Ungrouped,
		SetGroup:           s.SetGroup,
		UngroupedAttempts:  s.UngroupedAttempts,
		SetAttemptGroup:    s.SetAttemptGroup,
		DeadLetterDetail:   s.DeadLetterDetail,
		DeadLetterTakeID:   s.DeadLetterTakeID,
		DeadLetterDeleteID: s.DeadLetterDeleteID,
		Release:            s.Release,
	}
}
