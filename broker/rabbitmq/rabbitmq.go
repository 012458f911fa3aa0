package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
)

const defaultURL = "amqp://guest:guest@localhost:5672/"

// QueueType is the type of the queues NewSource declares.
type QueueType string

const (
	// Quorum queues are replicated, durable, and dead-letter their delayed
	// retries at-least-once. The default.
	Quorum QueueType = "quorum"
	// Classic queues are durable on one node; their dead-lettering (the
	// way back from a delay queue) is at-most-once.
	Classic QueueType = "classic"
)

// DefaultDelayBuckets are the delay queues' delays unless
// Config.DelayBuckets is set: a 1-2-5 ladder from 100 ms to 1 h.
var DefaultDelayBuckets = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 50 * time.Second,
	2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, time.Hour,
}

var (
	// ErrQueueNotFound: the queue does not exist, or was deleted while it
	// was consumed. It is terminal: the Source does not re-create it.
	ErrQueueNotFound = errors.New("rabbitmq: queue not found")
	// ErrReconnectFailed: Config.MaxReconnects attempts in a row failed.
	ErrReconnectFailed = errors.New("rabbitmq: reconnect failed")
	// ErrChannelClosed: a delivery's channel is closed (the connection was
	// lost or the Source closed), so it can no longer be acked; RabbitMQ
	// redelivers the message.
	ErrChannelClosed = errors.New("rabbitmq: the delivery's channel is closed")
	// ErrPublisherClosed is returned by Publish after Close.
	ErrPublisherClosed = errors.New("rabbitmq: publisher closed")
	// ErrInvalidConfig is wrapped by the errors of NewSource and
	// NewPublisher for a configuration they refuse.
	ErrInvalidConfig = errors.New("rabbitmq: invalid config")
)

// Config configures a Source. Queue is required; zero values of the other
// fields mean the defaults.
type Config struct {
	// URL is the broker's AMQP URI. Default
	// "amqp://guest:guest@localhost:5672/".
	URL string
	// AMQP configures the connections (TLS, SASL, vhost, properties).
	// Default heartbeat 10 s. Its Recovery must be nil: the Source
	// reconnects by itself. Properties' connection_name is replaced by
	// ConnectionName.
	AMQP amqp.Config
	// ConnectionName is the client-provided connection name, which
	// rabbitmqctl list_connections and the management UI show. Default
	// "inbox <Queue>".
	ConnectionName string

	// Queue is the queue to consume. Required.
	Queue string
	// QueueType is the type of the queue and its delay queues when
	// NewSource declares them. Default Quorum.
	QueueType QueueType
	// NoDeclare: the queue and its delay queues must exist already; the
	// Source only checks the queue. Default false: NewSource declares the
	// queue (durable, with the arguments below) and the Source declares
	// each delay queue when first needed.
	NoDeclare bool
	// DeadLetterExchange is the queue's x-dead-letter-exchange: where
	// Term, and a quorum queue's delivery limit, send a message. Default
	// none: such messages are dropped.
	DeadLetterExchange string
	// DeliveryLimit is a quorum queue's x-delivery-limit: the returned
	// deliveries after which RabbitMQ dead-letters or drops a message.
	// Default 0: the broker's (none in 3.x, 20 in 4.x).
	DeliveryLimit int
	// QueueArgs are further arguments for the queue's declaration.
	QueueArgs amqp.Table

	// Prefetch is the channel's QoS prefetch count: the unacked
	// deliveries the broker sends ahead. Set it to at least the consumer
	// runtime's Workers. Default 16.
	Prefetch int
	// DelayBuckets are the delays of the delay queues, one queue per
	// bucket; Nack's delay is rounded up to the next bucket, or down to the
	// largest. Default DefaultDelayBuckets.
	DelayBuckets []time.Duration

	// ReconnectDelay is the wait before the first reconnect attempt; it
	// doubles on each failed attempt, with ±20 % jitter. Default 100 ms.
	ReconnectDelay time.Duration
	// ReconnectMaxDelay caps the wait between attempts. Default 10 s.
	ReconnectMaxDelay time.Duration
	// MaxReconnects is how many reconnect attempts in a row may fail
	// before Next returns ErrReconnectFailed. Default 0: never give up.
	MaxReconnects int

	// Logger receives reconnects, Terms and fallbacks. Default
	// slog.Default().
	Logger *slog.Logger
}

