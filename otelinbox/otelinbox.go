package otelinbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/outbox"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/inboxkit/inbox/otelinbox"

// The metrics' names.
const (
	MetricMessages        = "inbox.messages"
	MetricConflicts       = "inbox.fingerprint_conflicts"
	MetricHandlerDuration = "inbox.handler.duration"
	MetricProcessDuration = "inbox.process.duration"
	MetricEndToEnd        = "inbox.end_to_end.duration"
	MetricAttempts        = "inbox.attempts"
	MetricInFlight        = "inbox.in_flight"
	MetricPruned          = "inbox.pruned"
	MetricBatchSplits     = "inbox.batch.splits"
)

// The attributes' keys. They follow OpenTelemetry's messaging conventions
// where those apply, and use inbox.* for the rest.
const (
	AttrSystem        = attribute.Key("messaging.system")
	AttrDestination   = attribute.Key("messaging.destination.name")
	AttrMessageID     = attribute.Key("messaging.message.id")
	AttrConsumerGroup = attribute.Key("messaging.consumer.group.name")
	AttrOperationType = attribute.Key("messaging.operation.type")
	AttrOperationName = attribute.Key("messaging.operation.name")
	AttrOutcome       = attribute.Key("inbox.outcome")
	AttrMessageType   = attribute.Key("inbox.message.type")
	AttrAttempts      = attribute.Key("inbox.attempts")
	AttrPruneFailed   = attribute.Key("inbox.prune.failed")
)

// The values of AttrOutcome.
const (
	OutcomeProcessed    = "processed"
	OutcomeDuplicate    = "duplicate"
	OutcomeRetry        = "retry"
	OutcomeDeadLettered = "dead_lettered"
)

// Config configures [New]. A nil Config, or a zero field, means the
// default.
type Config struct {
	// MeterProvider makes the meter of the metrics. The global one is a no-op
	// until the program sets one. Default [otel.GetMeterProvider].
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer of the spans. The global one is a no-op
	// until the program sets one. Default [otel.GetTracerProvider].
	TracerProvider trace.TracerProvider
	// Propagator reads the producer's trace context from a message's headers.
	// It writes it into the outbox's. The global default propagates nothing,
	// which would silently cut every trace at the broker. The default is
	// therefore [otel.GetTextMapPropagator] only when the program has set one,
	// with Fields that are not empty. Otherwise it is W3C traceparent and
	// tracestate. Default [propagation.TraceContext] unless a global one is set.
	Propagator propagation.TextMapPropagator
}

// Hooks records metrics and spans for inboxes, pruners, outboxes and relays.
// Give it in their Config.Hooks, PrunerConfig.Hooks, outbox.Config.Hooks and
// outbox.RelayConfig.Hooks. One *Hooks may serve all of them at once.
type Hooks struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	messages  metric.Int64Counter
	conflicts metric.Int64Counter
	handler   metric.Float64Histogram
	process   metric.Float64Histogram
	endToEnd  metric.Float64Histogram
	attempts  metric.Int64Histogram
	inFlight  metric.Int64UpDownCounter
	pruned    metric.Int64Counter
	splits    metric.Int64Counter
}

var (
	_ inbox.StartHook               = (*Hooks)(nil)
	_ inbox.ProcessedHook           = (*Hooks)(nil)
	_ inbox.DuplicateHook           = (*Hooks)(nil)
	_ inbox.RetryHook               = (*Hooks)(nil)
	_ inbox.DeadLetteredHook        = (*Hooks)(nil)
	_ inbox.FingerprintConflictHook = (*Hooks)(nil)
	_ inbox.PrunedHook              = (*Hooks)(nil)
	_ inbox.BatchSplitHook          = (*Hooks)(nil)
	_ outbox.WriteHook              = (*Hooks)(nil)
	_ outbox.PublishHook            = (*Hooks)(nil)
)

// durationBuckets suit a handler in a database transaction: 1 ms to 1 min.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// endToEndBuckets add the minutes that retries and backlogs take.
var endToEndBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// attemptBuckets: the default MaxAttempts is 10.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 50}

