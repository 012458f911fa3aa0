package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
	"github.com/inboxkit/inbox/internal/redact"
)

// Source is a broker.Source consuming one queue. Create it with NewSource.
type Source struct {
	cfg     Config
	ends    *endpoints
	msgs    chan *delivery
	stopped chan struct{} // closed by Close
	failed  *latch.Error  // the terminal error
	done    chan struct{} // closed when run returns
	life    context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	sess     *session // nil while reconnecting
	declared map[time.Duration]*declaration
	stopOnce sync.Once
}

var _ broker.Source = (*Source)(nil)

// session is one connection: a channel consuming the queue and a confirm
// channel for the delayed copies.
type session struct {
	conn       *amqp.Connection
	user       string // the login's user name; "" when unknown
	ch         *amqp.Channel
	pubMu      sync.Mutex
	pub        *confirmer // for the delayed copies; see confirmer
	deliveries <-chan amqp.Delivery
	connClosed chan *amqp.Error
	chClosed   chan *amqp.Error
	canceled   chan string
}

func (s *session) close() { _ = s.conn.Close() }

// confirmer returns the session's confirm channel. It opens a new one
// when the last was retired after a negative confirm.
func (s *session) confirmer() (*confirmer, error) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if !s.pub.ch.IsClosed() {
		return s.pub, nil
	}
	pub, err := newConfirmer(s.conn)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open confirm channel: %w", err)
	}
	s.pub = pub
	return pub, nil
}

// consumerTag is the Source's consumer on its channel, the only one there.
const consumerTag = "inbox"

// cancelTimeout bounds the round trips that Close waits for.
const cancelTimeout = 5 * time.Second

// stop cancels the consumer and waits for the broker's cancel-ok, then
// closes the channel, all within cancelTimeout, so that the acks sent
// before reach the queue. A quorum queue's channel holds back its
// settlements while 32 commands to the queue are in flight, and drops
// them if the channel closes meanwhile: the acked messages come back
// (rabbitmq-server issue 10327). The synchronous cancel waits for the
// queue to apply what was sent before it. The queue then tells the
// channel, which sends what it held back. Two more round trips (a
// basic.qos and the channel's close) give that notice time to arrive
// before the channel ends.
func (s *session) stop(prefetch int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.ch.Cancel(consumerTag, false) != nil {
			return
		}
		if s.ch.Qos(prefetch, 0, false) != nil {
			return
		}
		_ = s.ch.Close()
	}()
	select {
	case <-done:
	case <-time.After(cancelTimeout): // the close that follows ends it
	}
}

// NewSource connects, declares the queue and starts consuming. With
// Config.NoDeclare it does not declare the queue.
func NewSource(ctx context.Context, cfg *Config) (*Source, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	s := &Source{
		cfg: c, ends: newEndpoints(c.URLs), msgs: make(chan *delivery), stopped: make(chan struct{}), failed: latch.New(),
		done: make(chan struct{}), life: life, cancel: cancel, declared: map[time.Duration]*declaration{},
	}
	sess, err := s.open(ctx, !c.NoDeclare)
	if err != nil {
		cancel()
		return nil, err
	}
	s.sess = sess
	if sess.user == "" {
		s.cfg.Logger.Warn("rabbitmq: the connection's user name is unknown, or refused as user_id: "+
			"delayed retries arrive with the queue's name as Subject", "queue", c.Queue)
	}
	go s.run(sess)
	return s, nil
}

// userID returns the user name conn logged in with, which the broker
// takes as user_id, or "" when it is unknown: the SASL mechanism does not
// tell it (EXTERNAL: a certificate), or the broker refuses it (an auth
// backend that maps the login to another name, such as OAuth 2). A
// message published to the default exchange with no queue's name is
// dropped, so the check leaves nothing behind.
func userID(ctx context.Context, conn *amqp.Connection) (string, error) {
	if len(conn.Config.SASL) != 1 { // the mechanism it chose
		return "", nil
	}
	var user string
	switch a := conn.Config.SASL[0].(type) {
	case *amqp.PlainAuth:
		user = a.Username
	case *amqp.AMQPlainAuth:
		user = a.Username
	default:
		return "", nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return "", err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "", false, false, amqp.Publishing{UserId: user})
	if err != nil {
		return "", err
	}
	if acked, err := dc.WaitContext(ctx); err != nil || acked {
		return user, err
	}
	select {
	case e := <-closed:
		if e != nil && e.Code == amqp.PreconditionFailed {
			return "", nil // "user_id property set to … but authenticated user was …"
		}
	case <-time.After(time.Second):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return user, nil // another refusal, which the delayed copies will report
}

// Declare declares cfg's queue as NewSource would, without consuming it.
// It is for a producer that may publish before the consumer first starts.
func Declare(ctx context.Context, cfg *Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	conn, err := newEndpoints(c.URLs).dial(ctx, c.AMQP, c.ConnectionName)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, queueArgs(&c)); err != nil {
		return fmt.Errorf("rabbitmq: declare queue %q: %w", c.Queue, err)
	}
	return nil
}

