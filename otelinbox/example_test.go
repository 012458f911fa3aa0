package otelinbox_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/otelinbox"
)

// New's hooks go into inbox.Config.Hooks (and PrunerConfig.Hooks,
// outbox.Config.Hooks, outbox.RelayConfig.Hooks). Here the inbox's calls
// are made by hand, to show what they record without a database: OnStart
// before the claim, the outcome hook after the COMMIT.
func Example() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	hooks, err := otelinbox.New(&otelinbox.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		panic(err)
	}
	// In a program: inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", Hooks: []inbox.Hook{hooks}}).

	// A message whose producer was traced: its headers carry traceparent.
	producer := sdktrace.NewTracerProvider().Tracer("shop")
	pctx, span := producer.Start(context.Background(), "checkout")
	headers := map[string]string{}
	propagation.TraceContext{}.Inject(pctx, propagation.MapCarrier(headers))
	span.End()
	msg := &inbox.Message{ID: "payment-1", Subject: "payments", System: "nats", Headers: headers,
		Time: time.Now().Add(-time.Second)}

	ctx := hooks.OnStart(context.Background(), &inbox.Event{Consumer: "billing", Message: msg})
	hooks.OnProcessed(ctx, &inbox.Event{Consumer: "billing", Message: msg, Outcome: inbox.Outcome{Status: inbox.Processed},
		Duration: 3 * time.Millisecond, HandlerDuration: time.Millisecond})

	s := spans.Ended()[0]
	fmt.Println(s.Name(), s.SpanKind(), s.Parent().SpanID() == span.SpanContext().SpanID())
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == otelinbox.MetricMessages {
			dp := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			outcome, _ := dp.Attributes.Value(otelinbox.AttrOutcome)
			fmt.Println(m.Name, outcome.AsString(), dp.Value)
		}
	}
	// Output:
	// process payments consumer true
	// inbox.messages processed 1
}
