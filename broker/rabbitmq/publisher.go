package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
)

// PublisherConfig configures a Publisher. Zero values mean the defaults.
type PublisherConfig struct {
	// URL is the broker's AMQP URI. Default DefaultURL.
	URL string
	// URLs are the AMQP URIs of a cluster's nodes, instead of URL. The
	// Publisher connects to the first that answers. After losing a
	// connection, it tries the next URL first, and the lost node's last.
	// Set URL or URLs, not both. Default none.
	URLs []string
	// AMQP configures the connection, such as TLS, heartbeat, vhost and
	// properties. Its Recovery must be nil.
	AMQP amqp.Config
	// ConnectionName is the client-provided connection name. Default
	// "inbox publisher".
	ConnectionName string
	// Exchange receives the messages, with Message.Subject as the routing key.
	// Default "", the default exchange, which routes to the queue named by the
	// routing key.
	Exchange string
}

// Publisher publishes persistent messages with publisher confirms, the
// mandatory flag and the message's ID as message_id. It reconnects on the
// next Publish after its connection was lost. After a negative confirm it
// publishes on a new channel, as the package doc tells under Clusters. It
// is safe for concurrent use.
type Publisher struct {
	cfg  PublisherConfig
	ends *endpoints
	mu   sync.Mutex
	conn *amqp.Connection
	pub  *confirmer
	done bool
}

var _ broker.Publisher = (*Publisher)(nil)

// NewPublisher connects to the broker.
func NewPublisher(ctx context.Context, cfg *PublisherConfig) (*Publisher, error) {
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	urls, err := urlList("PublisherConfig", c.URL, c.URLs)
	if err != nil {
		return nil, err
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "inbox publisher"
	}
	if c.AMQP.Recovery != nil {
		return nil, fmt.Errorf("%w: PublisherConfig.AMQP.Recovery must be nil", ErrInvalidConfig)
	}
	p := &Publisher{cfg: c, ends: newEndpoints(urls)}
	if _, err := p.current(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// current returns the live confirm channel, reconnecting when it is gone.
func (p *Publisher) current(ctx context.Context) (*confirmer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, ErrPublisherClosed
	}
	if p.pub != nil && !p.pub.ch.IsClosed() {
		return p.pub, nil
	}
	if p.conn != nil && !p.conn.IsClosed() { // a channel retired after a negative confirm
		if pub, err := newConfirmer(p.conn); err == nil {
			p.pub = pub
			return pub, nil
		}
	}
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn, p.pub = nil, nil
	}
	conn, err := p.ends.dial(ctx, p.cfg.AMQP, p.cfg.ConnectionName)
	if err != nil {
		return nil, err
	}
	pub, err := newConfirmer(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rabbitmq: publisher channel: %w", err)
	}
	p.conn, p.pub = conn, pub
	return pub, nil
}

// Publish publishes msg to the Exchange with msg.Subject as routing key. It
// returns once the broker confirmed it.
//   - It returns [ErrUnroutable] when no queue took the message.
//   - It returns [ErrNotConfirmed] when the broker refused it, or the
//     connection broke first. For a missing exchange, the error says so.
//     Publish again, since a duplicate is harmless to the inbox.
//   - msg.ID is required. An ID, type or header name over AMQP's 255 bytes
//     is an error wrapping broker.ErrInvalidMessage.
//
// msg.Key is ignored, since AMQP has no partition key. Headers of
// RabbitMQ's own or the adapter's are left out, as [OwnHeader] tells.
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rabbitmq: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	if err := check(msg); err != nil {
		return fmt.Errorf("rabbitmq: publish %q to %q: %w: %w", msg.ID, msg.Subject, broker.ErrInvalidMessage, err)
	}
	pub, err := p.current(ctx)
	if err != nil {
		return err
	}
	am := amqp.Publishing{
		MessageId:    msg.ID,
		Type:         msg.Type,
		Body:         msg.Payload,
		DeliveryMode: amqp.Persistent,
		Timestamp:    time.Now(),
	}
	if len(msg.Headers) > 0 {
		am.Headers = make(amqp.Table, len(msg.Headers))
		for k, v := range msg.Headers {
			if !OwnHeader(k) {
				am.Headers[k] = v
			}
		}
	}
	if err := pub.publish(ctx, p.cfg.Exchange, msg.Subject, am); err != nil {
		return fmt.Errorf("rabbitmq: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	return nil
}

// maxShortstr is the length limit of an AMQP short string: message_id,
// type, a header's name, a routing key.
const maxShortstr = 255

// check refuses what amqp091-go cannot encode: it would fail the frame
// and close the whole connection, failing the other publishes in flight.
func check(msg *broker.Message) error {
	if msg.ID == "" {
		return errors.New("the message has no ID")
	}
	short := func(what, s string) error {
		if len(s) > maxShortstr {
			return fmt.Errorf("%s of %d bytes: AMQP takes up to %d", what, len(s), maxShortstr)
		}
		return nil
	}
	if err := short("ID", msg.ID); err != nil {
		return err
	}
	if err := short("type", msg.Type); err != nil {
		return err
	}
	if err := short("routing key (subject)", msg.Subject); err != nil {
		return err
	}
	for k := range msg.Headers {
		if len(k) > maxShortstr {
			return short(fmt.Sprintf("header name %.40q…", k), k)
		}
	}
	return nil
}

// Close closes the connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn, p.pub = nil, nil
	return err
}
