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

// NewPublisher returns a Publisher on cl, a producer client the caller owns
// and closes. cfg may be nil. A nil cl is an error wrapping
// [ErrInvalidConfig].
//
// Publish returns once its context is done, though the client may still
// hold the record. An idempotent client, franz-go's default, does not fail
// a record it has sent until the broker answers. It sends it again once the
// cluster is back, a copy the consumer's inbox skips. The partition's later
// records wait behind it. A client built with
// [kgo.AllowIdempotentProduceCancellation] fails such a record instead, as
// a relay's client should. The broker may have the record all the same.
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

// Publish produces msg to the topic msg.Subject. It waits for the broker's
// ack, or for ctx to end, as [NewPublisher] tells.
//
// msg.Key is the record's key, and none when empty. The client's
// partitioner maps it to a partition. With franz-go's default, the same key
// goes to the same partition. A record over the producer's max batch size
// is an error wrapping broker.ErrInvalidMessage. A topic that does not
// exist fails after the client's unknown-topic retries, as set by
// kgo.UnknownTopicRetries.
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
	err := p.produce(ctx, r)
	for try := 1; try < siblingTries && ctx.Err() == nil && isContextErr(err); try++ {
		// Failed with its batch, whose first record's context ended
		// (kgo.Produce): not sent, or sent and perhaps dropped.
		err = p.produce(ctx, r)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errAbandoned):
		return fmt.Errorf("kafka: publish %q to %q: no ack before the context ended: %w", msg.ID, msg.Subject, ctx.Err())
	case errors.Is(err, kerr.MessageTooLarge):
		return fmt.Errorf("kafka: publish %q to %q: %w: payload of %d bytes: %w", msg.ID, msg.Subject, broker.ErrInvalidMessage, len(msg.Payload), err)
	}
	return fmt.Errorf("kafka: publish %q to %q: %w", msg.ID, msg.Subject, err)
}

// siblingTries bounds Publish's tries of a record that fails with the
// context error of another record of its batch.
const siblingTries = 3

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// errAbandoned is produce's error when ctx ended before the record's
// outcome was known.
var errAbandoned = errors.New("kafka: produce abandoned")

// produce is ProduceSync bounded by ctx. The client checks a record's
// context before it sends it and after an answer. A sent record waits
// for the answer or the request's timeout (ProduceRequestTimeout plus
// RequestTimeoutOverhead, 20 s by default); an idempotent client's waits
// for an answer, which never comes while the cluster is gone. The
// goroutine ends with the record's outcome, at the latest when the
// client is closed.
func (p *Publisher) produce(ctx context.Context, r *kgo.Record) error {
	res := make(chan error, 1)
	go func() { res <- p.cl.ProduceSync(ctx, r).FirstErr() }()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-res: // an outcome known as ctx ended wins
		return err
	default:
		return errAbandoned
	}
}