// New returns hooks that record through cfg's providers.
func New(cfg *Config) (*Hooks, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = otel.GetTextMapPropagator()
		if len(c.Propagator.Fields()) == 0 {
			c.Propagator = propagation.TraceContext{}
		}
	}
	m := c.MeterProvider.Meter(ScopeName)
	h := &Hooks{tracer: c.TracerProvider.Tracer(ScopeName), prop: c.Propagator}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	h.messages, err = m.Int64Counter(MetricMessages, metric.WithUnit("{message}"),
		metric.WithDescription("Messages by outcome: processed, duplicate, retry, dead_lettered."))
	add(err)
	h.conflicts, err = m.Int64Counter(MetricConflicts, metric.WithUnit("{message}"),
		metric.WithDescription("Duplicates whose payload differs from the one first processed under their ID (also counted in inbox.messages as duplicate)."))
	add(err)
	h.handler, err = m.Float64Histogram(MetricHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the handler took, when it ran alone (not in a batch)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	h.process, err = m.Float64Histogram(MetricProcessDuration, metric.WithUnit("s"),
		metric.WithDescription("Time Process took, claim, handler and COMMIT included."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	h.endToEnd, err = m.Float64Histogram(MetricEndToEnd, metric.WithUnit("s"),
		metric.WithDescription("Time from the message's publication (as the broker says) to its outcome."),
		metric.WithExplicitBucketBoundaries(endToEndBuckets...))
	add(err)
	h.attempts, err = m.Int64Histogram(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Failed attempts recorded for a message, at each retry and dead letter after a handler failure."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	add(err)
	h.inFlight, err = m.Int64UpDownCounter(MetricInFlight, metric.WithUnit("{message}"),
		metric.WithDescription("Messages being processed."))
	add(err)
	h.pruned, err = m.Int64Counter(MetricPruned, metric.WithUnit("{row}"),
		metric.WithDescription("Inbox rows deleted by the pruner."))
	add(err)
	h.splits, err = m.Int64Counter(MetricBatchSplits, metric.WithUnit("{batch}"),
		metric.WithDescription("Batches rolled back after a lock conflict (a deadlock, a serialization failure, a lock timeout) and run again in smaller parts."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelinbox: creating the instruments: %w", err)
	}
	return h, nil
}

// started is what OnStart leaves in the context for the outcome hooks.
type started struct {
	span     trace.Span
	consumer attribute.KeyValue
	system   attribute.KeyValue // an empty Key when unknown
}

// startedKey keys a *started by the *Hooks that made it: another
// instance's outcome hooks, seeing the same context (nested inboxes), must
// not end its span nor count it out of flight.
type startedKey struct{ h *Hooks }

// startedOf returns what h's OnStart left in ctx; nil when it did not run.
func (h *Hooks) startedOf(ctx context.Context) *started {
	st, _ := ctx.Value(startedKey{h}).(*started)
	return st
}

// OnStart starts the message's span and counts the message in flight. The
// span is a child of the producer's span when the headers carry its context.
// It then links to ctx's span, when there is one. Otherwise it is a child of
// ctx's span.
func (h *Hooks) OnStart(ctx context.Context, e *inbox.Event) context.Context {
	m := e.Message
	parent := h.prop.Extract(ctx, headerCarrier(m.Headers))
	opts := make([]trace.SpanStartOption, 0, 3)
	if ambient := trace.SpanContextFromContext(ctx); ambient.IsValid() && !ambient.Equal(trace.SpanContextFromContext(parent)) {
		// The producer's span replaces ctx's as the parent: keep ctx's
		// (a consumer loop's, a batch's) as a link.
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: ambient}))
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, AttrOperationType.String("process"), AttrOperationName.String("process"),
		AttrConsumerGroup.String(e.Consumer), AttrMessageID.String(printable(m.ID)))
	st := &started{consumer: AttrConsumerGroup.String(e.Consumer)}
	if m.System != "" {
		st.system = AttrSystem.String(m.System)
		attrs = append(attrs, st.system)
	}
	if m.Subject != "" {
		attrs = append(attrs, AttrDestination.String(m.Subject))
	}
	if m.Type != "" {
		attrs = append(attrs, AttrMessageType.String(m.Type))
	}
	name := "process"
	if m.Subject != "" {
		name = "process " + m.Subject
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	ctx, st.span = h.tracer.Start(parent, name, opts...)
	h.inFlight.Add(ctx, 1, metric.WithAttributes(st.consumer))
	return context.WithValue(ctx, startedKey{h}, st)
}

// OnProcessed records a processed message.
func (h *Hooks) OnProcessed(ctx context.Context, e *inbox.Event) { h.outcome(ctx, e, OutcomeProcessed) }

// OnDuplicate records a duplicate.
func (h *Hooks) OnDuplicate(ctx context.Context, e *inbox.Event) { h.outcome(ctx, e, OutcomeDuplicate) }

// OnRetry records a retry. The span's status is an error.
func (h *Hooks) OnRetry(ctx context.Context, e *inbox.Event) { h.outcome(ctx, e, OutcomeRetry) }

// OnDeadLettered records a dead letter. The span's status is an error.
func (h *Hooks) OnDeadLettered(ctx context.Context, e *inbox.Event) {
	h.outcome(ctx, e, OutcomeDeadLettered)
}

// OnFingerprintConflict counts a fingerprint conflict in
// inbox.fingerprint_conflicts and marks the span. [Hooks.OnDuplicate] counts
// the duplicate in inbox.messages and ends the span.
func (h *Hooks) OnFingerprintConflict(ctx context.Context, e *inbox.Event) {
	st := h.startedOf(ctx)
	h.conflicts.Add(ctx, 1, metric.WithAttributes(h.metricAttrs(st, e, "")...))
	if st == nil { // OnStart was not ours: no span of ours to mark
		return
	}
	st.span.AddEvent("fingerprint conflict", trace.WithAttributes(attribute.String("inbox.stored_type", e.StoredType)))
	st.span.SetAttributes(attribute.Bool("inbox.fingerprint_conflict", true))
}

// metricAttrs are the attributes of the message metrics: the consumer,
// the outcome (unless empty) and, when known, the broker. Not the
// destination: a subject per customer or order would make a series each.
func (h *Hooks) metricAttrs(st *started, e *inbox.Event, outcome string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, AttrConsumerGroup.String(e.Consumer))
	if outcome != "" {
		attrs = append(attrs, AttrOutcome.String(outcome))
	}
	switch {
	case st != nil && st.system.Key != "":
		attrs = append(attrs, st.system)
	case st == nil && e.Message.System != "":
		attrs = append(attrs, AttrSystem.String(e.Message.System))
	}
	return attrs
}

func (h *Hooks) outcome(ctx context.Context, e *inbox.Event, outcome string) {
	st := h.startedOf(ctx)
	opt := metric.WithAttributes(h.metricAttrs(st, e, outcome)...)
	h.messages.Add(ctx, 1, opt)
	h.process.Record(ctx, e.Duration.Seconds(), opt)
	if e.HandlerDuration > 0 {
		h.handler.Record(ctx, e.HandlerDuration.Seconds(), opt)
	}
	if !e.Message.Time.IsZero() {
		h.endToEnd.Record(ctx, max(time.Since(e.Message.Time), 0).Seconds(), opt)
	}
	if e.Outcome.Attempts > 0 {
		h.attempts.Record(ctx, int64(e.Outcome.Attempts), opt)
	}
	if st == nil { // OnStart was not ours (or it panicked): no span, not in flight
		return
	}
	h.inFlight.Add(ctx, -1, metric.WithAttributes(st.consumer))
	st.span.SetAttributes(AttrOutcome.String(outcome))
	if e.Outcome.Attempts > 0 {
		st.span.SetAttributes(AttrAttempts.Int(e.Outcome.Attempts))
	}
	if outcome == OutcomeRetry || outcome == OutcomeDeadLettered {
		if err := e.Outcome.Err; err != nil {
			st.span.RecordError(err)
			st.span.SetStatus(codes.Error, outcome+": "+err.Error())
		} else {
			st.span.SetStatus(codes.Error, outcome)
		}
	}
	st.span.End()
}

// OnPruned counts the rows a pruner deleted.
func (h *Hooks) OnPruned(ctx context.Context, e *inbox.PruneEvent) {
	h.pruned.Add(ctx, int64(e.Deleted), metric.WithAttributes(AttrPruneFailed.Bool(e.Err != nil)))
}

// OnBatchSplit counts a batch split after a lock conflict.
func (h *Hooks) OnBatchSplit(ctx context.Context, e *inbox.SplitEvent) {
	h.splits.Add(ctx, 1, metric.WithAttributes(AttrConsumerGroup.String(e.Consumer)))
}

// OnWrite writes the trace context of ctx into the headers of a message
// written to the outbox. That is the writer's span.
func (h *Hooks) OnWrite(ctx context.Context, _ *outbox.Message, headers map[string]string) {
	h.prop.Inject(ctx, propagation.MapCarrier(headers))
}

// OnPublish starts a Producer span "send <destination>". It is a child of
// the trace context in the row's headers, the writer's span. It writes the
// span's context into the headers that are published, so that the
// consumer's span is its child. The span ends with Publish's error.
func (h *Hooks) OnPublish(ctx context.Context, m *outbox.Message) (context.Context, func(error)) {
	parent := h.prop.Extract(ctx, headerCarrier(m.Headers))
	ctx, span := h.tracer.Start(parent, "send "+m.Destination, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(AttrOperationType.String("send"), AttrOperationName.String("send"),
			AttrDestination.String(m.Destination), AttrMessageID.String(printable(m.ID))))
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	h.prop.Inject(ctx, propagation.MapCarrier(m.Headers))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// headerCarrier reads headers whose keys a broker may have changed the
// case of (traceparent, Traceparent).
type headerCarrier map[string]string

func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// printable is id as it is when valid UTF-8, else quoted: IDs are bytes.
func printable(id string) string {
	if utf8.ValidString(id) {
		return id
	}
	return fmt.Sprintf("%q", id)
}
