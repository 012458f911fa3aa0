// Package otelinbox_test holds the tests of package otelinbox that need a database
// (SQLite) or a broker (an embedded NATS server), apart from the package so
// that go mod tidy in a program that imports otelinbox downloads neither.
package otelinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/otelinbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// telemetry is an in-memory metric reader and span recorder behind a
// *otelinbox.Hooks.
type telemetry struct {
	hooks  *otelinbox.Hooks
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	h, err := otelinbox.New(&otelinbox.Config{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{hooks: h, reader: reader, spans: spans, tp: tp}
}

// metric returns the named metric's data, failing when there is none.
func (tm *telemetry) metric(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	data := tm.find(t, name)
	if data == nil {
		t.Fatalf("no metric %s collected", name)
	}
	return data
}

// find returns the named metric's data, nil when there is none.
func (tm *telemetry) find(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// sums returns an int sum's values by the value of attribute key.
func (tm *telemetry) sums(t *testing.T, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, dp := range tm.metric(t, name).(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value(key)
		out[v.Emit()] += dp.Value
	}
	return out
}

// histogram returns the count and sum of a float histogram, over all its
// attributes, and its least value.
func (tm *telemetry) histogram(t *testing.T, name string) (count uint64, sum, least float64) {
	t.Helper()
	least = -1
	for _, dp := range tm.metric(t, name).(metricdata.Histogram[float64]).DataPoints {
		count += dp.Count
		sum += dp.Sum
		if m, ok := dp.Min.Value(); ok && (least < 0 || m < least) {
			least = m
		}
	}
	return count, sum, least
}

// openInbox returns an inbox on a fresh SQLite file, its database and
// store, with a ledger table for handlers' effects.
func openInbox(t *testing.T, cfg inbox.Config) (*inbox.Inbox[*sql.Tx], *sql.DB, *sqlstore.Driver) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (id TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, d, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib, db, d
}

func write(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO ledger (id) VALUES (?)", m.ID)
	return err
}

// Real Process calls on SQLite: the outcomes' counters, the histograms'
// counts, in flight back to 0, and the spans continuing the producer's
// trace from a traceparent header, with their attributes and status.
func TestProcessMetricsAndSpans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tm := newTelemetry(t)
	ib, db, d := openInbox(t, inbox.Config{Consumer: "billing", MaxAttempts: 3, Hooks: []inbox.Hook{tm.hooks},
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})

	// The producer's span, carried in the message's headers.
	producerCtx, producer := tm.tp.Tracer("producer").Start(ctx, "produce", trace.WithSpanKind(trace.SpanKindProducer))
	headers := map[string]string{"other": "x"}
	propagation.TraceContext{}.Inject(producerCtx, propagation.MapCarrier(headers))
	producer.End()
	published := time.Now().Add(-2 * time.Second)
	msg := func(id, payload string) inbox.Message {
		return inbox.Message{ID: id, Type: "invoice", Payload: []byte(payload), Headers: headers,
			Subject: "orders", System: "nats", Time: published}
	}

	// In the handler: the message is in flight, and ctx carries its span.
	var handlerSpan trace.SpanContext
	var inFlightDuring int64
	first := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		handlerSpan = trace.SpanContextFromContext(ctx)
		inFlightDuring = tm.sums(t, otelinbox.MetricInFlight, otelinbox.AttrConsumerGroup)["billing"]
		return write(ctx, tx, m)
	}
	failing := func(context.Context, *sql.Tx, *inbox.Message) error { return errors.New("payment service down") }
	steps := []struct {
		m    inbox.Message
		h    inbox.Handler[*sql.Tx]
		want inbox.Status
	}{
		{msg("m-1", "a"), first, inbox.Processed},
		{msg("m-1", "a"), write, inbox.Duplicate},
		{msg("m-1", "changed"), write, inbox.Duplicate}, // a fingerprint conflict
		{msg("m-2", "b"), failing, inbox.Retry},
		{msg("m-2", "b"), failing, inbox.Retry},
		{msg("m-2", "b"), failing, inbox.DeadLettered},
	}
	for i, st := range steps {
		out, _ := ib.Process(ctx, st.m, st.h)
		if out.Status != st.want {
			t.Fatalf("step %d (%s): %v, want %v", i, st.m.ID, out.Status, st.want)
		}
	}
	outs, err := ib.ProcessBatch(ctx, []inbox.Message{msg("b-1", "c"), msg("b-2", "d")}, write)
	if err != nil || outs[0].Status != inbox.Processed || outs[1].Status != inbox.Processed {
		t.Fatalf("ProcessBatch: %v %v, want two processed", outs, err)
	}

	if inFlightDuring != 1 {
		t.Errorf("%s in the handler: %d, want 1", otelinbox.MetricInFlight, inFlightDuring)
	}
	if got := tm.sums(t, otelinbox.MetricInFlight, otelinbox.AttrConsumerGroup); got["billing"] != 0 {
		t.Errorf("%s after all outcomes: %v, want 0", otelinbox.MetricInFlight, got)
	}
	// One per outcome: the conflict is a duplicate, counted once.
	wantOutcomes := map[string]int64{"processed": 3, "duplicate": 2, "retry": 2, "dead_lettered": 1}
	if got := tm.sums(t, otelinbox.MetricMessages, otelinbox.AttrOutcome); fmt.Sprint(got) != fmt.Sprint(wantOutcomes) {
		t.Errorf("%s by outcome: %v, want %v", otelinbox.MetricMessages, got, wantOutcomes)
	}
	if got := tm.sums(t, otelinbox.MetricMessages, otelinbox.AttrConsumerGroup); got["billing"] != 8 {
		t.Errorf("%s by consumer: %v, want billing 8 (the outcomes)", otelinbox.MetricMessages, got)
	}
	if got := tm.sums(t, otelinbox.MetricMessages, otelinbox.AttrSystem); got["nats"] != 8 {
		t.Errorf("%s by system: %v, want nats 8", otelinbox.MetricMessages, got)
	}
	for _, c := range []struct {
		key  attribute.Key
		want string
	}{
		{otelinbox.AttrConsumerGroup, "map[billing:1]"}, {otelinbox.AttrSystem, "map[nats:1]"},
		{otelinbox.AttrOutcome, "map[:1]"}, // no outcome attribute
	} {
		if got := tm.sums(t, otelinbox.MetricConflicts, c.key); fmt.Sprint(got) != c.want {
			t.Errorf("%s by %s: %v, want %s", otelinbox.MetricConflicts, c.key, got, c.want)
		}
	}
	// 8 outcomes; the handler ran alone in 4 of them (m-1 once, m-2 thrice).
	if n, _, _ := tm.histogram(t, otelinbox.MetricProcessDuration); n != 8 {
		t.Errorf("%s count %d, want 8", otelinbox.MetricProcessDuration, n)
	}
	if n, _, _ := tm.histogram(t, otelinbox.MetricHandlerDuration); n != 4 {
		t.Errorf("%s count %d, want 4", otelinbox.MetricHandlerDuration, n)
	}
	if n, _, least := tm.histogram(t, otelinbox.MetricEndToEnd); n != 8 || least < 2 {
		t.Errorf("%s count %d, least %vs; want 8, at least 2 s (published 2 s before)", otelinbox.MetricEndToEnd, n, least)
	}
	var attempts []int64
	for _, dp := range tm.metric(t, otelinbox.MetricAttempts).(metricdata.Histogram[int64]).DataPoints {
		attempts = append(attempts, int64(dp.Count), dp.Sum)
	}
	if fmt.Sprint(attempts) != "[2 3 1 3]" && fmt.Sprint(attempts) != "[1 3 2 3]" { // retry: 1+2, dead letter: 3
		t.Errorf("%s (count, sum by outcome): %v, want retry 2 (1+2) and dead_lettered 1 (3)", otelinbox.MetricAttempts, attempts)
	}

	// Pruning: two rows backdated past the retention.
	for _, id := range []string{"b-1", "b-2"} {
		if _, err := db.ExecContext(ctx, `UPDATE inbox SET received_at = received_at - ? WHERE message_id = ?`,
			(3 * time.Hour).Milliseconds(), []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	pr, err := inbox.NewPruner(d, &inbox.PrunerConfig{Retention: time.Hour, Hooks: []inbox.Hook{tm.hooks}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := pr.Prune(ctx); err != nil || n != 2 {
		t.Fatalf("Prune: %d %v, want 2 rows", n, err)
	}
	if got := tm.sums(t, otelinbox.MetricPruned, otelinbox.AttrPruneFailed); got["false"] != 2 {
		t.Errorf("%s: %v, want false: 2", otelinbox.MetricPruned, got)
	}

	// Spans: one per outcome, each a child of the producer's span.
	var spans []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			spans = append(spans, s)
		}
	}
	if len(spans) != 8 {
		t.Fatalf("%d consumer spans, want 8", len(spans))
	}
	wantStatus := []codes.Code{codes.Unset, codes.Unset, codes.Unset, codes.Error, codes.Error, codes.Error, codes.Unset, codes.Unset}
	wantOutcome := []string{"processed", "duplicate", "duplicate", "retry", "retry", "dead_lettered", "processed", "processed"}
	for i, s := range spans {
		attrs := attribute.NewSet(s.Attributes()...)
		get := func(k attribute.Key) string { v, _ := attrs.Value(k); return v.Emit() }
		switch {
		case s.Name() != "process orders":
			t.Errorf("span %d named %q, want %q", i, s.Name(), "process orders")
		case s.Parent().SpanID() != producer.SpanContext().SpanID() || s.SpanContext().TraceID() != producer.SpanContext().TraceID():
			t.Errorf("span %d: parent %v in trace %v, want the producer's span %v in %v", i, s.Parent().SpanID(),
				s.SpanContext().TraceID(), producer.SpanContext().SpanID(), producer.SpanContext().TraceID())
		case s.Status().Code != wantStatus[i]:
			t.Errorf("span %d (%s): status %v, want %v", i, get(otelinbox.AttrOutcome), s.Status(), wantStatus[i])
		case get(otelinbox.AttrOutcome) != wantOutcome[i]:
			t.Errorf("span %d: outcome %q, want %q", i, get(otelinbox.AttrOutcome), wantOutcome[i])
		case get(otelinbox.AttrSystem) != "nats" || get(otelinbox.AttrDestination) != "orders" ||
			get(otelinbox.AttrConsumerGroup) != "billing" || get(otelinbox.AttrOperationType) != "process" ||
			!slices.Contains([]string{"m-1", "m-2", "b-1", "b-2"}, get(otelinbox.AttrMessageID)):
			t.Errorf("span %d attributes %v, want messaging.system nats, destination orders, consumer group billing, operation process, a message ID", i, s.Attributes())
		}
	}
	if handlerSpan.SpanID() != spans[0].SpanContext().SpanID() {
		t.Errorf("the handler's ctx carried span %v, want the message's span %v", handlerSpan.SpanID(), spans[0].SpanContext().SpanID())
	}
	if v, _ := attrSet(spans[2]).Value("inbox.fingerprint_conflict"); !v.AsBool() {
		t.Errorf("the changed payload's span has no inbox.fingerprint_conflict: %v", spans[2].Attributes())
	}
	if v, _ := attrSet(spans[5]).Value(otelinbox.AttrAttempts); v.AsInt64() != 3 {
		t.Errorf("the dead letter's span: inbox.attempts %v, want 3", v.AsInt64())
	}
}

// Process calls in parallel: every span ends and in flight returns to 0.
func TestInFlightUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tm := newTelemetry(t)
	ib, _, _ := openInbox(t, inbox.Config{Consumer: "c", Hooks: []inbox.Hook{tm.hooks}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 10 {
				id := fmt.Sprintf("m-%d", (g*10+i)%25) // some duplicates
				if _, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, write); err != nil {
					t.Errorf("Process %s: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	if got := tm.sums(t, otelinbox.MetricInFlight, otelinbox.AttrConsumerGroup); got["c"] != 0 {
		t.Errorf("%s: %v, want 0", otelinbox.MetricInFlight, got)
	}
	if got := tm.sums(t, otelinbox.MetricMessages, otelinbox.AttrOutcome); got["processed"] != 25 || got["duplicate"] != 15 {
		t.Errorf("%s: %v, want processed 25, duplicate 15", otelinbox.MetricMessages, got)
	}
	if n := len(tm.spans.Ended()); n != 40 {
		t.Errorf("%d spans ended, want 40", n)
	}
}

func attrSet(s sdktrace.ReadOnlySpan) *attribute.Set {
	set := attribute.NewSet(s.Attributes()...)
	return &set
}

// consumerSpans returns the ended spans of kind Consumer.
func (tm *telemetry) consumerSpans() []sdktrace.ReadOnlySpan {
	var spans []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			spans = append(spans, s)
		}
	}
	return spans
}

// A message whose headers carry the producer's context gets a span that
// is the producer's child and links to the span already in ctx (a
// consumer loop's), so that neither is lost; without headers, ctx's span
// is the parent and there is no link.
func TestProcessSpanLinksAmbientSpan(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	ib, _, _ := openInbox(t, inbox.Config{Consumer: "c", Hooks: []inbox.Hook{tm.hooks}})
	tracer := tm.tp.Tracer("test")
	producerCtx, producer := tracer.Start(context.Background(), "produce")
	headers := map[string]string{}
	propagation.TraceContext{}.Inject(producerCtx, propagation.MapCarrier(headers))
	producer.End()
	ctx, ambient := tracer.Start(context.Background(), "consumer loop")
	defer ambient.End()

	tests := []struct {
		id         string
		headers    map[string]string
		wantParent trace.SpanContext
		wantLinks  []trace.SpanContext
	}{
		{"with-producer", headers, producer.SpanContext(), []trace.SpanContext{ambient.SpanContext()}},
		{"without-producer", nil, ambient.SpanContext(), nil},
	}
	for _, tc := range tests {
		if out, err := ib.Process(ctx, inbox.Message{ID: tc.id, Payload: []byte(tc.id), Headers: tc.headers}, write); out.Status != inbox.Processed {
			t.Fatalf("Process %s: %v %v, want processed", tc.id, out.Status, err)
		}
	}
	spans := tm.consumerSpans()
	if len(spans) != len(tests) {
		t.Fatalf("%d consumer spans, want %d", len(spans), len(tests))
	}
	for i, tc := range tests {
		s := spans[i]
		var links []trace.SpanContext
		for _, l := range s.Links() {
			links = append(links, l.SpanContext)
		}
		if s.Parent().SpanID() != tc.wantParent.SpanID() || s.SpanContext().TraceID() != tc.wantParent.TraceID() {
			t.Errorf("%s: parent %v in trace %v, want %v in %v", tc.id, s.Parent().SpanID(), s.SpanContext().TraceID(),
				tc.wantParent.SpanID(), tc.wantParent.TraceID())
		}
		if len(links) != len(tc.wantLinks) || (len(links) == 1 && !links[0].Equal(tc.wantLinks[0])) {
			t.Errorf("%s: links %v, want %v (ctx's span, when the producer's replaced it)", tc.id, links, tc.wantLinks)
		}
	}
}

// outcomesOnly exposes a *Hooks' outcome hooks and not its StartHook, as a
// program that filters hooks would.
type outcomesOnly struct {
	inbox.ProcessedHook
	inbox.DuplicateHook
	inbox.RetryHook
	inbox.DeadLetteredHook
	inbox.FingerprintConflictHook
}

// Two *Hooks instances on nested inboxes (a handler that processes a
// message through a second inbox with the same ctx): each ends only its own
// spans and counts only its own messages in and out of flight, also when
// the inner one's OnStart does not run.
func TestTwoHooksInstancesNested(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		inner     func(h *otelinbox.Hooks) any
		wantInner int // inner consumer spans
	}{
		{"both start", func(h *otelinbox.Hooks) any { return h }, 1},
		{"inner without OnStart", func(h *otelinbox.Hooks) any { return outcomesOnly{h, h, h, h, h} }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			outerTm, innerTm := newTelemetry(t), newTelemetry(t)
			// Two SQLite files: the inner transaction runs while the
			// outer one holds its file's only writer.
			outer, _, _ := openInbox(t, inbox.Config{Consumer: "outer", Hooks: []inbox.Hook{outerTm.hooks}})
			inner, _, _ := openInbox(t, inbox.Config{Consumer: "inner", Hooks: []inbox.Hook{tc.inner(innerTm.hooks)}})
			var outerEndedEarly bool
			handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				out, err := inner.Process(ctx, inbox.Message{ID: "in-" + m.ID, Payload: m.Payload}, write)
				if out.Status != inbox.Processed {
					return fmt.Errorf("inner Process: %v %w", out.Status, err)
				}
				outerEndedEarly = len(outerTm.consumerSpans()) > 0
				return write(ctx, tx, m)
			}
			if out, err := outer.Process(ctx, inbox.Message{ID: "m-1", Payload: []byte("x")}, handler); out.Status != inbox.Processed {
				t.Fatalf("outer Process: %v %v, want processed", out.Status, err)
			}
			for _, c := range []struct {
				tm       *telemetry
				consumer string
				spans    int
			}{{outerTm, "outer", 1}, {innerTm, "inner", tc.wantInner}} {
				// None at all when the hooks' OnStart never ran.
				if c.tm.find(t, otelinbox.MetricInFlight) != nil {
					if got := c.tm.sums(t, otelinbox.MetricInFlight, otelinbox.AttrConsumerGroup); fmt.Sprint(got) != "map["+c.consumer+":0]" {
						t.Errorf("%s hooks: %s %v, want %s 0", c.consumer, otelinbox.MetricInFlight, got, c.consumer)
					}
				}
				if got := c.tm.sums(t, otelinbox.MetricMessages, otelinbox.AttrConsumerGroup); fmt.Sprint(got) != "map["+c.consumer+":1]" {
					t.Errorf("%s hooks: %s %v, want %s 1", c.consumer, otelinbox.MetricMessages, got, c.consumer)
				}
				if n := len(c.tm.consumerSpans()); n != c.spans {
					t.Errorf("%s hooks: %d consumer spans, want %d", c.consumer, n, c.spans)
				}
			}
			if outerEndedEarly {
				t.Errorf("the outer message's span ended inside its handler, by the inner inbox's hooks; want it ended by its own outcome")
			}
		})
	}
}

// A batch split is counted per consumer.
func TestBatchSplitsCounted(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t)
	for _, c := range []string{"a", "a", "b"} {
		tm.hooks.OnBatchSplit(context.Background(), &inbox.SplitEvent{Consumer: c, Size: 8, Next: 4, Width: 1, Limit: 8})
	}
	if got := tm.sums(t, otelinbox.MetricBatchSplits, otelinbox.AttrConsumerGroup); got["a"] != 2 || got["b"] != 1 || len(got) != 2 {
		t.Fatalf("%s: %v, want a: 2, b: 1", otelinbox.MetricBatchSplits, got)
	}
}
