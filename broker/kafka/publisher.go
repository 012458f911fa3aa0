package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
)

// Publisher produces to Kafka with the message's ID in the IDHeader
// header.
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
// ack. The record has no key: partitioning is franz-go's default.
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if msg.ID == "" {
		return errors.New("kafka: publish: the message has no ID")
	}
	r := &kgo.Record{Topic: msg.Subject, Value: msg.Payload}
	for k, v := range msg.Headers {
		if k != p.idHeader && k != p.typeHeader {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.idHeader, Value: []byte(msg.ID)})
	if msg.Type != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: p.typeHeader, Value: []byte(msg.Type)})
	}
	return p.cl.ProduceSync(ctx, r).FirstErr()
}
