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

// BenchmarkDeadLettersPage renders /dead-letters on the server, over
// 100,000 dead letters in PostgreSQL: the first page, and filtered ones.
// The groups' counts and the page's rows are what it reads.
func BenchmarkDeadLettersPage(b *testing.B) {
	ctx := context.Background()
	pool, schema := pgenv.PoolInSchema(b, 4) // skips without PostgreSQL
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	// Five error groups of 20,000, four consumers, two types.
	if _, err := pool.Exec(ctx, `
INSERT INTO `+schema+`.inbox_dead_letters (consumer, message_id, message_type, payload, headers, error, error_group, attempts, failed_at)
SELECT convert_to('consumer-' || g % 4, 'UTF8'), convert_to('msg-' || g, 'UTF8'),
       CASE WHEN g % 3 = 0 THEN 'refund' ELSE 'charge' END,
       convert_to(repeat('{"order":' || g || '}', 10), 'UTF8'), NULL,
       'charge msg-' || g || ': ' || (ARRAY['card declined','card expired','gateway timeout','bad payload','fraud check'])[g % 5 + 1],
       'charge msg-<n>: ' || (ARRAY['card declined','card expired','gateway timeout','bad payload','fraud check'])[g % 5 + 1],
       10, now() - g * interval '1 second'
FROM generate_series(1, 100000) AS g`); err != nil {
		b.Fatal(err)
	}
	// As autovacuum leaves a table written to over time: its pages all
	// visible, so that an index-only scan need not read them.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+schema+`.inbox_dead_letters`); err != nil {
		b.Fatal(err)
	}
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
