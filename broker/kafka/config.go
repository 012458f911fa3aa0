package kafka

import (
	"errors"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Source. Brokers, Topic and Group are required; zero
// values of the others mean the defaults.
type Config struct {
	// Brokers are seed addresses of the cluster ("host:9092").
	Brokers []string
	// Topic is the topic to consume.
	Topic string
	// Group is the consumer group; use one per logical consumer.
	Group string
	// IDHeader names the record header holding the message's ID. Default
	// broker.DefaultIDHeader ("Inbox-Id").
	IDHeader string
	// TypeHeader names the header holding the message type. Default
	// broker.DefaultTypeHeader ("Inbox-Type").
	TypeHeader string
	// IDFromOffset gives a record without the ID header the ID
	// "topic/partition/offset". It is stable across redeliveries of that
	// record, but a producer that sends the same message twice (a retried
	// send without idempotence) makes two records with two IDs. Default
	// false: such a record is dead-lettered as having no ID.
	IDFromOffset bool
	// CommitInterval is how often acked offsets are committed. A crash
	// loses at most that much progress (redelivered, then skipped as
	// duplicates). Default DefaultCommitInterval (500 ms).
	CommitInterval time.Duration
	// Options are more franz-go options (TLS, SASL, timeouts). Those the
	// Source sets (seed brokers, group, topic, reset offset, no
	// auto-commit, blocking rebalances on poll, the partition callbacks)
	// override them.
	Options []kgo.Opt
	// Logger receives commit failures (retried at the next interval).
	// Default slog.Default().
	Logger *slog.Logger
}

// DefaultCommitInterval is Config.CommitInterval's default.
const DefaultCommitInterval = 500 * time.Millisecond

// ErrInvalidConfig is wrapped by NewSource's error for a missing field or
// an option franz-go refuses.
var ErrInvalidConfig = errors.New("kafka: invalid config")
