package sqs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/inboxkit/inbox/broker"
)

// The defaults of [Config] and [PublisherConfig], for their fields of the
// same names.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultWaitTime          = 20 * time.Second
	DefaultMaxMessages       = 10
	DefaultRetryDelay        = 100 * time.Millisecond
	DefaultRetryMaxDelay     = 10 * time.Second
	DefaultEmptyDelay        = 100 * time.Millisecond
	DefaultEmptyMaxDelay     = time.Second
	// DefaultMessageGroup is the message group of a message without a
	// Key on a FIFO queue.
	DefaultMessageGroup = "default"
	// DefaultMaxMessageSize is the size SQS takes on every queue, 256 KiB of
	// body and message attributes. A queue may take up to 1 MiB, as its
	// MaximumMessageSize attribute says.
	DefaultMaxMessageSize = 256 << 10
)

// SQS's own limits.
const (
	// maxVisibility caps a visibility timeout, counted from the receive.
	maxVisibility = 12 * time.Hour
	// maxWaitTime caps a long poll.
	maxWaitTime = 20 * time.Second
	// maxMessages caps the messages of one receive (and one batch).
	maxMessages = 10
	// maxAttributes caps a message's message attributes.
	maxAttributes = 10
)

// BodyEncodingAttribute is the message attribute that [Publisher] adds to a
// message whose payload SQS cannot carry as it is.
//
// SQS takes only some XML characters, and no empty body. The attribute is
// "base64" when the body is the payload in standard base64. It is "empty"
// when the payload is empty. The Source decodes it and does not show it in
// Message.Headers. Consumers in other languages must do the same.
const BodyEncodingAttribute = "Inbox-Body-Encoding"

var (
	// ErrInvalidConfig is wrapped by the errors of NewSource and
	// NewPublisher for a configuration they refuse.
	ErrInvalidConfig = errors.New("sqs: invalid config")
	// ErrQueueNotFound says the queue does not exist, or was deleted while it
	// was consumed. It is terminal for a Source.
	ErrQueueNotFound = errors.New("sqs: queue not found")
	// ErrAccessDenied says SQS refused the credentials or denied the action.
	// Examples are an invalid key or token, a bad signature and a missing
	// permission. It is terminal for a Source.
	ErrAccessDenied = errors.New("sqs: access denied")
)

// Config configures a [Source]. Client and Queue are required. The zero
// values of the others mean the defaults.
type Config struct {
	// Client is the SQS client. The caller configures it, with region,
	// credentials and endpoint, and owns it. Required.
	Client *awssqs.Client
	// Queue is the queue's name, or its URL. A name is resolved with
	// GetQueueUrl. Required.
	Queue string

	// VisibilityTimeout is how long a received message stays hidden from other
	// receives. The Source asks for it on every receive, whatever the queue's
	// own setting. The consumer runtime extends it every third of it for a
	// handler still running, as [Source.LeaseInterval] says. It is rounded up
	// to whole seconds, and at most 12 h. Default [DefaultVisibilityTimeout],
	// 30 s.
	VisibilityTimeout time.Duration
	// WaitTime is a receive's long poll. SQS waits that long for a message
	// before it answers with none. It is rounded up to whole seconds, and at
	// most 20 s. A negative value means short polling. That answers at once and
	// costs a request each time. An idle queue is then asked at most once every
	// EmptyMaxDelay. Default [DefaultWaitTime], 20 s.
	WaitTime time.Duration
	// MaxMessages is the most messages a receive takes, 1 to 10. They wait in
	// the Source for a worker, with their visibility timeout running. Default
	// [DefaultMaxMessages], 10.
	MaxMessages int

	// IDAttribute names the message attribute holding the message's ID. Default
	// [broker.DefaultIDHeader], "Inbox-Id".
	IDAttribute string
	// TypeAttribute names the message attribute holding the message's type.
	// Default [broker.DefaultTypeHeader], "Inbox-Type".
	TypeAttribute string
	// IDFromMessageID gives a message without the ID attribute the MessageId
	// that SQS assigned to it. That ID is the same on every redelivery of one
	// send. A producer that sends a message twice, as a retried send does,
	// makes two messages with two IDs. The inbox cannot tell them apart. Without
	// IDFromMessageID, such a message is dead-lettered as having no ID. Default
	// false.
	IDFromMessageID bool

	// RetryDelay is the wait after a failed receive. It doubles on each failure
	// in a row, with ±20 % jitter. Default [DefaultRetryDelay], 100 ms.
	RetryDelay time.Duration
	// RetryMaxDelay caps the wait between failed receives. Default
	// [DefaultRetryMaxDelay], 10 s.
	RetryMaxDelay time.Duration

	// EmptyDelay is the pause after a receive that brought no message before
	// its long poll ended. With short polling, that is every empty receive. It
	// doubles on each such receive in a row, up to EmptyMaxDelay. It starts
	// over when a message arrives. An empty long poll that waited its WaitTime
	// is not followed by a pause. Zero or negative means the default. Default
	// [DefaultEmptyDelay], 100 ms.
	EmptyDelay time.Duration
	// EmptyMaxDelay caps that pause. It is the longest a message waits in an
	// idle queue for a short-polling Source. Zero or negative means the
	// default. Default [DefaultEmptyMaxDelay], 1 s.
	EmptyMaxDelay time.Duration

	// Logger receives failed receives, which are retried, releases at Close and
	// Terms. Default [slog.Default].
	Logger *slog.Logger
}

