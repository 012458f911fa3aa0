package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
)

// A producer's own x-inbox-routing-key header does not replace the
// routing key, even with an x-death that names a delay queue: Subject is
// the routing key the message was published with, Message.Headers holds
// neither, and a delayed retry keeps that subject.
func TestForgedRoutingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Quorum)
	_, rk := e.bindDirect(t, e.conn)
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
// letter stored with them is published again without them. A header named
// user_id stays a header: it does not set the user_id property.
func TestPublisherLeavesOutOwnHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Classic) // a quorum queue adds x-delivery-count
	headers := map[string]string{"x-death": "d", "x-first-death-queue": "q", "x-delivery-count": "3",
		"x-inbox-routing-key": "admin.delete", "user": "u", "x-delay": "kept: the delayed-message plugin's, a producer's",
		"user_id": "admin"}
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
	if len(d.Headers) != 3 || d.Headers["user"] != "u" || d.Headers["x-delay"] != headers["x-delay"] || d.Headers["user_id"] != "admin" {
		t.Fatalf("the broker got the headers %v, want only user, x-delay and user_id", d.Headers)
	}
	if d.UserId != "" {
		t.Fatalf("the broker got the user_id property %q, want none", d.UserId)
	}
}

// A producer logged in as a user of its own cannot fake a delayed retry's
// routing key, on either queue type: not with a fake x-death through the
// default exchange, nor by writing into a delay queue (as a copy made
// before user_id was set would arrive), and the broker refuses its
// publish with the consumer's user as user_id. A genuine delayed retry
// keeps its routing key.
func TestForgedRetryAnotherUser(t *testing.T) {
	t.Parallel()
	producerURL := addUser(t)
	for _, qt := range []rabbitmq.QueueType{rabbitmq.Quorum, rabbitmq.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := open(t, qt)
			prod := dialURL(t, producerURL)
			_, rk := e.bindDirect(t, prod)
			src := e.Source(t)
			want := func(what, id, subject string) broker.Delivery {
				t.Helper()
				d := next(t, src, 5*time.Second)
				if m := d.Message(); m.ID != id || m.Subject != subject {
					t.Fatalf("%s: ID %q subject %q; want %q with subject %q", what, m.ID, m.Subject, id, subject)
				}
				return d
			}

			// A genuine retry, which also declares the 100 ms delay queue.
			if err := publishRaw(ctx, prod, "amq.direct", rk, amqp.Publishing{MessageId: "genuine", Body: []byte("b")}); err != nil {
				t.Fatal(err)
			}
			d := want("delivery", "genuine", rk)
			for i := range 2 {
				if err := d.Nack(ctx, 100*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				d = want(fmt.Sprintf("delayed retry %d", i+1), "genuine", rk)
			}
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}

			delay := rabbitmq.DelayQueue(e.queue, 100*time.Millisecond)
			death := []any{amqp.Table{"queue": delay, "reason": "expired", "count": int64(1), "exchange": "",
				"routing-keys": []any{delay}, "time": time.Now()}}
			forged := []struct {
				name, key string
				headers   amqp.Table
			}{
				{"default exchange, fake x-death", e.queue, amqp.Table{"x-inbox-routing-key": "admin.delete", "x-death": death}},
				{"into the delay queue", delay, amqp.Table{"x-inbox-routing-key": "admin.delete"}},
			}
			for _, f := range forged {
				err := publishRaw(ctx, prod, "", f.key, amqp.Publishing{MessageId: f.name, Body: []byte("b"), Headers: f.headers})
				if err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				if err := want(f.name, f.name, e.queue).Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}

			uri, err := amqp.ParseURI(testenv.AMQPURL())
			if err != nil {
				t.Fatal(err)
			}
			err = publishRaw(ctx, prod, "", e.queue, amqp.Publishing{MessageId: "impersonated", UserId: uri.Username, Body: []byte("b"),
				Headers: amqp.Table{"x-inbox-routing-key": "admin.delete", "x-death": death}})
			if ae := (*amqp.Error)(nil); !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
				t.Fatalf("publish with the consumer's user_id %q as another user: %v; want the broker's PRECONDITION_FAILED", uri.Username, err)
			}
		})
	}
}

// addUser adds a RabbitMQ user with every permission on the test vhost,
// deleted when t ends, and returns the test URL logged in as that user.
func addUser(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		testenv.Unavailable(t, "rabbitmqctl", err)
	}
	uri, err := amqp.ParseURI(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	user, password := testenv.Name("inboxtest_"), testenv.Name("")
	ctl := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v: %s", args[0], err, out)
		}
	}
	ctl("add_user", user, password)
	t.Cleanup(func() { ctl("delete_user", user) })
	ctl("set_permissions", "-p", uri.Vhost, user, ".*", ".*", ".*")
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// dialURL connects to url; the connection is closed when t ends.
func dialURL(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second),
		Properties: amqp.Table{"connection_name": "inbox test " + t.Name()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
