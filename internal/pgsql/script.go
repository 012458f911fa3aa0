package pgsql

import (
	"fmt"
	"strconv"
	"strings"
)

// scriptTag is the dollar quote around each migration in Script.
const scriptTag = "$inbox_migration$"

// Script returns the migrations as one SQL script that does what Migrate
// does, for teams that apply SQL themselves (psql -v ON_ERROR_STOP=1 -f):
// in one transaction, under Migrate's advisory lock, it creates the schema
// and the migrations table if missing, then runs each migration whose
// version is not recorded and records it, in a DO block that checks the
// version first. Applying it twice, or after Migrate, changes nothing, and
// Migrate afterwards finds nothing to do.
func (q *Queries) Script() (string, error) {
	var b strings.Builder
	b.WriteString("-- The inbox's tables: apply with psql -v ON_ERROR_STOP=1 -f FILE. Each migration\n" +
		"-- runs only if its version is not in the migrations table, which records it as\n" +
		"-- Migrate does: applying this twice, or after Migrate, changes nothing.\n" +
		"BEGIN;\n")
	b.WriteString(strings.Replace(q.Lock, "$1", strconv.FormatInt(q.MigrateLockKey, 10), 1) + ";\n")
	if q.CreateSchema != "" {
		b.WriteString(q.CreateSchema + ";\n")
	}
	b.WriteString(q.CreateMigrations + ";\n")
	for _, m := range q.Migrations {
		if strings.Contains(m.SQL, scriptTag) {
			return "", fmt.Errorf("migration %d (%s) contains %s, the script's dollar quote", m.Version, m.Name, scriptTag)
		}
		v := strconv.Itoa(m.Version)
		record := strings.NewReplacer("$1", v, "$2", Literal(m.Name)).Replace(q.RecordMigration)
		fmt.Fprintf(&b, "\n-- migration %d: %s\nDO %s BEGIN\nIF NOT EXISTS (%s WHERE version = %s) THEN\n\n%s\n%s;\nEND IF;\nEND %s;\n",
			m.Version, m.Name, scriptTag, q.AppliedVersions, v, strings.TrimSpace(m.SQL), record, scriptTag)
	}
	b.WriteString("\nCOMMIT;\n")
	return b.String(), nil
}

// Literal quotes s as an SQL string literal (standard_conforming_strings:
// a backslash is an ordinary character).
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
