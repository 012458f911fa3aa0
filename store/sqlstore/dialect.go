package sqlstore

import (
	"strings"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// Dialect is the SQL dialect of a database: SQLite, MySQL/MariaDB or
// PostgreSQL. Its zero value is no dialect.
type Dialect struct{ d sqldialect.Dialect }

// String returns the dialect's name, as Driver.Dialect does.
func (d Dialect) String() string {
	if d.d == nil {
		return "none"
	}
	return d.d.Name()
}

// render fills in the table names of t in every statement of q, with the
// tokens internal/migrate uses.
func render(q sqldialect.Queries, t store.Tables, quote func(string) string) sqldialect.Queries {
	r := strings.NewReplacer(
		"{inbox}", t.Name("inbox", quote),
		"{attempts}", t.Name("inbox_attempts", quote),
		"{dead_letters}", t.Name("inbox_dead_letters", quote),
		"{migrations}", t.Name("inbox_migrations", quote),
	)
	for _, s := range []*string{
		&q.Claim, &q.ClaimSettingLockTimeout, &q.ClaimLookup, &q.RollbackToSavepoint,
		&q.AttemptAdd, &q.AttemptCount, &q.AttemptsDelete,
		&q.DeadInsert, &q.DeadLetterInsert, &q.DeadLetterList, &q.DeadLetterGet, &q.DeadLetterDelete,
		&q.Reclaim, &q.PruneInbox, &q.PruneAttempts,
		&q.MigrationsCreate, &q.MigrationsApplied, &q.SchemaVersion, &q.MigrationRecord,
	} {
		*s = r.Replace(*s)
	}
	return q
}
