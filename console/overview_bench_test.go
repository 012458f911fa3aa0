package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/console"
	"github.com/inboxkit/inbox/store"
)

// BenchmarkOverview renders the overview on the server over 1,000,000
// inbox rows, 100,000 dead letters and 10,000 messages in retry in
// PostgreSQL, four consumers: what each of its reads costs, and the page.
func BenchmarkOverview(b *testing.B) {
	ctx := context.Background()
	d := filled(b, func(schema string) []string {
		return []string{`
INSERT INTO ` + schema + `.inbox (consumer, message_id, received_at)
SELECT convert_to('consumer-' || g % 4, 'UTF8'), convert_to('msg-' || g, 'UTF8'), now() - (g % 20000) * interval '1 second'
FROM generate_series(1, 1000000) AS g;
INSERT INTO ` + schema + `.inbox_dead_letters (consumer, message_id, message_type, payload, headers, error, error_group, attempts, failed_at)
SELECT convert_to('consumer-' || g % 4, 'UTF8'), convert_to('dead-' || g, 'UTF8'), 'charge', '\x00'::bytea, NULL,
       'charge dead-' || g || ': card declined', 'charge dead-<n>: card declined', 10, now() - g * interval '1 second'
FROM generate_series(1, 100000) AS g;
INSERT INTO ` + schema + `.inbox_attempts (consumer, message_id, attempts, last_error, error_group, first_failed_at, last_failed_at)
SELECT convert_to('consumer-' || g % 4, 'UTF8'), convert_to('retry-' || g, 'UTF8'), 2, 'timeout', 'timeout',
       now() - g * interval '1 second', now() - g * interval '1 second'
FROM generate_series(1, 10000) AS g;
ANALYZE ` + schema + `.inbox; ANALYZE ` + schema + `.inbox_dead_letters; ANALYZE ` + schema + `.inbox_attempts`}
	})
	c, err := console.New(d, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store_stats", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Stats(ctx, &store.StatsParams{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store_consumers", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Consumers(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store_throughput", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Throughput(ctx, &store.ThroughputParams{Since: time.Now().Add(-3 * time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store_retrying", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Retrying(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store_groups_of_a_consumer", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.DeadLetterGroups(ctx, &store.DeadLetterSearchParams{Consumer: []byte("consumer-1"), Limit: 3}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("page", func(b *testing.B) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		for b.Loop() {
			w := httptest.NewRecorder()
			c.ServeHTTP(w, req)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "consumer-3") {
				b.Fatalf("%d:\n%.2000s", w.Code, w.Body.String())
			}
		}
	})
}
