// Package broker is the seam between the inbox's consumer runtime and the
// message brokers.
//
// A [Source] yields Deliveries. Each is acknowledged once its fate is
// committed. A [Publisher] publishes with a producer ID.
//
// The vocabulary is NATS JetStream's: Ack, Nack with a delay, Term and
// InProgress. Every method that can block takes a context first. An adapter
// is a folder with a Source, a Publisher and a test file. The test file runs
// the conformance suite in package brokertest.
//
// Package broker imports nothing of package inbox. Package inbox imports it.
package broker

import (
	"context"
	"errors"
	"time"
)

// The header names the adapters use by default. They are used where the
// broker has no field of its own for the message's type, as on NATS and
// Kafka, or for its ID, as on Kafka.
const (
	DefaultTypeHeader = "Inbox-Type"
	DefaultIDHeader   = "Inbox-Id"
)

// Message is a message as a broker delivered it, or as it is published.
type Message struct {
	// ID is the producer's ID of the message, the same on every delivery. It is
	// NATS's Nats-Msg-Id header, AMQP's message_id property or a Kafka header.
	// It is empty when the message has none.
	ID string
	// Subject is where the message was published, such as a NATS subject, an
	// AMQP routing key or a Kafka topic.
	Subject string
	// Key orders and partitions messages where the broker has such a thing. On
	// Kafka it is a record's key, and the same key goes to the same partition,
	// in order. It is optional. Brokers without one, such as NATS and RabbitMQ,
	// ignore it.
	Key string
	// Type names the kind of message, from a header the adapter is told of. It
	// is optional.
	Type    string
	Payload []byte
	// Headers are the producer's headers. The broker's own are left out by
	// Sources and never sent by Publishers. Examples are JetStream's Nats-*
	// controls, AMQP's x-death and what an adapter derives. A message published
	// again, in a replay or by a relay, must not act on the broker again.
	Headers map[string]string
	// Deliveries counts the deliveries of the message, this one included, as
	// the broker reports it. It is 1 for the first. It is 0 when the broker does
	// not say. RabbitMQ only says whether it is a redelivery.
	Deliveries int
	// Time is when the message was published, as the broker reports it. It is
	// a JetStream message's timestamp, a Kafka record's timestamp, the AMQP
	// timestamp property in whole seconds, or SQS's SentTimestamp. It is zero
	// when the broker does not say. Publishers ignore it.
	Time time.Time
	// System names the broker of a delivered message, for metrics and traces.
	// Its values are OpenTelemetry's messaging.system values, such as
	// [SystemNATS], [SystemKafka], [SystemRabbitMQ] and [SystemSQS]. Publishers
	// ignore it.
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
// should be called. Ack and Term come after the message's fate is
// committed. Nack comes when the message is to be redelivered.
type Delivery interface {
	// Message returns the delivered message.
	Message() *Message
	// Ack tells the broker the message is done, and will not be redelivered.
	// An ack may be lost. The inbox then makes the redelivery a duplicate.
	Ack(ctx context.Context) error
	// Nack asks for a redelivery after delay. A delay of 0 asks for it as soon
	// as the broker will.
	Nack(ctx context.Context, delay time.Duration) error
	// Term tells the broker never to redeliver the message, for reason.
	Term(ctx context.Context, reason string) error
	// InProgress tells the broker the message is still being worked on. Its
	// lease then starts again, as an AckWait or a visibility timeout.
	InProgress(ctx context.Context) error
}

// Source yields deliveries.
type Source interface {
	// Next blocks until the next delivery. It also returns when ctx is done,
	// with ctx's error. And it returns when the source fails for good, with an
	// error wrapping [ErrSourceClosed] or the broker's reason, such as a
	// deleted consumer. The adapter rides out transient trouble, such as a
	// reconnect. Next is safe for concurrent use.
	Next(ctx context.Context) (Delivery, error)
	// Close stops receiving. Deliveries not yet acked are redelivered by
	// the broker later.
	Close() error
}

// LeaseSource is a Source whose deliveries expire when not acked in time.
// The consumer runtime calls InProgress every LeaseInterval for a delivery
// still being worked on.
type LeaseSource interface {
	Source
	LeaseInterval() time.Duration
}

// BatchSource is a Source that hands out batches which keep the order its
// broker promises. Taking deliveries one by one with Next would mix them.
// An example is Kafka's records of one partition, in offset order. The
// consumer runtime calls NextBatch instead of Next when it processes in
// batches.
type BatchSource interface {
	Source
	// NextBatch blocks until at least one delivery is ready. It then returns up
	// to max deliveries, at least one, that may be processed together in the
	// returned order. It ends as Next does, with no deliveries. It then returns
	// ctx's error, an error wrapping ErrSourceClosed, or the broker's terminal
	// error. A source may hold back deliveries that must follow the batch's,
	// until each of the batch's is acked, nacked or termed. It is safe for
	// concurrent use.
	NextBatch(ctx context.Context, max int) ([]Delivery, error)
}

// RedeliveryWindower is a Source that can tell how long its broker may
// still deliver a message again after it was published.
//   - On NATS it is the stream's MaxAge.
//   - On Kafka it is the topic's retention.ms.
//   - On SQS it is the queue's MessageRetentionPeriod.
//   - On RabbitMQ it is the message TTL.
//
// An inbox that forgets a processed ID sooner, with its pruner's retention,
// processes such a late redelivery again. Package inbox warns of it.
type RedeliveryWindower interface {
	// RedeliveryWindow returns the window, 0 when the broker keeps
	// messages without a time limit.
	RedeliveryWindow(ctx context.Context) (time.Duration, error)
}

// Prefetcher is a Source that holds at most a fixed number of deliveries
// ahead of the consumer runtime's workers. That is a pull batch on NATS, a
// channel prefetch on RabbitMQ and one receive's worth on SQS. Consume
// warns at start when it is below Workers × BatchSize. Workers then wait for
// deliveries, and batches for their linger, while the broker has more.
type Prefetcher interface {
	// Prefetch returns the number of deliveries held ahead, at least 1.
	Prefetch() int
}

// Publisher publishes messages with their producer ID, Message.ID. The
// broker passes it on to consumers, and may use it to drop duplicates.
type Publisher interface {
	// Publish returns once the broker has the message, with a publish ack or
	// confirm. The caller may then forget it.
	//
	// Publish returns an error, never a silent success, for a message the
	// broker refuses or would alter. The error wraps [ErrInvalidMessage] when
	// retrying cannot help. Publish returns ctx's error once ctx is done. It
	// leaves out the broker's own headers, as Message.Headers tells. A message
	// stored with them is thus published safely, such as an older dead letter
	// or an outbox row.
	Publish(ctx context.Context, msg *Message) error
}

var (
	// ErrSourceClosed is returned by Next after Close.
	ErrSourceClosed = errors.New("broker: source closed")
	// ErrInvalidMessage is wrapped by Publish's error for a message that the
	// broker cannot carry as it is. Examples are a message without ID, a header
	// the broker would refuse or alter, and a payload over its size limit.
	// Publishing it again fails again.
	ErrInvalidMessage = errors.New("broker: message cannot be published")
	// ErrDuplicate is wrapped by Publish's error for a message that the
	// broker dropped because it saw its ID within its deduplication
	// window, when the publisher was asked to say so (natsjs's
	// RefuseDuplicates). Publishing it again after the window succeeds.
	ErrDuplicate = errors.New("broker: dropped as a duplicate of a recent publish")
)
