package postgres

import (
	"github.com/inboxkit/inbox/internal/pgsql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

var _ sqldialect.Aborter = postgresDialect{}

// Aborted: a COMMIT that rolled back, or a check that met an aborted
// transaction (25P02). database/sql keeps no error of the statement that
// failed, so the error cannot name it.
func (postgresDialect) Aborted(err error, committing bool) error {
	if committing && pgsql.CommitAborted(err) || !committing && pgsql.InAborted(err) {
		return &pgsql.AbortedError{Committing: committing, Err: err}
	}
	return nil
}
