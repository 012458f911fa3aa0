package otelinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/outbox"
)

// startNATS runs a JetStream server in the test process.
func startNATS(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// One trace runs from the writer's span through the relay's send span to
// the consumer's process span: outbox Write in a traced transaction,
// RelayOnce to NATS JetStream, Consume.
func TestTraceProducerRelayConsumer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := startNATS(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	tm := newTelemetry(t)
	counts := &inbox.Counts{}
	ib, db, d := openInbox(t, inbox.Config{Consumer: "billing", Hooks: []inbox.Hook{tm.hooks, counts}})

	// The producer: a traced request writes to the outbox.
	ob, err := outbox.New(ctx, d, &outbox.Config{Hooks: []outbox.Hook{tm.hooks}})
	if err != nil {
		t.Fatal(err)
	}
	reqCtx, req := tm.tp.Tracer("shop").Start(ctx, "checkout")
	tx, err := db.BeginTx(reqCtx, nil)
	if err != nil {
		t.Fatal(err)
	}
	callerHeaders := map[string]string{"tenant": "t-1"}
	if err := ob.Write(reqCtx, tx, &outbox.Message{ID: "order-1", Destination: "orders.created", Payload: []byte("{}"), Headers: callerHeaders}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	req.End()
	if len(callerHeaders) != 1 {
		t.Fatalf("Write changed the caller's headers: %v", callerHeaders)
	}

	// The relay publishes it.
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(ctx, d, &outbox.RelayConfig{Publish: outbox.ToBroker(pub), Hooks: []outbox.Hook{tm.hooks}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := relay.RelayOnce(ctx); err != nil || res.Published != 1 {
		t.Fatalf("RelayOnce: %+v %v, want 1 published", res, err)
	}

	// The consumer processes it.
	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: "ORDERS", Durable: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	var seen *inbox.Message
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- inbox.Consume(cctx, ib, src, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			seen = m
			return write(ctx, tx, m)
		}, &inbox.ConsumerConfig{Workers: 1})
	}()
	for counts.Processed.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if counts.Processed.Load() != 1 {
		t.Fatalf("%v; want the message processed", counts)
	}
	if seen.Headers["tenant"] != "t-1" || seen.Headers["traceparent"] == "" {
		t.Fatalf("the consumer got headers %v, want tenant and traceparent", seen.Headers)
	}

	byKind := map[trace.SpanKind][]sdktrace.ReadOnlySpan{}
	for _, s := range tm.spans.Ended() {
		byKind[s.SpanKind()] = append(byKind[s.SpanKind()], s)
	}
	send, process := byKind[trace.SpanKindProducer], byKind[trace.SpanKindConsumer]
	if len(send) != 1 || len(process) != 1 {
		t.Fatalf("%d producer and %d consumer spans, want 1 each", len(send), len(process))
	}
	trace0 := req.SpanContext().TraceID()
	switch {
	case send[0].Name() != "send orders.created" || process[0].Name() != "process orders.created":
		t.Errorf("spans %q and %q, want %q and %q", send[0].Name(), process[0].Name(), "send orders.created", "process orders.created")
	case send[0].SpanContext().TraceID() != trace0 || process[0].SpanContext().TraceID() != trace0:
		t.Errorf("traces %v and %v, want the writer's %v", send[0].SpanContext().TraceID(), process[0].SpanContext().TraceID(), trace0)
	case send[0].Parent().SpanID() != req.SpanContext().SpanID():
		t.Errorf("the send span's parent %v, want the writer's span %v", send[0].Parent().SpanID(), req.SpanContext().SpanID())
	case process[0].Parent().SpanID() != send[0].SpanContext().SpanID():
		t.Errorf("the process span's parent %v, want the send span %v", process[0].Parent().SpanID(), send[0].SpanContext().SpanID())
	}
	if v, _ := attrSet(process[0]).Value("messaging.system"); v.AsString() != "nats" {
		t.Errorf("the process span's messaging.system %q, want nats", v.AsString())
	}
	if n, _, least := tm.histogram(t, "inbox.end_to_end.duration"); n != 1 || least < 0 {
		t.Errorf("end-to-end duration: %d recorded (least %v), want 1 from the JetStream timestamp", n, least)
	}
}
