package natsjs

import (
	"errors"
	"log/slog"
	"time"
)

// Config configures a [Source]. Stream and Durable are required. The zero
// values of the others mean the defaults.
type Config struct {
	// Stream is the JetStream stream to consume.
	Stream string
	// Durable names the durable pull consumer, created or updated by
	// NewSource. Use one per logical consumer.
	Durable string
	// FilterSubjects limits the consumer to these subjects. Default all of the
	// stream's.
	FilterSubjects []string
	// AckWait is how long the server waits for an ack before redelivering. The
	// consumer runtime reports long handlers InProgress every AckWait/3.
	// Default [DefaultAckWait], 30 s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of a message. JetStream then stops
	// delivering it, silently. Set a limit only well above the inbox's
	// MaxAttempts, which is 10 by default. Retries after database errors are
	// not attempts. A value of 0 means unlimited, and the inbox dead-letters
	// failing messages itself. Default 0.
	MaxDeliver int
	// MaxAckPending bounds the deliveries in flight. Default
	// [DefaultMaxAckPending], 1000.
	MaxAckPending int
	// PullBatch is the number of messages pulled ahead of the workers. They
	// wait in the client with their AckWait running and no lease. Keep it near
	// the consumer runtime's Workers. For batches, with
	// ConsumerConfig.BatchSize, make it at least Workers × BatchSize, or
	// batches rarely fill. inbox.Consume warns of it. Default
	// [DefaultPullBatch], 8.
	PullBatch int
	// TypeHeader names the header holding the message type. Default
	// [broker.DefaultTypeHeader], "Inbox-Type".
	TypeHeader string
	// Logger receives transient consumer errors. They are missed heartbeats
	// while the server restarts, or after nats.go lost track of a pull request.
	// Default [slog.Default].
	Logger *slog.Logger
}

// The defaults of Config.
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
	DefaultPullBatch     = 8
)

// ErrInvalidConfig is wrapped by NewSource's error for a nil JetStream or
// a missing field.
var ErrInvalidConfig = errors.New("natsjs: invalid config")
