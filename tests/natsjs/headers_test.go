package natsjs_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
)

// JetStream matches its header names case-sensitively: "nats-rollup" on
// a stream that allows rollups rolls nothing up, and a user's headers
// named nats-… or NATS-… round-trip. Nats-Rollup itself does roll up,
// so the stream would show one.
func TestHeaderNamesCaseSensitive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	name := newStream(t, js, jetstream.StreamConfig{AllowRollup: true, Storage: jetstream.FileStorage})
	subject := name + ".a"
	stored := func(want uint64, after string) {
		t.Helper()
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Fatalf("after %s the stream holds %d messages, want %d", after, info.State.Msgs, want)
		}
	}
	if _, err := js.Publish(ctx, subject, []byte("first")); err != nil {
		t.Fatal(err)
	}
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"nats-rollup": "sub", "nats-trace": "t", "NATS-EXPECTED-LAST-SEQUENCE": "999"}
	if err := pub.Publish(ctx, &broker.Message{ID: "lower", Subject: subject, Headers: headers}); err != nil {
		t.Fatalf("publish with the headers %q: %v", headers, err)
	}
	stored(2, "a publish with nats-rollup")

	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "c"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, id := range []string{"", "lower"} {
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := src.Next(nctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if m := d.Message(); m.ID != id || (id != "" && !maps.Equal(m.Headers, headers)) {
			t.Fatalf("received %q with the headers %q; want %q with %q", m.ID, m.Headers, id, headers)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}

	m := &nats.Msg{Subject: subject, Data: []byte("rollup"), Header: nats.Header{"Nats-Rollup": {"sub"}}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	stored(1, "a publish with Nats-Rollup")
}
