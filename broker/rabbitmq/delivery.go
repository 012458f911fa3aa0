package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
)

func (s *Source) delivery(sess *session, d amqp.Delivery) *delivery {
	msg := &broker.Message{ID: d.MessageId, Subject: d.RoutingKey, Type: d.Type, Payload: d.Body,
		Time: d.Timestamp, System: broker.SystemRabbitMQ} // the publisher's, zero when it set none
	if rk, ok := s.retried(sess, &d); ok {
		msg.Subject = rk
	}
	if len(d.Headers) > 0 {
		msg.Headers = make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			if k == "x-delivery-count" {
				if n, ok := toInt(v); ok {
					msg.Deliveries = n + 1
				}
			}
			if !OwnHeader(k) {
				msg.Headers[k] = render(v)
			}
		}
	}
	return &delivery{s: s, sess: sess, d: d, msg: msg}
}

// headerRoutingKey carries a delayed copy's original routing key, which
// dead-lettering replaces by the queue's name.
const headerRoutingKey = "x-inbox-routing-key"

// OwnHeader tells whether an AMQP header is RabbitMQ's own or the
// adapter's, rather than the producer's. They are these.
//   - What dead-lettering adds: x-death, x-first-death-* and
//     x-last-death-*.
//   - A quorum queue's x-delivery-count.
//   - What federation and shovels add: x-received-from, x-shovelled and
//     x-shovelled-timestamp.
//   - x-inbox-routing-key, with which a delayed retry keeps its routing key.
//
// Source leaves them out of Message.Headers, and Publisher never sends
// them. A producer thus cannot fake a retry's routing key. A message
// published again carries no history that is not its own.
func OwnHeader(name string) bool {
	switch name {
	case "x-death", "x-delivery-count", "x-received-from", "x-shovelled", "x-shovelled-timestamp", headerRoutingKey:
		return true
	}
	return strings.HasPrefix(name, "x-first-death-") || strings.HasPrefix(name, "x-last-death-")
}

// retried returns the original routing key of a delayed retry, and
// whether d is one: RabbitMQ dead-lettered it (reason expired) from one of
// the Source's delay queues back to the queue, through the default
// exchange with the queue's name as routing key, as declareDelay set them
// up, and its user_id is the Source's own user. Only then is
// x-inbox-routing-key the Source's own: on any other message a producer
// set it. A producer can fake x-death, and write into a delay queue, but
// RabbitMQ refuses a user_id other than the publisher's login.
func (s *Source) retried(sess *session, d *amqp.Delivery) (string, bool) {
	rk, ok := d.Headers[headerRoutingKey].(string)
	if !ok || sess.user == "" || d.UserId != sess.user || d.Exchange != "" || d.RoutingKey != s.cfg.Queue {
		return "", false
	}
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) == 0 {
		return "", false
	}
	last, _ := deaths[0].(amqp.Table) // the latest first
	queue, _ := last["queue"].(string)
	if reason, _ := last["reason"].(string); reason != "expired" || !slices.Contains(s.Queues()[1:], queue) {
		return "", false
	}
	return rk, true
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		return int(n), true
	}
	return 0, false
}

// render renders an AMQP table value as a string.
func render(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", x.Value, x.Scale)
	}
	if n, ok := toInt(v); ok {
		return strconv.Itoa(n)
	}
	return fmt.Sprint(v)
}

type delivery struct {
	s    *Source
	sess *session
	d    amqp.Delivery
	msg  *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack acks the delivery. AMQP does not confirm acks.
func (d *delivery) Ack(context.Context) error {
	if d.sess.ch.IsClosed() {
		return ErrChannelClosed
	}
	return d.d.Ack(false)
}

// The backoff between Nack's attempts to publish a delayed copy, and how
// long at most it holds the delivery meanwhile: well below RabbitMQ's
// consumer_timeout (30 min by default), which would close the channel.
const (
	delayRetryFirst = 10 * time.Millisecond
	delayRetryMax   = time.Second
	delayHoldMax    = time.Minute
)

// Nack retries the message after delay through a delay queue (see the
// package comment), or at once when delay is 0.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if d.sess.ch.IsClosed() {
		return ErrChannelClosed
	}
	if delay <= 0 {
		return d.d.Nack(false, true)
	}
	start := time.Now()
	due := start.Add(min(delay, delayHoldMax))
	b := d.s.bucket(delay)
	backoff := delayRetryFirst
	for attempt := 1; ; attempt++ {
		err := d.s.declareDelay(ctx, d.sess, b)
		var pub *confirmer
		if err == nil {
			pub, err = d.sess.confirmer()
		}
		if err == nil {
			err = pub.publish(ctx, "", d.s.delayQueue(b), d.delayed())
		}
		if err == nil {
			// The copy is confirmed: only now may the original go.
			return d.d.Ack(false)
		}
		if errors.Is(err, ErrUnroutable) {
			d.s.forgetDelay(b) // declare it again
		}
		if d.sess.ch.IsClosed() {
			return fmt.Errorf("rabbitmq: nack %q: %w", d.msg.ID, err)
		}
		// A quorum delay queue still starting refuses publishes; so may one
		// electing a leader. Try again while the delivery is held, until the
		// retry is due or ctx ends; then requeue it (an AMQP nack needs no
		// ctx): it has waited its delay, or as long as ctx allowed.
		wait := min(backoff, time.Until(due))
		if wait > 0 && ctx.Err() == nil {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				backoff = min(backoff*2, delayRetryMax)
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		d.s.cfg.Logger.Warn("rabbitmq: delayed retry failed; requeued after holding the message",
			"queue", d.s.cfg.Queue, "id", d.msg.ID, "delay", delay, "held", time.Since(start).Round(time.Millisecond),
			"attempts", attempt, "error", err)
		return d.d.Nack(false, true)
	}
}

// delayed returns the copy of the message for a delay queue.
func (d *delivery) delayed() amqp.Publishing {
	headers := amqp.Table{headerRoutingKey: d.msg.Subject}
	for k, v := range d.d.Headers {
		if !OwnHeader(k) {
			headers[k] = v
		}
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.d.ContentType,
		ContentEncoding: d.d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.d.Priority,
		CorrelationId:   d.d.CorrelationId,
		ReplyTo:         d.d.ReplyTo,
		MessageId:       d.d.MessageId,
		Timestamp:       d.d.Timestamp,
		Type:            d.d.Type,
		AppId:           d.d.AppId,
		// Not Expiration: the delay queue's TTL applies. UserId marks the
		// copy as the Source's: the broker allows only the login's name.
		UserId: d.sess.user,
		Body:   d.d.Body,
	}
}

// Term rejects the message without requeue: RabbitMQ dead-letters it to
// the queue's dead-letter exchange, or drops it. reason is logged, since
// AMQP cannot carry it.
func (d *delivery) Term(_ context.Context, reason string) error {
	if d.sess.ch.IsClosed() {
		return ErrChannelClosed
	}
	d.s.cfg.Logger.Warn("rabbitmq: message terminated", "queue", d.s.cfg.Queue, "id", d.msg.ID, "reason", reason)
	return d.d.Reject(false)
}

// InProgress does nothing: AMQP deliveries do not expire while their
// channel lives (up to consumer_timeout; see the package comment).
func (d *delivery) InProgress(context.Context) error { return nil }
