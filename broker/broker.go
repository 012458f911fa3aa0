// Package broker is the seam between the inbox's consumer runtime and the
// message brokers: a Source yields Deliveries, each acknowledged once its
// fate is committed; a Publisher publishes with a producer ID.
//
// The vocabulary is NATS JetStream's: Ack, Nack with a delay, Term,
// InProgress. Every method that can block takes a context first. An
// adapter is a folder with a Source, a Publisher and a test file that runs
// the conformance suite in package brokertest.
//
// Package broker imports nothing of package inbox; package inbox imports it.
package broker

import (
	"context"
	"errors"
	"time"
)

// The header names the adapters use by default, where the broker has no
// field of its own for the message's type (NATS, Kafka) or ID (Kafka).
const (
	DefaultTypeHeader = "Inbox-Type"
	DefaultIDHeader   = "Inbox-Id"
)

// Message is a message as a broker delivered it, or as it is published.
type Message struct {
	// ID is the producer's ID of the message, the same on every delivery:
	// NATS's Nats-Msg-Id header, AMQP's message_id property, a Kafka
	// header. Empty when the message has none.
	ID string
	// Subject is where the message was published: a NATS subject, an AMQP
	// routing key, a Kafka topic.
	Subject string
	// Key orders and partitions messages where the broker has such a
	// thing: a Kafka record's key (the same key, the same partition, in
	// order). Optional; brokers without one (NATS, RabbitMQ) ignore it.
	Key string
	// Type names the kind of message, from a header the adapter is told of;
	// optional.
	Type    string
	Payload []byte
	// Headers are the producer's headers. The broker's own (JetStream's
	// Nats-* controls, AMQP's x-death, what an adapter derives) are left
	// out by Sources and never sent by Publishers: a message published
	// again (a replay, a relay) must not act on the broker again.
	Headers map[string]string
	// Deliveries counts the deliveries of the message, this one included,
	// as the broker reports it: 1 for the first, 0 when the broker does not
	// say (RabbitMQ only says whether it is a redelivery).
	Deliveries int
	// Time is when the message was published, as the broker reports it: a
	// JetStream message's timestamp, a Kafka record's timestamp, the AMQP
	// timestamp property (whole seconds), SQS's SentTimestamp. Zero when
	// the broker does not say. Publishers ignore it.
	Time time.Time
	// System names the broker of a delivered message, in OpenTelemetry's
	// messaging.system values (SystemNATS, SystemKafka, SystemRabbitMQ,
	// SystemSQS), for metrics and traces. Publishers ignore it.
	System string
}

// The values of Message.System that the adapters set.
const (
	SystemNATS     = "nats"
	SystemKafka    = "kafka"
	SystemRabbitMQ = "rabbitmq"
	SystemSQS      = "aws_sqs"
)

// Delivery is one delivery of a message. Exactly one of Ack, Nack and Term
// should be called, after the message's fate is committed (Ack, Term) or
// when it is to be redelivered (Nack).
type Delivery interface {
	// Message returns the delivered message.
	Message() *Message
	// Ack tells the broker the message is done: it will not be redelivered
	// (unless the ack is lost: the inbox makes that redelivery a duplicate).
	Ack(ctx context.Context) error
	// Nack asks for a redelivery after delay (0: as soon as the broker
	// will).
	Nack(ctx context.Context, delay time.Duration) error
	// Term tells the broker never to redeliver the message, for reason.
	Term(ctx context.Context, reason string) error
	// InProgress tells the broker the message is still being worked on, so
	// that its lease (AckWait, visibility timeout) starts again.
	InProgress(ctx context.Context) error
}

// Source yields deliveries.
type Source interface {
	// Next blocks until the next delivery, or until ctx is done (it then
	// returns ctx's error), or until the source fails for good (an error
	// wrapping ErrSourceClosed, or the broker's reason such as a deleted
	// consumer). Transient trouble (a reconnect) is the adapter's to ride
	// out. Next is safe for concurrent use.
	Next(ctx context.Context) (Delivery, error)
	// Close stops receiving. Deliveries not yet acked are redelivered by
	// the broker later.
	Close() error
}

// LeaseSource is a Source whose deliveries expire when not acked in time:
// the consumer runtime calls InProgress every LeaseInterval for a delivery
// still being worked on.
type LeaseSource interface {
	Source
	LeaseInterval() time.Duration
}

// BatchSource is a Source that hands out batches which keep the order its
// broker promises, where taking deliveries one by one with Next would mix
// them: Kafka's records of one partition, in offset order. The consumer
// runtime calls NextBatch instead of Next when it processes in batches.
type BatchSource interface {
	Source
	// NextBatch blocks until at least one delivery is ready, then returns
	// up to max deliveries (at least one) that may be processed together
	// in the returned order. It ends as Next does: ctx's error, an error
	// wrapping ErrSourceClosed, or the broker's terminal error, with no
	// deliveries. A source may hold back deliveries that must follow the
	// batch's until each of the batch's is acked, nacked or termed. It is
	// safe for concurrent use.
	NextBatch(ctx context.Context, max int) ([]Delivery, error)
}

// RedeliveryWindower is a Source that can tell how long its broker may
// still deliver a message again after it was published: the stream's
// MaxAge (NATS), the topic's retention.ms (Kafka), the queue's
// MessageRetentionPeriod (SQS) or message TTL (RabbitMQ). An inbox that
// forgets a processed ID sooner (its pruner's retention) processes such a
// late redelivery again; package inbox warns of it.
type RedeliveryWindower interface {
	// RedeliveryWindow returns the window, 0 when the broker keeps
	// messages without a time limit.
	RedeliveryWindow(ctx context.Context) (time.Duration, error)
}

// Prefetcher is a Source that holds at most a fixed number of deliveries
// ahead of the consumer runtime's workers: a pull batch (NATS), a channel
// prefetch (RabbitMQ), one receive's worth (SQS). Consume warns at start
// when it is below Workers × BatchSize: workers then wait for deliveries,
// and batches for their linger, while the broker has more.
type Prefetcher interface {
	// Prefetch returns the number of deliveries held ahead, at least 1.
	Prefetch() int
}

// Publisher publishes messages with their producer ID (Message.ID), which
// the broker passes on to consumers (and may use to drop duplicates).
type Publisher interface {
	// Publish returns once the broker has the message (a publish ack or
	// confirm), so that the caller may then forget it. It returns an error,
	// never a silent success, for a message the broker refuses or would
	// alter (wrapping ErrInvalidMessage when retrying cannot help), and
	// ctx's error once ctx is done. It leaves out the broker's own headers
	// (see Message.Headers), so that a message stored with them (an older
	// dead letter, an outbox row) is published safely.
	Publish(ctx context.Context, msg *Message) error
}

var (
	// ErrSourceClosed is returned by Next after Close.
	ErrSourceClosed = errors.New("broker: source closed")
	// ErrInvalidMessage is wrapped by Publish's error for a message that
	// the broker cannot carry as it is (no ID, a header it would refuse or
	// alter, a payload over its size limit): publishing it again fails
	// again.
	ErrInvalidMessage = errors.New("broker: message cannot be published")
)
