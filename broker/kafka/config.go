package kafka

import (
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a [Source]. Brokers, Topic and Group are required. The
// zero values of the others mean the defaults.
type Config struct {
	// Brokers are seed addresses of the cluster, such as "host:9092".
	Brokers []string
	// Topic is the topic to consume.
	Topic string
	// Group is the consumer group. Use one per logical consumer.
	Group string
	// IDHeader names the record header holding the message's ID. Default
	// [broker.DefaultIDHeader], "Inbox-Id".
	IDHeader string
	// TypeHeader names the header holding the message type. Default
	// [broker.DefaultTypeHeader], "Inbox-Type".
	TypeHeader string
	// IDFromOffset gives a record without the ID header the ID
	// "topic/partition/offset". It is stable across redeliveries of that
	// record. A producer that sends the same message twice makes two records
	// with two IDs, though, as a retried send without idempotence does. Without
	// IDFromOffset, such a record is dead-lettered as having no ID. Default
	// false.
	IDFromOffset bool
	// CommitInterval is how often acked offsets are committed. A crash loses at
	// most that much progress, which is redelivered and then skipped as
	// duplicates. Default [DefaultCommitInterval], 500 ms.
	CommitInterval time.Duration
	// Options are more franz-go options, such as TLS, SASL and timeouts. The
	// options the Source sets override them. They are the seed brokers, the
	// group, the topic, the reset offset, no auto-commit, blocking rebalances
	// on poll and the partition callbacks. Options override one default of
	// the Source: a fetch waits at most 500 ms (kgo.FetchMaxWait).
	Options []kgo.Opt
	// Logger receives commit failures, which are retried at the next interval.
	// Default [slog.Default].
	Logger *slog.Logger
}

// DefaultCommitInterval is Config.CommitInterval's default.
const DefaultCommitInterval = 500 * time.Millisecond

// ErrInvalidConfig is wrapped by NewSource's error for a missing field or
// an option franz-go refuses.
var ErrInvalidConfig = errors.New("kafka: invalid config")
