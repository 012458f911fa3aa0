package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The defaults of [Config], for its fields of the same names. DefaultURL is
// also PublisherConfig's.
const (
	DefaultURL               = "amqp://guest:guest@localhost:5672/"
	DefaultPrefetch          = 16
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultReconnectMaxDelay = 10 * time.Second
)

// QueueType is the type of the queues NewSource declares.
type QueueType string

const (
	// Quorum queues are replicated, durable, and dead-letter their delayed
	// retries at-least-once. The default.
	Quorum QueueType = "quorum"
	// Classic queues are durable on one node. Their dead-lettering, the way
	// back from a delay queue, is at most once.
	Classic QueueType = "classic"
)

// DefaultDelayBuckets are the delay queues' delays unless
// Config.DelayBuckets is set. They form a 1-2-5 ladder from 100 ms to 1 h.
var DefaultDelayBuckets = []time.Duration{
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 50 * time.Second,
	2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, time.Hour,
}

var (
	// ErrQueueNotFound says the queue does not exist, or was deleted while it
	// was consumed. It is terminal. The Source does not re-create the queue.
	ErrQueueNotFound = errors.New("rabbitmq: queue not found")
	// ErrReconnectFailed says that Config.MaxReconnects attempts in a row
	// failed.
	ErrReconnectFailed = errors.New("rabbitmq: reconnect failed")
	// ErrChannelClosed says a delivery's channel is closed, so the delivery can
	// no longer be acked. The connection was lost, or the Source closed.
	// RabbitMQ redelivers the message.
	ErrChannelClosed = errors.New("rabbitmq: the delivery's channel is closed")
	// ErrPublisherClosed is returned by Publish after Close.
	ErrPublisherClosed = errors.New("rabbitmq: publisher closed")
	// ErrInvalidConfig is wrapped by the errors of NewSource and
	// NewPublisher for a configuration they refuse.
	ErrInvalidConfig = errors.New("rabbitmq: invalid config")
)

// Config configures a [Source]. Queue is required. The zero values of the
// other fields mean the defaults.
type Config struct {
	// URL is the broker's AMQP URI. Its user name marks the Source's delayed
	// retries as its own, as the package doc tells. Default [DefaultURL],
	// "amqp://guest:guest@localhost:5672/".
	URL string
	// URLs are the AMQP URIs of a cluster's nodes, instead of URL. The
	// Source connects to the first that answers. After losing a connection,
	// it tries the next URL first, and the lost node's last. Give every
	// URL the same user. Set URL or URLs, not both. Default none.
	URLs []string
	// AMQP configures the connections, such as TLS, SASL, vhost and
	// properties. Its Recovery must be nil, since the Source reconnects by
	// itself. ConnectionName replaces the connection_name of its Properties.
	// Default heartbeat 10 s.
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
	// NoDeclare means the queue and its delay queues must exist already. The
	// Source then only checks the queue. Without it, NewSource declares the
	// queue, durable and with the arguments below. The Source then declares
	// each delay queue when first needed. Default false.
	NoDeclare bool
	// DeadLetterExchange is the queue's x-dead-letter-exchange. Term sends a
	// message there, and so does a quorum queue's delivery limit. Without it,
	// such messages are dropped. Default none.
	DeadLetterExchange string
	// DeliveryLimit is a quorum queue's x-delivery-limit. It is the number of
	// returned deliveries after which RabbitMQ dead-letters or drops a message.
	// Default 0, the broker's, which is none in 3.x and 20 in 4.x.
	DeliveryLimit int
	// QueueArgs are further arguments for the queue's declaration.
	QueueArgs amqp.Table

	// Prefetch is the channel's QoS prefetch count, the unacked deliveries the
	// broker sends ahead. Set it to at least the consumer runtime's Workers ×
	// BatchSize. inbox.Consume warns when it is lower. Default
	// [DefaultPrefetch], 16.
	Prefetch int
	// DelayBuckets are the delays of the delay queues, one queue per bucket.
	// Nack's delay is rounded up to the next bucket, or down to the largest.
	// Default [DefaultDelayBuckets].
	DelayBuckets []time.Duration

	// ReconnectDelay is the wait before the first reconnect attempt. It doubles
	// on each failed attempt, with ±20 % jitter. Default
	// [DefaultReconnectDelay], 100 ms.
	ReconnectDelay time.Duration
	// ReconnectMaxDelay caps the wait between attempts. Default
	// [DefaultReconnectMaxDelay], 10 s.
	ReconnectMaxDelay time.Duration
	// MaxReconnects is how many reconnect attempts in a row may fail before
	// Next returns [ErrReconnectFailed]. Default 0, which never gives up.
	MaxReconnects int

	// Logger receives reconnects, Terms and fallbacks. Default [slog.Default].
	Logger *slog.Logger
}

func (cfg *Config) withDefaults() (Config, error) {
	if cfg == nil || cfg.Queue == "" {
		return Config{}, fmt.Errorf("%w: Config.Queue is required", ErrInvalidConfig)
	}
	c := *cfg
	urls, err := urlList("Config", c.URL, c.URLs)
	if err != nil {
		return Config{}, err
	}
	c.URLs = urls
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
		c.Prefetch = DefaultPrefetch
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
		c.ReconnectDelay = DefaultReconnectDelay
	}
	if c.ReconnectMaxDelay <= 0 {
		c.ReconnectMaxDelay = DefaultReconnectMaxDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
