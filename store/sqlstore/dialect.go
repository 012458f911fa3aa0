package sqlstore

import (
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// Dialect is the SQL dialect of a database: SQLite, MySQL and MariaDB, or
// PostgreSQL. Its zero value is no dialect.
type Dialect struct{ d sqldialect.Dialect }

// NewDialect wraps the dialect of one of sqlstore's dialect packages. Use
// the Dialect variables of sqlite, mysql and postgres.
func NewDialect(d sqldialect.Dialect) Dialect { return Dialect{d: d} }

// String returns the dialect's name, as Driver.Dialect does.
func (d Dialect) String() string {
	if d.d == nil {
		return "none"
	}
	return d.d.Name()
}