func (cfg *Config) withDefaults() (Config, error) {
	if cfg == nil || cfg.Queue == "" {
		return Config{}, fmt.Errorf("%w: Config.Queue is required", ErrInvalidConfig)
	}
	c := *cfg
	if c.URL == "" {
		c.URL = defaultURL
	}
	if c.AMQP.Recovery != nil {
		return Config{}, fmt.Errorf("%w: Config.AMQP.Recovery must be nil: the Source reconnects by itself", ErrInvalidConfig)
	}
	if c.ConnectionName == "" {
		c.ConnectionName = "inbox " + c.Queue
	}
	switch c.QueueType {
	case "":
		c.QueueType = Quorum
	case Quorum, Classic:
	default:
		return Config{}, fmt.Errorf("%w: unknown QueueType %q", ErrInvalidConfig, c.QueueType)
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 16
	}
	if len(c.DelayBuckets) == 0 {
		c.DelayBuckets = DefaultDelayBuckets
	}
	c.DelayBuckets = slices.Clone(c.DelayBuckets)
	slices.Sort(c.DelayBuckets)
	c.DelayBuckets = slices.Compact(c.DelayBuckets)
	if c.DelayBuckets[0] < time.Millisecond {
		return Config{}, fmt.Errorf("%w: delay bucket %v is below 1 ms", ErrInvalidConfig, c.DelayBuckets[0])
	}
	if c.ReconnectDelay <= 0 {
		c.ReconnectDelay = 100 * time.Millisecond
	}
	if c.ReconnectMaxDelay <= 0 {
		c.ReconnectMaxDelay = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Source is a broker.Source consuming one queue. Create it with NewSource.
type Source struct {
	cfg     Config
	msgs    chan *delivery
	stopped chan struct{} // closed by Close
	failed  *latch.Error  // the terminal error
	done    chan struct{} // closed when run returns
	life    context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	sess     *session // nil while reconnecting
	declared map[time.Duration]bool
	stopOnce sync.Once
}

var _ broker.Source = (*Source)(nil)

// session is one connection: a channel consuming the queue and a confirm
// channel for the delayed copies.
type session struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	pub        *confirmer
	deliveries <-chan amqp.Delivery
	connClosed chan *amqp.Error
	chClosed   chan *amqp.Error
	canceled   chan string
}

func (s *session) close() { _ = s.conn.Close() }

// NewSource connects, declares the queue (unless Config.NoDeclare) and
// starts consuming.
func NewSource(ctx context.Context, cfg *Config) (*Source, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	s := &Source{
		cfg: c, msgs: make(chan *delivery), stopped: make(chan struct{}), failed: latch.New(),
		done: make(chan struct{}), life: life, cancel: cancel, declared: map[time.Duration]bool{},
	}
	sess, err := s.open(ctx, !c.NoDeclare)
	if err != nil {
		cancel()
		return nil, err
	}
	s.sess = sess
	go s.run(sess)
	return s, nil
}

// Declare declares cfg's queue as NewSource would, without consuming it:
// for a producer that may publish before the consumer first starts.
func Declare(ctx context.Context, cfg *Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	conn, err := dial(ctx, c.URL, c.AMQP, c.ConnectionName)
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

// DelayQueue names queue's delay queue for a bucket:
// "<queue>.retry.<bucket>", the bucket written as 100ms, 2s, 5m or 1h.
func DelayQueue(queue string, bucket time.Duration) string {
	return queue + ".retry." + bucketName(bucket)
}

// Queues returns the names of the queue and of all its delay queues
// (declared or not yet), for monitoring and cleanup.
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
		return nil, fmt.Errorf("rabbitmq: connect: %w", err)
	}
	return conn, nil
}

// open connects and starts consuming. declare declares the queue; else the
// queue's existence is checked, so that a deleted queue is noticed rather
// than re-created.
func (s *Source) open(ctx context.Context, declare bool) (_ *session, err error) {
	conn, err := dial(ctx, s.cfg.URL, s.cfg.AMQP, s.cfg.ConnectionName)
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
	sess.pub, err = newConfirmer(conn)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open confirm channel: %w", err)
	}
	// Not ConsumeWithContext: its ctx would cancel the consumer.
	sess.deliveries, err = ch.Consume(s.cfg.Queue, "", false, false, false, false, nil)
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
			s.cfg.Logger.Info("rabbitmq: reconnected", "queue", s.cfg.Queue, "attempts", attempt)
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

// Close closes the connection; RabbitMQ requeues the deliveries not acked.
func (s *Source) Close() error {
	s.stopOnce.Do(func() {
		close(s.stopped)
		s.cancel()
		s.mu.Lock()
		if s.sess != nil {
			s.sess.close() // ends pump, and its deliveries
		}
		s.mu.Unlock()
		<-s.done
	})
	return nil
}

// delayQueue names the delay queue of bucket b.
func (s *Source) delayQueue(b time.Duration) string { return DelayQueue(s.cfg.Queue, b) }

