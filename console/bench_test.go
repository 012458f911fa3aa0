package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

// filled returns a driver on migrated tables in a schema of their own,
// filled by the statements fill returns for the schema, each run on its
// own (VACUUM runs outside a transaction). It skips without PostgreSQL.
func filled(b *testing.B, fill func(schema string) []string) *pgxstore.Driver {
	b.Helper()
	ctx := context.Background()
	pool, schema := pgenv.PoolInSchema(b, 4)
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, stmt := range fill(schema) {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	return d
}

// BenchmarkDeadLettersPage renders /dead-letters on the server, over
// 100,000 dead letters in PostgreSQL: the first page, and filtered ones.
// The groups' counts and the page's rows are what it reads.
func BenchmarkDeadLettersPage(b *testing.B) {
	ctx := context.Background()
	// Five error groups of 20,000, four consumers, two types.
	d := filled(b, func(schema string) []string {
		return []string{`
INSERT INTO ` + schema + `.inbox_dead_letters (consumer, message_id, message_type, payload, headers, error, error_group, attempts, failed_at)
SELECT convert_to('consumer-' || g % 4, 'UTF8'), convert_to('msg-' || g, 'UTF8'),
       CASE WHEN g % 3 = 0 THEN 'refund' ELSE 'charge' END,
       convert_to(repeat('{"order":' || g || '}', 10), 'UTF8'), NULL,
       'charge msg-' || g || ': ' || (ARRAY['card declined','card expired','gateway timeout','bad payload','fraud check'])[g % 5 + 1],
       'charge msg-<n>: ' || (ARRAY['card declined','card expired','gateway timeout','bad payload','fraud check'])[g % 5 + 1],
       10, now() - g * interval '1 second'
FROM generate_series(1, 100000) AS g`,
			// As autovacuum leaves a table written to over time: its pages
			// all visible, so that an index-only scan need not read them.
			`VACUUM (ANALYZE) ` + schema + `.inbox_dead_letters`}
	})
	b.Run("store_groups", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.DeadLetterGroups(ctx, &store.DeadLetterSearchParams{Limit: 10}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store_search", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.DeadLetterSearch(ctx, &store.DeadLetterSearchParams{Limit: 51}); err != nil {
				b.Fatal(err)
			}
		}
	})
	c, err := console.New(d, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, query string }{
		{"first page", ""},
		{"by group", "group=" + url.QueryEscape("charge msg-<n>: card expired")},
		{"by consumer and type", "consumer=consumer-2&type=refund"},
		{"last day, error text", "since=24h&error=" + url.QueryEscape("fraud")},
		{"a later page", "after=90000"},
	} {
		b.Run(strings.ReplaceAll(bc.name, " ", "_"), func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/dead-letters?"+bc.query, nil)
			for b.Loop() {
				w := httptest.NewRecorder()
				c.ServeHTTP(w, req)
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `class="dl"`) {
					b.Fatalf("%s: %d, no dead letter listed:\n%.2000s", bc.query, w.Code, w.Body.String())
				}
			}
		})
	}
}
