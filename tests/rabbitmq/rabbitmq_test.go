// Package rabbitmq_test holds the tests of package rabbitmq that need a database
// (broker/brokertest's fixture, on SQLite; its benchmarks, on PostgreSQL).
// They live apart from the adapter so that go mod tidy in a program that
// imports the adapter does not load them, and so downloads no database
// driver for them.
package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
)

// connect connects to the test broker, skipping or failing tb when it is
// down; the connection is closed when tb ends.
func connect(tb testing.TB) *amqp.Connection {
	tb.Helper()
	conn, err := amqp.DialConfig(testenv.AMQPURL(), amqp.Config{
		Dial:       amqp.DefaultDial(2 * time.Second),
		Properties: amqp.Table{"connection_name": "inbox test " + tb.Name()},
	})
	if err != nil {
		testenv.Unavailable(tb, "RabbitMQ at "+testenv.AMQPURL(), err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// env is a fresh queue, deleted with its delay queues when the test ends.
type env struct {
	*brokertest.Env
	conn  *amqp.Connection
	queue string
	cfg   rabbitmq.Config
}

// bindDirect opens a channel on conn and binds the env's queue to
// amq.direct with the routing key "rk." + queue, which it returns.
func (e *env) bindDirect(tb testing.TB, conn *amqp.Connection) (*amqp.Channel, string) {
	tb.Helper()
	ch, err := conn.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	rk := "rk." + e.queue
	if err := ch.QueueBind(e.queue, rk, "amq.direct", false, nil); err != nil {
		tb.Fatal(err)
	}
	return ch, rk
}

func open(tb testing.TB, qt rabbitmq.QueueType) *env {
	tb.Helper()
	conn := connect(tb)
	queue := testenv.Name("inboxtest_")
	cfg := rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue, QueueType: qt, ConnectionName: "inbox test " + queue}
	tb.Cleanup(func() { // after the sources' cleanups, which come later
		for _, q := range append([]string{queue}, delayQueues(queue)...) {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
	})
	if err := rabbitmq.Declare(context.Background(), &cfg); err != nil {
		tb.Fatal(err)
	}
	pub, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{
		URL: testenv.AMQPURL(), ConnectionName: "inbox test publisher " + queue,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pub.Close() })
	e := &env{conn: conn, queue: queue, cfg: cfg}
	source := func(tb testing.TB, prefetch int) broker.Source {
		c := cfg
		c.Prefetch = prefetch
		src, err := rabbitmq.NewSource(context.Background(), &c)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = src.Close() })
		return src
	}
	e.Env = &brokertest.Env{
		Source:         func(tb testing.TB) broker.Source { return source(tb, 0) },
		PrefetchSource: source,
		Publisher:      pub,
		Subject:        queue,
		PublishNoID: func(ctx context.Context, payload []byte) error {
			return publishRaw(ctx, conn, "", queue, amqp.Publishing{Body: payload})
		},
		// What RabbitMQ's dead-lettering adds, the quorum queue's count and
		// the delay queues' routing key: forged by a producer here.
		OwnHeaders: map[string]string{"x-death": "forged", "x-first-death-queue": queue, "x-last-death-reason": "expired",
			"x-delivery-count": "7", "x-inbox-routing-key": "forged.subject"},
		PublishRaw: func(ctx context.Context, id string, headers map[string]string) error {
			table := amqp.Table{}
			for k, v := range headers {
				table[k] = v
			}
			return publishRaw(ctx, conn, "", queue, amqp.Publishing{MessageId: id, Body: []byte(id), Headers: table})
		},
		Nowhere: queue + "_nowhere", // the default exchange routes it to no queue
		// AMQP's header names are short strings, of up to 255 bytes.
		BadHeaders: []map[string]string{{strings.Repeat("k", 256): "v"}},
	}
	return e
}

// publishRaw publishes p, persistent, with conn's own channel, and waits
// for the broker's confirm.
func publishRaw(ctx context.Context, conn *amqp.Connection, exchange, key string, p amqp.Publishing) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	p.DeliveryMode = amqp.Persistent
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, p)
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || ok {
		return err
	}
	select { // the broker's reason, when it closed the channel
	case e := <-closed:
		if e != nil {
			return e
		}
	case <-time.After(time.Second):
	}
	return errors.New("publish not confirmed")
}

func delayQueues(queue string) []string {
	var names []string
	for _, b := range rabbitmq.DefaultDelayBuckets {
		names = append(names, rabbitmq.DelayQueue(queue, b))
	}
	return names
}

// features: HeaderLimits and OwnHeaders. An unacked delivery comes back only when
// its channel closes (RabbitMQ requeues it), not after an AckWait:
// consumer_timeout closes the whole channel, and AMQP has nothing that
// would extend it, so there is no lease. RabbitMQ only flags a
// redelivery, it does not count; it does not deduplicate, and a message
// has no key. No PayloadLimit: max_message_size is 128 MiB by default (16
// MiB from RabbitMQ 4.0), set only in the server's configuration, too
// large to send in a test.
var features = brokertest.Features{HeaderLimits: true, PublishTime: true, OwnHeaders: true}

func TestBroker(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, _ time.Duration) *brokertest.Env {
		return open(tb, rabbitmq.Quorum).Env
	}})
}

func TestBrokerClassic(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, _ time.Duration) *brokertest.Env {
		return open(tb, rabbitmq.Classic).Env
	}})
}

func BenchmarkEndToEnd(b *testing.B) {
	brokertest.Bench(b, brokertest.Harness{Open: func(tb testing.TB, _ time.Duration) *brokertest.Env {
		return open(tb, rabbitmq.Quorum).Env
	}})
}

func BenchmarkPublish(b *testing.B) {
	brokertest.BenchPublish(b, brokertest.Harness{Open: func(tb testing.TB, _ time.Duration) *brokertest.Env {
		return open(tb, rabbitmq.Quorum).Env
	}})
}

// The queue's message TTL, when its declaration sets one, is the
// redelivery window; without one RabbitMQ keeps a message until it is
// acked: 0. Prefetch is Config.Prefetch (here the default).
func TestRedeliveryWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connect(t)
	for _, tc := range []struct {
		args amqp.Table
		want time.Duration
	}{
		{nil, 0},
		{amqp.Table{"x-message-ttl": int64(30 * 24 * time.Hour / time.Millisecond)}, 30 * 24 * time.Hour},
		{amqp.Table{"x-message-ttl": int32(60000)}, time.Minute},
	} {
		queue := testenv.Name("inboxtest_")
		cfg := rabbitmq.Config{URL: testenv.AMQPURL(), Queue: queue, QueueArgs: tc.args}
		t.Cleanup(func() {
			for _, q := range append([]string{queue}, delayQueues(queue)...) {
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete(q, false, false, false)
					_ = ch.Close()
				}
			}
		})
		if err := rabbitmq.Declare(ctx, &cfg); err != nil {
			t.Fatal(err)
		}
		src, err := rabbitmq.NewSource(ctx, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.RedeliveryWindow(ctx)
		prefetch := src.Prefetch()
		_ = src.Close()
		if err != nil || got != tc.want {
			t.Fatalf("queue arguments %v: window %v, %v; want %v", tc.args, got, err, tc.want)
		}
		if prefetch != rabbitmq.DefaultPrefetch {
			t.Fatalf("Prefetch() = %d, want DefaultPrefetch (%d)", prefetch, rabbitmq.DefaultPrefetch)
		}
	}
}
