package sqlstore

import (
	"fmt"
	"strings"

	"github.com/inboxkit/inbox/internal/migrate"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
)

// Migrations returns the SQL of the dialect's migrations for tables t,
// without a database. To apply them yourself, use MigrationScript, which
// also records them as Migrate does.
func Migrations(dialect Dialect, t store.Tables) ([]store.Migration, error) {
	d, err := scriptDialect(dialect, t)
	if err != nil {
		return nil, err
	}
	fsys, dir := d.Migrations()
	return migrate.Load(fsys, dir, t, d.Quote)
}

// MigrationScript returns the dialect's migrations for tables t as one SQL
// script, without a database. It is for teams that apply SQL themselves.
//
// The script does what [Driver.Migrate] does, under Migrate's lock. It
// creates the migrations table if missing. It records each version there as
// Migrate does, so Migrate afterwards finds nothing to do. Applying it
// twice, or after Migrate, changes nothing. On SQLite it then fails and
// changes nothing.
//   - PostgreSQL runs it in one transaction. Each migration runs only if its
//     version is not recorded, which a DO block checks. Apply it with psql -v
//     ON_ERROR_STOP=1 -f FILE.
//   - MySQL runs it under GET_LOCK. DDL commits by itself, so every statement
//     is idempotent, as for Migrate. A version is recorded once, after its
//     statements. Apply it with the mariadb or mysql client.
//   - SQLite runs it in one BEGIN IMMEDIATE transaction. SQLite cannot run a
//     statement conditionally, and ALTER TABLE ADD COLUMN has no IF NOT
//     EXISTS. Applied again, the script fails at the first column that
//     exists, and its transaction changes nothing. Apply it with sqlite3
//     -bail, or with one Exec on a *sql.DB of its own, closed afterwards. A
//     failed Exec leaves its connection inside the script's transaction,
//     holding the write lock. On tables that Migrate or an earlier script
//     made, use Migrate.
func MigrationScript(dialect Dialect, t store.Tables) (string, error) {
	d, err := scriptDialect(dialect, t)
	if err != nil {
		return "", err
	}
	if sc, ok := d.(sqldialect.Scripter); ok { // PostgreSQL's is internal/pgsql's, shared with pgxstore
		return sc.Script(t)
	}
	fsys, dir := d.Migrations()
	ms, err := migrate.Load(fsys, dir, t, d.Quote)
	if err != nil {
		return "", err
	}
	q := sqldialect.Render(d.Templates(), t, d.Quote)
	f, err := d.ScriptFrame(t)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(f.Header + f.Begin + q.MigrationsCreate + ";\n")
	for _, m := range ms {
		record, err := sqldialect.FillLiterals(q.MigrationRecord, m.Version, m.Name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- migration %d: %s\n%s\n%s%s;\n", m.Version, m.Name, strings.TrimSpace(m.SQL), record, f.RecordOnce)
	}
	b.WriteString("\n" + f.End)
	return b.String(), nil
}

func scriptDialect(dialect Dialect, t store.Tables) (sqldialect.Dialect, error) {
	d := dialect.d
	if d == nil {
		return nil, fmt.Errorf("%w: a Dialect is required (sqlite.Dialect, mysql.Dialect or postgres.Dialect)", ErrInvalidConfig)
	}
	if err := checkTables(d, t); err != nil {
		return nil, err
	}
	return d, nil
}

// checkTables checks t's names and that d can use them.
func checkTables(d sqldialect.Dialect, t store.Tables) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := d.CheckTables(t); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
