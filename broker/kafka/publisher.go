package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
)

// Publisher produces to Kafka with the message's ID in the IDHeader
// header and Message.Key as the record's key.
type Publisher struct {
	cl                   *kgo.Client
	idHeader, typeHeader string
}

var _ broker.Publisher = (*Publisher)(nil)

// PublisherConfig configures a Publisher. Zero values mean the defaults.
// Its header names must match the consumers' Config.
type PublisherConfig struct {
	// IDHeader names the header for the message's ID. Default
	// broker.DefaultIDHeader.
	IDHeader string
	// TypeHeader names the header for Message.Type. Default
	// broker.DefaultTypeHeader.
	TypeHeader string
}

// NewPublisher returns a Publisher on cl, a producer client the caller
// owns (and closes). cfg may be nil. A nil cl is an error wrapping
// ErrInvalidConfig.
func NewPublisher(cl *kgo.Client, cfg *PublisherConfig) (*Publisher, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: nil *kgo.Client", ErrInvalidConfig)
	}
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.IDHeader == "" {
		c.IDHeader = broker.DefaultIDHeader
	}
	if c.TypeHeader == "" {
		c.TypeHeader = broker.DefaultTypeHeader
	}
	return &Publisher{cl: cl, idHeader: c.IDHeader, typeHeader: c.TypeHeader}, nil
}

// Publish produces msg to the topic msg.Subject and waits for the broker's
// ack. msg.Key is the record's key (none when empty), which the client's
// partitioner maps to a partition (franz-go's default: the same key, the
// same partition). A record over the producer's max batch size is an
// error wrapping broker.ErrInvalidMessage; a topic that does not exist
// fails after the client's unknown-topic retries (kgo.UnknownTopicRetries).
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafka: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	if msg.ID == "" {
		return fmt.Errorf("kafka: publish to %q: %w: the message has no ID", msg.Subject, broker.ErrInvalidMessage)
	}
	r := &kgo.Record{Topic: msg.Subject, Value: msg.Payload}
	if msg.Key != "" {
		r.Key = []byte(msg.Key)
	}
	for k, v := range msg.Headers {
		if k != p.idHeader && k != p.typeHeader {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.idHeader, Value: []byte(msg.ID)})
	if msg.Type != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.typeHeader, Value: []byte(msg.Type)})
	}
	err := p.cl.ProduceSync(ctx, r).FirstErr()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge):
		return fmt.Errorf("kafka: publish %q to %q: %w: payload of %d bytes: %w", msg.ID, msg.Subject, broker.ErrInvalidMessage, len(msg.Payload), err)
	}
	return fmt.Errorf("kafka: publish %q to %q: %w", msg.ID, msg.Subject, err)
}