// DelayQueue names queue's delay queue for a bucket, as
// "<queue>.retry.<bucket>". The bucket is written as 100ms, 2s, 5m or 1h.
func DelayQueue(queue string, bucket time.Duration) string {
	return queue + ".retry." + bucketName(bucket)
}

// Queues returns the names of the queue and of all its delay queues,
// declared or not yet. It is for monitoring and cleanup.
func (s *Source) Queues() []string {
	names := []string{s.cfg.Queue}
	for _, b := range s.cfg.DelayBuckets {
		names = append(names, s.delayQueue(b))
	}
	return names
}

func dial(ctx context.Context, url string, cfg amqp.Config, name string) (*amqp.Connection, error) {
	cfg.Properties = maps.Clone(cfg.Properties)
	if cfg.Properties == nil {
		cfg.Properties = amqp.Table{}
	}
	cfg.Properties["connection_name"] = name
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Dial == nil {
		const timeout = 10 * time.Second
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Covers the TLS and AMQP handshakes; amqp091-go clears it.
			if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		}
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		// url.Parse's error repeats the URL, password and all.
		return nil, fmt.Errorf("rabbitmq: connect: %w", redact.Error(err, url))
	}
	return conn, nil
}

// open connects and starts consuming. declare declares the queue; else the
// queue's existence is checked, so that a deleted queue is noticed rather
// than re-created.
func (s *Source) open(ctx context.Context, declare bool) (_ *session, err error) {
	conn, err := s.ends.dial(ctx, s.cfg.AMQP, s.cfg.ConnectionName)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = conn.Close()
		}
	}()
	// A failed declaration closes its channel: use one of its own.
	topo, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if declare {
		_, err = topo.QueueDeclare(s.cfg.Queue, true, false, false, false, queueArgs(&s.cfg))
	} else {
		_, err = topo.QueueDeclarePassive(s.cfg.Queue, true, false, false, false, nil)
	}
	if err != nil {
		if ae := (*amqp.Error)(nil); errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil, fmt.Errorf("%w: %q: %v", ErrQueueNotFound, s.cfg.Queue, err)
		}
		return nil, fmt.Errorf("rabbitmq: declare queue %q: %w", s.cfg.Queue, err)
	}
	_ = topo.Close()

	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("rabbitmq: set prefetch %d: %w", s.cfg.Prefetch, err)
	}
	sess := &session{
		conn:       conn,
		ch:         ch,
		connClosed: conn.NotifyClose(make(chan *amqp.Error, 1)),
		chClosed:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		canceled:   ch.NotifyCancel(make(chan string, 1)),
	}
	if sess.user, err = userID(ctx, conn); err != nil {
		return nil, fmt.Errorf("rabbitmq: check user_id: %w", err)
	}
	sess.pub, err = newConfirmer(conn)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open confirm channel: %w", err)
	}
	// Not ConsumeWithContext: its ctx would cancel the consumer.
	sess.deliveries, err = ch.Consume(s.cfg.Queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		if ae := (*amqp.Error)(nil); errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil, fmt.Errorf("%w: %q: %v", ErrQueueNotFound, s.cfg.Queue, err)
		}
		return nil, fmt.Errorf("rabbitmq: consume %q: %w", s.cfg.Queue, err)
	}
	return sess, nil
}

func queueArgs(c *Config) amqp.Table {
	args := amqp.Table{"x-queue-type": string(c.QueueType)}
	if c.DeadLetterExchange != "" {
		args["x-dead-letter-exchange"] = c.DeadLetterExchange
	}
	if c.DeliveryLimit > 0 {
		args["x-delivery-limit"] = int64(c.DeliveryLimit)
	}
	maps.Copy(args, c.QueueArgs)
	return args
}

// run forwards deliveries and reconnects after a loss, until Close or a
// terminal error.
func (s *Source) run(sess *session) {
	defer close(s.done)
	for {
		why := s.pump(sess)
		s.mu.Lock()
		s.sess = nil
		s.mu.Unlock()
		sess.close()
		select {
		case <-s.stopped:
			return
		default:
		}
		s.cfg.Logger.Warn("rabbitmq: consumer lost, reconnecting", "queue", s.cfg.Queue, "reason", why)
		if sess = s.reconnect(); sess == nil {
			return
		}
	}
}

