// Package brokertest is the one conformance suite of the broker adapters.
//
// Each adapter's test file runs it against a real broker. The inbox is on
// SQLite, and the consumer runtime, inbox.Consume, sits in between. The
// Queued cases run inbox.ConsumeQueued with the inbox on PostgreSQL, through
// pgxstore. They skip without it, unless INBOX_REQUIRE_SERVICES=1.
//
//	func TestBroker(t *testing.T) { brokertest.Run(t, harness) }
package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// Features says what a broker or its harness can do. A case that needs
// what an adapter lacks skips, saying which feature is missing.
type Features struct {
	// Restart means that Env.Restart restarts the broker, an embedded server.
	Restart bool
	// Deliveries means that broker.Message.Deliveries counts a message's
	// deliveries. It is 1, then 2 after a Nack. Without it the adapter reports
	// 0.
	Deliveries bool
	// AckWait means that a delivery not acked within the ackWait given to
	// Harness.Open comes back while its consumer still runs, as with
	// JetStream's AckWait. Without it, Open's ackWait means nothing. An unacked
	// delivery then comes back only once its source is closed. RabbitMQ
	// requeues a closed channel's deliveries, and a Kafka group reads again
	// from its committed offset.
	AckWait bool
	// Lease means that Env.Source returns a broker.LeaseSource, and InProgress
	// starts a delivery's AckWait again. It needs AckWait. Without it a delivery
	// has no lease to extend, and the source must not be a LeaseSource.
	Lease bool
	// Dedup means that the broker drops a message published again with an ID
	// it has seen, as in JetStream's duplicate window. Without it the
	// re-publish is delivered, and the inbox skips it as a duplicate.
	Dedup bool
	// Keys means that broker.Message.Key arrives as published, as Kafka's
	// record key does. Without it the adapter ignores Key and delivers it
	// empty.
	Keys bool
	// PayloadLimit means that Publish refuses a payload over Env.MaxPayload
	// bytes.
	PayloadLimit bool
	// HeaderLimits means that the broker cannot carry some headers, which
	// Env.BadHeaders lists, and Publish refuses them.
	HeaderLimits bool
	// OwnHeaders means that the broker has headers of its own, which
	// Env.OwnHeaders lists and Env.PublishRaw sends. Sources leave them out of
	// broker.Message.Headers, and Publishers never send them. Without it every
	// header the broker delivers is the producer's.
	OwnHeaders bool
	// PublishTime means that broker.Message.Time is when the message was
	// published, within a second, since AMQP's timestamp has whole seconds.
	// Without it the adapter reports the zero time.
	PublishTime bool
}

// Env is one fresh destination on the broker, such as a stream or a queue.
type Env struct {
	// Source returns a new consumer of the destination, as a restarted process
	// would make. It shares the broker's state of the messages with the earlier
	// ones, such as what is acked and what is in flight.
	Source func(tb testing.TB) broker.Source
	// PrefetchSource, when set, returns a new consumer like Source's that holds
	// n deliveries ahead. RabbitMQ's prefetch and JetStream's pull batch do
	// that. Without it the suite uses Source.
	PrefetchSource func(tb testing.TB, n int) broker.Source
	// Publisher publishes to the destination. Subject is where.
	Publisher broker.Publisher
	Subject   string
	// Partitions is the number of partitions of the destination, over which
	// Publisher spreads messages round-robin. A value of 0 means one ordered
	// queue. Order holds within a partition only, so the ack check publishes
	// one marker per partition.
	Partitions int
	// PublishNoID publishes a payload without a producer ID.
	PublishNoID func(ctx context.Context, payload []byte) error
	// Restart stops and starts the broker. It is for Features.Restart only.
	Restart func(tb testing.TB)
	// Nowhere is a subject that Publisher's broker refuses. No stream captures
	// it, no queue is bound to it, or there is no such topic. Required.
	Nowhere string
	// MaxPayload is the size of the largest payload the broker takes. It is for
	// Features.PayloadLimit only.
	MaxPayload int
	// BadHeaders are headers the broker cannot carry, one case each. They are
	// for Features.HeaderLimits only.
	BadHeaders []map[string]string
	// OwnHeaders are headers of the broker's own, with values it takes from a
	// producer. They are for Features.OwnHeaders only.
	OwnHeaders map[string]string
	// PublishRaw publishes a message with ID id and headers as they are to
	// Subject. It uses the broker's own client rather than Publisher. It is for
	// Features.OwnHeaders only.
	PublishRaw func(ctx context.Context, id string, headers map[string]string) error
	// MaxHeaders is the most headers a message of the suite can carry besides
	// its ID and type. SQS takes ten message attributes in all. A value of 0
	// means no limit. The fields check then spreads its headers over several
	// messages.
	MaxHeaders int
}

// Harness opens environments for the suite.
type Harness struct {
	Features Features
	// Open returns a fresh destination whose unacked deliveries come back after
	// ackWait. Without Features.AckWait, ackWait is ignored.
	Open func(tb testing.TB, ackWait time.Duration) *Env
}