func bucketName(b time.Duration) string {
	switch {
	case b%time.Hour == 0:
		return strconv.FormatInt(int64(b/time.Hour), 10) + "h"
	case b%time.Minute == 0:
		return strconv.FormatInt(int64(b/time.Minute), 10) + "m"
	case b%time.Second == 0:
		return strconv.FormatInt(int64(b/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(b.Milliseconds(), 10) + "ms"
	}
}

// bucket rounds delay up to a bucket, or down to the largest.
func (s *Source) bucket(delay time.Duration) time.Duration {
	i, _ := slices.BinarySearch(s.cfg.DelayBuckets, delay)
	return s.cfg.DelayBuckets[min(i, len(s.cfg.DelayBuckets)-1)]
}

// declareDelay declares bucket b's delay queue once per Source: its
// messages expire after b and go back to the queue.
func (s *Source) declareDelay(sess *session, b time.Duration) error {
	if s.cfg.NoDeclare {
		return nil
	}
	s.mu.Lock()
	done := s.declared[b]
	s.mu.Unlock()
	if done {
		return nil
	}
	args := amqp.Table{
		"x-queue-type":              string(s.cfg.QueueType),
		"x-message-ttl":             b.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": s.cfg.Queue,
	}
	if s.cfg.QueueType == Quorum {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(s.delayQueue(b), true, false, false, false, args); err != nil {
		return fmt.Errorf("declare delay queue %q: %w", s.delayQueue(b), err)
	}
	s.mu.Lock()
	s.declared[b] = true
	s.mu.Unlock()
	return nil
}

func (s *Source) delivery(sess *session, d amqp.Delivery) *delivery {
	msg := &broker.Message{ID: d.MessageId, Subject: d.RoutingKey, Type: d.Type, Payload: d.Body}
	if len(d.Headers) > 0 {
		rk, delayed := d.Headers[headerRoutingKey].(string)
		if delayed {
			msg.Subject = rk
		}
		msg.Headers = make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			if k == headerRoutingKey || delayed && deathHeader(k) {
				continue // our delay queue's traces
			}
			switch k {
			case "x-delivery-count":
				if n, ok := toInt(v); ok {
					msg.Deliveries = n + 1
				}
			}
			msg.Headers[k] = render(v)
		}
	}
	return &delivery{s: s, sess: sess, d: d, msg: msg}
}

// headerRoutingKey carries a delayed copy's original routing key, which
// dead-lettering replaces by the queue's name.
const headerRoutingKey = "x-inbox-routing-key"

// deathHeader: RabbitMQ's dead-lettering sets k. A delayed copy carries
// none (they would pile up), and a message back from a delay queue does
// not show the ones its trip added.
func deathHeader(k string) bool {
	return k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
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

// Nack retries the message after delay through a delay queue (see the
// package comment), or at once when delay is 0.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if d.sess.ch.IsClosed() {
		return ErrChannelClosed
	}
	if delay <= 0 {
		return d.d.Nack(false, true)
	}
	b := d.s.bucket(delay)
	err := d.s.declareDelay(d.sess, b)
	if err == nil {
		err = d.sess.pub.publish(ctx, "", d.s.delayQueue(b), d.delayed())
	}
	if err != nil {
		if errors.Is(err, ErrUnroutable) {
			d.s.mu.Lock()
			delete(d.s.declared, b) // declare it again next time
			d.s.mu.Unlock()
		}
		if d.sess.ch.IsClosed() {
			return fmt.Errorf("rabbitmq: nack %q: %w", d.msg.ID, err)
		}
		// Even when ctx ran out waiting for the confirm (a broker alarm
		// blocks publishes), the delivery must not stay unacked until
		// consumer_timeout: requeue it (an AMQP nack needs no ctx).
		d.s.cfg.Logger.Warn("rabbitmq: delayed retry failed; requeued for a retry at once",
			"queue", d.s.cfg.Queue, "id", d.msg.ID, "delay", delay, "error", err)
		return d.d.Nack(false, true)
	}
	// The copy is confirmed: only now may the original go.
	return d.d.Ack(false)
}

// delayed returns the copy of the message for a delay queue.
func (d *delivery) delayed() amqp.Publishing {
	headers := amqp.Table{}
	for k, v := range d.d.Headers {
		if k != "x-delivery-count" && !deathHeader(k) {
			headers[k] = v
		}
	}
	if _, ok := headers[headerRoutingKey]; !ok {
		headers[headerRoutingKey] = d.d.RoutingKey
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
		// Not Expiration: the delay queue's TTL applies. Not UserId: the
		// broker checks it against this connection's user.
		Body: d.d.Body,
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