// pump hands the session's deliveries to Next until they end, and says why
// they did.
func (s *Source) pump(sess *session) string {
	for {
		select {
		case d, ok := <-sess.deliveries:
			if !ok {
				select {
				case <-s.stopped: // Close canceled the consumer
					return "closed"
				default:
				}
				return sess.reason()
			}
			if sess.ch.IsClosed() {
				continue // it cannot be acked; RabbitMQ redelivers it
			}
			select {
			case s.msgs <- s.delivery(sess, d):
			case <-s.stopped:
				return "closed"
			}
		case <-s.stopped:
			return "closed"
		}
	}
}

func (sess *session) reason() string {
	wait := time.After(time.Second) // the notifications may trail the deliveries' end
	connClosed, chClosed, canceled := sess.connClosed, sess.chClosed, sess.canceled
	for {
		select {
		case e, ok := <-connClosed:
			if ok && e != nil {
				return "connection closed: " + e.Error()
			}
			connClosed = nil
		case e, ok := <-chClosed:
			if ok && e != nil {
				return "channel closed: " + e.Error()
			}
			chClosed = nil
		case tag, ok := <-canceled:
			if ok {
				return "consumer " + tag + " canceled by the broker (queue deleted?)"
			}
			canceled = nil
		case <-wait:
			return "deliveries ended"
		}
	}
}

// reconnect opens a new session with backoff; nil after Close or a
// terminal error (then reported by Next).
func (s *Source) reconnect() *session {
	delay := s.cfg.ReconnectDelay
	for attempt := 1; ; attempt++ {
		jittered := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
		select {
		case <-time.After(jittered):
		case <-s.stopped:
			return nil
		}
		sess, err := s.open(s.life, false)
		if err == nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			select {
			case <-s.stopped: // Close ran meanwhile
				sess.close()
				return nil
			default:
			}
			s.sess = sess
			s.cfg.Logger.Info("rabbitmq: reconnected", "queue", s.cfg.Queue, "attempts", attempt, "addr", sess.conn.RemoteAddr().String())
			return sess
		}
		switch {
		case errors.Is(err, ErrQueueNotFound):
			s.fail(err)
			return nil
		case s.cfg.MaxReconnects > 0 && attempt >= s.cfg.MaxReconnects:
			s.fail(fmt.Errorf("%w: %d attempts to reach queue %q: %w", ErrReconnectFailed, attempt, s.cfg.Queue, err))
			return nil
		}
		s.cfg.Logger.Warn("rabbitmq: reconnect failed", "queue", s.cfg.Queue, "attempt", attempt, "error", err)
		delay = min(delay*2, s.cfg.ReconnectMaxDelay)
	}
}

func (s *Source) fail(err error) {
	if s.failed.Set(err) {
		s.cfg.Logger.Error("rabbitmq: source failed", "queue", s.cfg.Queue, "error", err)
	}
}

// Next returns the next delivery. It blocks across reconnects.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case d := <-s.msgs:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopped:
		return nil, broker.ErrSourceClosed
	case <-s.failed.Done():
		return nil, s.failed.Err()
	}
}

// Close cancels the consumer, waiting for the broker to take the acks sent
// before. It then closes the connection. RabbitMQ requeues the deliveries
// not acked.
func (s *Source) Close() error {
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.cancel()
		s.mu.Lock()
		if s.sess != nil {
			s.sess.stop(s.cfg.Prefetch)
			s.sess.close() // ends pump, and its deliveries
		}
		s.mu.Unlock()
		<-s.done
	})
	return nil
}

var (
	_ broker.RedeliveryWindower = (*Source)(nil)
	_ broker.Prefetcher         = (*Source)(nil)
)

// Prefetch returns Config.Prefetch, the channel's QoS prefetch count.
func (s *Source) Prefetch() int { return s.cfg.Prefetch }

// RedeliveryWindow returns the queue's message TTL when its declaration
// sets one, as "x-message-ttl" in Config.QueueArgs. Otherwise it returns 0,
// since RabbitMQ keeps a message until it is acked. It does not see a TTL
// set by a policy.
func (s *Source) RedeliveryWindow(context.Context) (time.Duration, error) {
	switch ttl := s.cfg.QueueArgs["x-message-ttl"].(type) {
	case int:
		return time.Duration(ttl) * time.Millisecond, nil
	case int32:
		return time.Duration(ttl) * time.Millisecond, nil
	case int64:
		return time.Duration(ttl) * time.Millisecond, nil
	case float64:
		return time.Duration(ttl * float64(time.Millisecond)), nil
	}
	return 0, nil
}
