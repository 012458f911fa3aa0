package brokertest

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// A message's headers, published again as a replay or a relay does,
// arrive as they were. With Features.OwnHeaders, a message that came with
// the broker's own headers (Env.OwnHeaders, sent by Env.PublishRaw) is
// delivered without them, with its true subject and the producer's
// headers; and a Publish of them (a dead letter stored by an earlier
// release) succeeds without sending them.
func testOwnHeaders(t *testing.T, h Harness) {
	env := h.Open(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	src := env.Source(t)
	next := func(wantID string) *broker.Message {
		t.Helper()
		d, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("delivery of %s: %v", wantID, err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		m := d.Message()
		if m.ID != wantID || m.Subject != env.Subject {
			t.Fatalf("delivered ID %q subject %q, want %q %q", m.ID, m.Subject, wantID, env.Subject)
		}
		return m
	}
	user := map[string]string{"User-Header": "kept", "lower": "v"}
	publish := func(id string, headers map[string]string) {
		t.Helper()
		err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Type: "test", Payload: []byte(id), Headers: headers})
		if err != nil {
			t.Fatalf("publish %s with headers %q: %v", id, headers, err)
		}
	}

	publish("own-1", user)
	first := next("own-1")
	publish("own-2", first.Headers) // as a replay of its dead letter, under another ID (JetStream drops the same)
	want := maps.Clone(first.Headers)
	for k, v := range want {
		if v == first.ID {
			want[k] = "own-2" // the adapter's header of the ID (Kafka's, SQS's), set from Message.ID
		}
	}
	if again := next("own-2"); !maps.Equal(again.Headers, want) {
		t.Errorf("headers published again arrived as %q, want them as they first came, %q", again.Headers, want)
	}
	if !h.Features.OwnHeaders {
		t.Skip("Features.OwnHeaders is false: every header the broker delivers is the producer's")
	}
	if len(env.OwnHeaders) == 0 || env.PublishRaw == nil {
		t.Fatal("Features.OwnHeaders without Env.OwnHeaders and Env.PublishRaw")
	}
	own := func(what string, m *broker.Message) {
		t.Helper()
		for k := range m.Headers {
			for o := range env.OwnHeaders {
				if strings.EqualFold(k, o) {
					t.Errorf("%s: the broker's own header %q reached Message.Headers (%q)", what, k, m.Headers)
				}
			}
		}
		for k, v := range user {
			if m.Headers[k] != v {
				t.Errorf("%s: the producer's header %q is %q, want %q (headers %q)", what, k, m.Headers[k], v, m.Headers)
			}
		}
	}
	raw := maps.Clone(user)
	maps.Copy(raw, env.OwnHeaders)
	if err := env.PublishRaw(ctx, "own-3", raw); err != nil {
		t.Fatalf("PublishRaw: %v", err)
	}
	own("a message that came with the broker's own headers", next("own-3"))
	publish("own-4", raw) // a dead letter stored with them
	own("a Publish of the broker's own headers", next("own-4"))
}
