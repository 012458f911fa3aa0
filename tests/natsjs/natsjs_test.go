package natsjs_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/internal/testenv"
)

// connect connects to url, skipping or failing tb when NATS is down.
func connect(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(2 * time.Second)}, opts...)...)
	if err != nil {
		testenv.Unavailable(tb, "NATS at "+url, err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// openOn makes a fresh stream on js with a durable consumer name.
func openOn(tb testing.TB, js jetstream.JetStream, ackWait time.Duration) *brokertest.Env {
	tb.Helper()
	ctx := context.Background()
	name := testenv.Name("INBOXTEST_")
	subject := name + ".msgs"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		AllowRollup: true}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		tb.Fatal(err)
	}
	source := func(tb testing.TB, pull int) broker.Source {
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "consumer", AckWait: ackWait, PullBatch: pull})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { src.Close() })
		return src
	}
	return &brokertest.Env{
		Source:         func(tb testing.TB) broker.Source { return source(tb, pullBatch(tb)) },
		PrefetchSource: source,
		Publisher:      pub,
		Subject:        subject,
		PublishNoID: func(ctx context.Context, payload []byte) error {
			_, err := js.Publish(ctx, subject, payload)
			return err
		},
		// JetStream acts on these: published again by the suite, the
		// expected sequence fails the publish.
		OwnHeaders: map[string]string{"Nats-Rollup": "sub", "Nats-Expected-Stream": name, "Nats-Expected-Last-Sequence": "2"},
		PublishRaw: func(ctx context.Context, id string, headers map[string]string) error {
			m := &nats.Msg{Subject: subject, Data: []byte(id), Header: nats.Header{}}
			for k, v := range headers {
				m.Header.Set(k, v)
			}
			_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
			return err
		},
		Nowhere:    name + ".nowhere",
		MaxPayload: int(js.Conn().MaxPayload()),
		// nats.go refuses the names (vaguely); it would replace CR LF by
		// spaces and trim the padding, in silence.
		BadHeaders: []map[string]string{
			{"Colon:Name": "v"}, {"Space Name": "v"}, {"New\nLine": "v"}, {"": "v"},
			{"Forged": "a\r\nNats-Msg-Id: forged"}, {"Padded": " padded "},
		},
	}
}

// features: JetStream redelivers after AckWait, which InProgress starts
// again, and counts deliveries; it drops a re-publish within the stream's
// duplicate window (2 min by default). A message has no key. Publish
// refuses a message over the server's max_payload (1 MiB by default) and
// headers NATS cannot carry.
var features = brokertest.Features{Deliveries: true, AckWait: true, Lease: true, Dedup: true, PayloadLimit: true, HeaderLimits: true,
	PublishTime: true, OwnHeaders: true}

func TestBroker(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		_, js := connect(tb, testenv.NATSURL())
		return openOn(tb, js, ackWait)
	}})
}

func BenchmarkEndToEnd(b *testing.B) {
	brokertest.Bench(b, brokertest.Harness{Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		_, js := connect(tb, testenv.NATSURL())
		return openOn(tb, js, ackWait)
	}})
}

func BenchmarkPublish(b *testing.B) {
	brokertest.BenchPublish(b, brokertest.Harness{Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
		_, js := connect(tb, testenv.NATSURL())
		return openOn(tb, js, ackWait)
	}})
}

// A deleted consumer is a terminal error: Consume returns it instead of
// waiting for ever.
func TestConsumerDeletedEndsConsume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	env := openOn(t, js, 5*time.Second)
	stream := env.Subject[:len(env.Subject)-len(".msgs")]
	f := brokertest.NewFixture(t, inbox.Config{})
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(ctx, f.Inbox, env.Source(t), f.Write, nil) }()
	time.Sleep(300 * time.Millisecond) // consuming
	if err := js.DeleteConsumer(ctx, stream, "consumer"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, jetstream.ErrConsumerDeleted) && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("Consume returned %v, want the consumer's deletion", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Consume did not return after its consumer was deleted")
	}
}

// One filter subject works on every server: nats-server before 2.10
// refuses FilterSubjects (the list) even with one subject.
func TestOneFilterSubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	name := newStream(t, js, jetstream.StreamConfig{})
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{name + ".other", name + ".wanted"} {
		if err := pub.Publish(ctx, &broker.Message{ID: subject, Subject: subject}); err != nil {
			t.Fatal(err)
		}
	}
	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "filtered", FilterSubjects: []string{name + ".wanted"}})
	if err != nil {
		t.Fatalf("NewSource with one filter subject: %v", err)
	}
	defer src.Close()
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := src.Next(nctx)
	if err != nil || d.Message().Subject != name+".wanted" {
		t.Fatalf("received %v, %v; want the message on %s.wanted", d, err, name)
	}
}

// The stream's MaxAge is the redelivery window; Consume warns at start
// when it is longer than the inbox's retention, and notes a stream
// without a time limit.
func TestRedeliveryWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	for _, tc := range []struct {
		maxAge time.Duration
		level  string
	}{
		{30 * 24 * time.Hour, "level=WARN"},
		{0, "level=INFO"},
		{24 * time.Hour, ""},
	} {
		name := newStream(t, js, jetstream.StreamConfig{MaxAge: tc.maxAge})
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "window"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := src.RedeliveryWindow(ctx); err != nil || got != tc.maxAge {
			t.Fatalf("MaxAge %v: window %v, %v", tc.maxAge, got, err)
		}
		logs := &logtest.Buffer{}
		f := brokertest.NewFixture(t, inbox.Config{})
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_ = inbox.Consume(cctx, f.Inbox, src, f.Write, &inbox.ConsumerConfig{Logger: logs.Logger()})
		cancel()
		src.Close()
		lines := logs.Lines("the broker", "retention")
		switch {
		case tc.level == "" && len(lines) != 0:
			t.Fatalf("MaxAge %v within the retention: logged %q", tc.maxAge, lines)
		case tc.level != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.level)):
			t.Fatalf("MaxAge %v: logged %q, want one line at %s", tc.maxAge, lines, tc.level)
		}
	}
}

// pullBatch is INBOX_NATS_PULL_BATCH, for benchmarks of batch consumption
// (which wants Workers × BatchSize pulled ahead); 0, the default, unset.
func pullBatch(tb testing.TB) int {
	v := os.Getenv("INBOX_NATS_PULL_BATCH")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("INBOX_NATS_PULL_BATCH=%q: want a positive number", v)
	}
	return n
}

// Prefetch is PullBatch, at most MaxAckPending: what the client pulls
// ahead.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, js := connect(t, testenv.NATSURL())
	name := newStream(t, js, jetstream.StreamConfig{})
	for _, tc := range []struct{ pull, pending, want int }{
		{0, 0, natsjs.DefaultPullBatch},
		{400, 0, 400},
		{400, 100, 100},
	} {
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: name, Durable: "prefetch", PullBatch: tc.pull, MaxAckPending: tc.pending})
		if err != nil {
			t.Fatal(err)
		}
		got := src.Prefetch()
		src.Close()
		if got != tc.want {
			t.Fatalf("PullBatch %d, MaxAckPending %d: Prefetch() = %d, want %d", tc.pull, tc.pending, got, tc.want)
		}
	}
}

// newStream creates a stream named INBOXTEST_… with cfg, capturing the
// subjects under its name, and deletes it when the test ends.
func newStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) string {
	t.Helper()
	cfg.Name = testenv.Name("INBOXTEST_")
	cfg.Subjects = []string{cfg.Name + ".>"}
	if _, err := js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
	return cfg.Name
}
