package kafka

import (
	"context"
	"errors"

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

// NewPublisher returns a Publisher on cl (a producer client); idHeader and
// typeHeader default to broker.DefaultIDHeader and broker.DefaultTypeHeader, and must match the
// consumers' Config.
func NewPublisher(cl *kgo.Client, idHeader, typeHeader string) *Publisher {
	if idHeader == "" {
		idHeader = broker.DefaultIDHeader
	}
	if typeHeader == "" {
		typeHeader = broker.DefaultTypeHeader
	}
	return &Publisher{cl: cl, idHeader: idHeader, typeHeader: typeHeader}
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
