package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
)

// A publish that JetStream drops as a duplicate is nil by default (an
// outbox relay's retry), and a *DuplicateError naming the stream's window
// with RefuseDuplicates; after the window the same ID is stored again.
// RedeliveryWindow reads the stream's MaxAge without a consumer.
func TestPublisherRefusesDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	const window = 500 * time.Millisecond
	name := newStream(t, js, jetstream.StreamConfig{Duplicates: window, MaxAge: time.Hour})
	lenient, _ := natsjs.NewPublisher(js, nil)
	strict, _ := natsjs.NewPublisher(js, &natsjs.PublisherConfig{RefuseDuplicates: true})
	m := &broker.Message{ID: "dup-1", Subject: name + ".x", Payload: []byte("p")}
	if err := strict.Publish(ctx, m); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	if err := lenient.Publish(ctx, m); err != nil {
		t.Fatalf("duplicate without RefuseDuplicates: %v, want nil", err)
	}
	err := strict.Publish(ctx, m)
	var de *natsjs.DuplicateError
	if !errors.Is(err, natsjs.ErrDuplicate) || !errors.Is(err, broker.ErrDuplicate) || !errors.As(err, &de) || de.Window != window || de.Stream != name || de.ID != "dup-1" {
		t.Fatalf("duplicate with RefuseDuplicates: %v (%+v), want a DuplicateError with the window %v", err, de, window)
	}
	time.Sleep(window + 200*time.Millisecond)
	if err := strict.Publish(ctx, m); err != nil {
		t.Fatalf("publish after the window: %v, want it stored", err)
	}
	st, _ := js.Stream(ctx, name)
	info, _ := st.Info(ctx)
	if info.State.Msgs != 2 {
		t.Fatalf("%d messages stored, want 2 (the first and the one after the window)", info.State.Msgs)
	}
	if w, err := natsjs.RedeliveryWindow(ctx, js, name); err != nil || w != time.Hour {
		t.Fatalf("RedeliveryWindow: %v, %v; want 1h", w, err)
	}
}
