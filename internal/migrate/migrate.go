// Package migrate loads a dialect's embedded, versioned SQL migrations.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/inboxkit/inbox/store"
)

// Load reads every NNNN_name.sql file in dir of fsys, in version order, and
// fills in the table names: {inbox}, {attempts}, {dead_letters} and
// {migrations}, {outbox} and {idempotency_keys} become the quoted names of
// tables, {schema} the quoted schema
// (empty when there is none), {schema_literal} the schema as a string
// literal (MySQL's DATABASE() when there is none) and {prefix} the bare
// prefix, for index names.
func Load(fsys fs.FS, dir string, t store.Tables, quote func(string) string) ([]store.Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	schema, schemaLiteral := "", "DATABASE()"
	if t.Schema != "" {
		schema, schemaLiteral = quote(t.Schema), "'"+t.Schema+"'" // Validate allows no quote in it
	}
	r := strings.NewReplacer(
		"{inbox}", t.Name("inbox", quote),
		"{attempts}", t.Name("inbox_attempts", quote),
		"{dead_letters}", t.Name("inbox_dead_letters", quote),
		"{migrations}", t.Name("inbox_migrations", quote),
		"{outbox}", t.Name("outbox", quote),
		"{idempotency_keys}", t.Name("idempotency_keys", quote),
		"{schema}", schema,
		"{schema_literal}", schemaLiteral,
		"{prefix}", t.Prefix,
	)
	var out []store.Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, store.Migration{Version: v, Name: rest, SQL: r.Replace(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migration version %d appears twice", out[i].Version)
		}
	}
	return out, nil
}
