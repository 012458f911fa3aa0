package rabbitmq

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/internal/testenv"
)

// x-inbox-routing-key counts only on a copy that came back from a delay
// queue with the Source's own user as user_id; a Source that does not know
// its user (SASL EXTERNAL) trusts none.
func TestRetried(t *testing.T) {
	t.Parallel()
	cfg, err := (&Config{Queue: "q"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &Source{cfg: cfg}
	genuine := func(change func(*amqp.Delivery)) amqp.Delivery {
		d := amqp.Delivery{UserId: "guest", Exchange: "", RoutingKey: "q", Headers: amqp.Table{
			headerRoutingKey: "rk",
			"x-death":        []any{amqp.Table{"queue": DelayQueue("q", time.Second), "reason": "expired"}},
		}}
		if change != nil {
			change(&d)
		}
		return d
	}
	tests := []struct {
		name string
		user string // the Source's
		d    amqp.Delivery
		want bool
	}{
		{"genuine", "guest", genuine(nil), true},
		{"no user_id", "guest", genuine(func(d *amqp.Delivery) { d.UserId = "" }), false},
		{"another user_id", "guest", genuine(func(d *amqp.Delivery) { d.UserId = "mallory" }), false},
		{"the Source's user unknown", "", genuine(func(d *amqp.Delivery) { d.UserId = "" }), false},
		{"through an exchange", "guest", genuine(func(d *amqp.Delivery) { d.Exchange = "amq.direct" }), false},
		{"another routing key", "guest", genuine(func(d *amqp.Delivery) { d.RoutingKey = "other" }), false},
		{"rejected, not expired", "guest", genuine(func(d *amqp.Delivery) {
			d.Headers["x-death"] = []any{amqp.Table{"queue": DelayQueue("q", time.Second), "reason": "rejected"}}
		}), false},
		{"no x-death", "guest", genuine(func(d *amqp.Delivery) { delete(d.Headers, "x-death") }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rk, ok := s.retried(&session{user: tc.user}, &tc.d)
			if ok != tc.want || (ok && rk != "rk") {
				t.Fatalf("retried: %q %v, want %v (routing key \"rk\" when true)", rk, ok, tc.want)
			}
		})
	}
}

// userID is the login's user name when the broker takes it as user_id,
// else "": a name the broker refuses (as when an auth backend renames the
// login), or a mechanism that names no user.
func TestUserID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri, err := amqp.ParseURI(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		auth amqp.Authentication // replaces the one the connection chose
		want string
	}{
		{"the login", nil, uri.Username},
		{"AMQPLAIN", &amqp.AMQPlainAuth{Username: uri.Username}, uri.Username},
		{"a name the broker refuses", &amqp.PlainAuth{Username: "inboxtest-nobody"}, ""},
		{"EXTERNAL", &amqp.ExternalAuth{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := dial(ctx, testenv.AMQPURL(), amqp.Config{}, "inbox test "+t.Name())
			if err != nil {
				testenv.Unavailable(t, "RabbitMQ at "+testenv.AMQPURL(), err)
			}
			defer conn.Close()
			if tc.auth != nil {
				conn.Config.SASL = []amqp.Authentication{tc.auth}
			}
			if got, err := userID(ctx, conn); err != nil || got != tc.want {
				t.Fatalf("userID: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
