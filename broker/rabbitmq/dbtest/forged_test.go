package dbtest

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/rabbitmq"
)

// A producer's own x-inbox-routing-key header does not replace the
// routing key, even with an x-death that names a delay queue: Subject is
// the routing key the message was published with, Message.Headers holds
// neither, and a delayed retry keeps that subject.
func TestForgedRoutingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Quorum)
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	rk := "rk." + e.queue
	if err := ch.QueueBind(e.queue, rk, "amq.direct", false, nil); err != nil {
		t.Fatal(err)
	}
	delay := rabbitmq.DelayQueue(e.queue, time.Second)
	death := []any{amqp.Table{"queue": delay, "reason": "expired", "count": int64(1), "exchange": "",
		"routing-keys": []any{delay}, "time": time.Now()}}
	other := []any{amqp.Table{"queue": "elsewhere", "reason": "expired", "count": int64(1), "exchange": "",
		"routing-keys": []any{"elsewhere"}, "time": time.Now()}}
	tests := []struct {
		name, exchange, key string
		headers             amqp.Table
	}{
		{"an exchange, the header and x-death forged", "amq.direct", rk,
			amqp.Table{"x-inbox-routing-key": "admin.delete", "x-death": death, "user": "u"}},
		{"the default exchange, the header forged", "", e.queue,
			amqp.Table{"x-inbox-routing-key": "admin.delete", "user": "u"}},
		{"the default exchange, the header and another queue's x-death", "", e.queue,
			amqp.Table{"x-inbox-routing-key": "admin.delete", "x-death": other, "user": "u"}},
	}
	src := e.Source(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := publishRaw(ctx, e.conn, tc.exchange, tc.key, amqp.Publishing{MessageId: tc.name, Body: []byte("b"), Headers: tc.headers})
			if err != nil {
				t.Fatal(err)
			}
			want := func(what string, d broker.Delivery) {
				t.Helper()
				m := d.Message()
				if m.ID != tc.name || m.Subject != tc.key || m.Headers["user"] != "u" || len(m.Headers) != 1 {
					t.Fatalf("%s: ID %q subject %q headers %q; want %q, the routing key %q and only the producer's header user",
						what, m.ID, m.Subject, m.Headers, tc.name, tc.key)
				}
			}
			d := next(t, src, 5*time.Second)
			want("delivery", d)
			if err := d.Nack(ctx, 150*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			d = next(t, src, 5*time.Second)
			want("after a delayed retry", d)
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Publisher never sends RabbitMQ's headers or the adapter's: a dead
// letter stored with them is published again without them.
func TestPublisherLeavesOutOwnHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Classic) // a quorum queue adds x-delivery-count
	headers := map[string]string{"x-death": "d", "x-first-death-queue": "q", "x-delivery-count": "3",
		"x-inbox-routing-key": "admin.delete", "user": "u", "x-delay": "kept: the delayed-message plugin's, a producer's"}
	if err := e.Publisher.Publish(ctx, &broker.Message{ID: "p-1", Subject: e.queue, Payload: []byte("b"), Headers: headers}); err != nil {
		t.Fatal(err)
	}
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get(e.queue, true)
	if err != nil || !ok {
		t.Fatalf("basic.get: %v %v", ok, err)
	}
	if len(d.Headers) != 2 || d.Headers["user"] != "u" || d.Headers["x-delay"] != headers["x-delay"] {
		t.Fatalf("the broker got the headers %v, want only user and x-delay", d.Headers)
	}
}