// withDefaults validates cfg and fills in the defaults.
func (cfg *Config) withDefaults() (Config, error) {
	if cfg == nil || cfg.Client == nil || cfg.Queue == "" {
		return Config{}, fmt.Errorf("%w: Config.Client and Config.Queue are required", ErrInvalidConfig)
	}
	c := *cfg
	switch {
	case c.VisibilityTimeout == 0:
		c.VisibilityTimeout = DefaultVisibilityTimeout
	case c.VisibilityTimeout < 0 || c.VisibilityTimeout > maxVisibility:
		return Config{}, fmt.Errorf("%w: VisibilityTimeout %v is outside 1 s to 12 h", ErrInvalidConfig, c.VisibilityTimeout)
	}
	c.VisibilityTimeout = ceilSeconds(c.VisibilityTimeout)
	switch {
	case c.WaitTime == 0:
		c.WaitTime = DefaultWaitTime
	case c.WaitTime < 0:
		c.WaitTime = 0
	case c.WaitTime > maxWaitTime:
		return Config{}, fmt.Errorf("%w: WaitTime %v is over SQS's 20 s", ErrInvalidConfig, c.WaitTime)
	}
	c.WaitTime = ceilSeconds(c.WaitTime)
	switch {
	case c.MaxMessages == 0:
		c.MaxMessages = DefaultMaxMessages
	case c.MaxMessages < 0 || c.MaxMessages > maxMessages:
		return Config{}, fmt.Errorf("%w: MaxMessages %d is outside 1 to 10", ErrInvalidConfig, c.MaxMessages)
	}
	if c.IDAttribute == "" {
		c.IDAttribute = broker.DefaultIDHeader
	}
	if c.TypeAttribute == "" {
		c.TypeAttribute = broker.DefaultTypeHeader
	}
	for _, name := range []string{c.IDAttribute, c.TypeAttribute} {
		if err := checkAttributeName(name); err != nil {
			return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.RetryMaxDelay <= 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.EmptyDelay <= 0 {
		c.EmptyDelay = DefaultEmptyDelay
	}
	if c.EmptyMaxDelay <= 0 {
		c.EmptyMaxDelay = DefaultEmptyMaxDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// PublisherConfig configures a [Publisher]. Zero values mean the defaults.
// Its attribute names must match the consumers' Config.
type PublisherConfig struct {
	// IDAttribute names the message attribute for the message's ID. Default
	// [broker.DefaultIDHeader], "Inbox-Id".
	IDAttribute string
	// TypeAttribute names the message attribute for Message.Type. Default
	// [broker.DefaultTypeHeader], "Inbox-Type".
	TypeAttribute string
	// MessageGroup is the message group, on a FIFO queue, of a message without
	// a Key. One group is handed out in order, one message in flight at a time.
	// Default [DefaultMessageGroup], "default".
	MessageGroup string
	// MaxMessageSize is the largest message Publish sends. That counts the
	// body, which is the payload or its base64, and every message attribute's
	// name, type and value. Raise it to at most 1 MiB for queues whose
	// MaximumMessageSize allows more. Default [DefaultMaxMessageSize], 256 KiB.
	MaxMessageSize int
	// FreshDeduplication gives each Publish to a FIFO queue a random
	// deduplication ID of its own, so that the queue never drops it as a
	// copy of an earlier send of the same message ID. A replay of a dead
	// letter sets it: the original went out with the message ID, and the
	// queue would drop the replay, reported sent, for 5 minutes. The
	// consumer's inbox still sees the message ID and skips a duplicate. An
	// outbox relay must not set it: there the queue's deduplication drops
	// a re-publish after a lost reply. Default false.
	FreshDeduplication bool
}

func (cfg *PublisherConfig) withDefaults() (PublisherConfig, error) {
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.IDAttribute == "" {
		c.IDAttribute = broker.DefaultIDHeader
	}
	if c.TypeAttribute == "" {
		c.TypeAttribute = broker.DefaultTypeHeader
	}
	for _, name := range []string{c.IDAttribute, c.TypeAttribute} {
		if err := checkAttributeName(name); err != nil {
			return PublisherConfig{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if c.MessageGroup == "" {
		c.MessageGroup = DefaultMessageGroup
	}
	if err := checkGroup(c.MessageGroup); err != nil {
		return PublisherConfig{}, fmt.Errorf("%w: MessageGroup: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.MaxMessageSize == 0:
		c.MaxMessageSize = DefaultMaxMessageSize
	case c.MaxMessageSize < 1024 || c.MaxMessageSize > 1<<20:
		return PublisherConfig{}, fmt.Errorf("%w: MaxMessageSize %d is outside SQS's 1 KiB to 1 MiB", ErrInvalidConfig, c.MaxMessageSize)
	}
	return c, nil
}

// ceilSeconds rounds d up to whole seconds: SQS counts in seconds.
func ceilSeconds(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}
