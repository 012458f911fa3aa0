package sqs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/inboxkit/inbox/broker"
)

// Publisher sends messages to SQS queues with the message's ID, type and
// headers as message attributes.
type Publisher struct {
	cl  *awssqs.Client
	cfg PublisherConfig

	mu   sync.Mutex
	urls map[string]string // queue name -> URL
}

var _ broker.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher on cl, a client the caller configures and
// owns. cfg may be nil. A nil cl, or a config it refuses, is an error
// wrapping [ErrInvalidConfig].
func NewPublisher(cl *awssqs.Client, cfg *PublisherConfig) (*Publisher, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: nil *sqs.Client", ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Publisher{cl: cl, cfg: c, urls: map[string]string{}}, nil
}

// Publish sends msg to the queue that msg.Subject names, and returns once
// SQS has it. The Subject is a URL, or a name resolved once with
// GetQueueUrl.
//
// The ID goes in the IDAttribute attribute, and the type, when set, in
// TypeAttribute. Each header goes in an attribute of its name. SQS takes ten
// attributes in all. A value that SQS cannot carry as a String goes as
// Binary. An empty one goes with the data type "String.inbox-empty". A
// payload that is not SQS's text goes in base64. An empty payload goes as
// "-". [BodyEncodingAttribute] then says which.
//
// On a FIFO queue, the message group is msg.Key, or
// PublisherConfig.MessageGroup without one. The deduplication ID is the
// message ID. When SQS would refuse the ID itself, it is its SHA-256, as
// "sha256-<hex>". SQS drops a re-publish within its 5-minute deduplication
// interval, unless PublisherConfig.FreshDeduplication is set. A standard
// queue ignores Key.
//
// Some messages are refused with an error wrapping
// [broker.ErrInvalidMessage].
//   - A message without ID.
//   - A message with more than ten attributes, or an attribute name SQS
//     refuses.
//   - An invalid FIFO group.
//   - A message over MaxMessageSize.
//
// A queue that does not exist is an error wrapping [ErrQueueNotFound].
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqs: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	in, err := p.input(msg)
	if err != nil {
		return fmt.Errorf("sqs: publish %q to %q: %w: %w", msg.ID, msg.Subject, broker.ErrInvalidMessage, err)
	}
	if in.QueueUrl, err = p.queueURL(ctx, msg.Subject); err != nil {
		return fmt.Errorf("sqs: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	if _, err := p.cl.SendMessage(ctx, in); err != nil {
		err = classify(err)
		if errors.Is(err, ErrQueueNotFound) {
			p.mu.Lock()
			delete(p.urls, msg.Subject) // resolve it again next time
			p.mu.Unlock()
		}
		return fmt.Errorf("sqs: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	return nil
}

// input builds the SendMessage input of msg, but its queue URL.
func (p *Publisher) input(msg *broker.Message) (*awssqs.SendMessageInput, error) {
	if msg.ID == "" {
		return nil, errors.New("the message has no ID")
	}
	body, encoding := encodeBody(msg.Payload)
	attrs := make(map[string]types.MessageAttributeValue, len(msg.Headers)+3)
	var names []string // the headers', for an error
	for k, v := range msg.Headers {
		if k == p.cfg.IDAttribute || k == p.cfg.TypeAttribute || k == BodyEncodingAttribute {
			continue // the message's own fields, or ours, set below
		}
		if err := checkAttributeName(k); err != nil {
			return nil, fmt.Errorf("header: %w", err)
		}
		attrs[k] = attributeValue(v)
		names = append(names, k)
	}
	attrs[p.cfg.IDAttribute] = attributeValue(msg.ID)
	if msg.Type != "" {
		attrs[p.cfg.TypeAttribute] = attributeValue(msg.Type)
	}
	if encoding != "" {
		attrs[BodyEncodingAttribute] = attributeValue(encoding)
	}
	if len(attrs) > maxAttributes {
		slices.Sort(names)
		var quoted []string
		for _, n := range names {
			quoted = append(quoted, fmt.Sprintf("%q", n))
		}
		return nil, fmt.Errorf("%d message attributes (%d of the message's own, and the headers %s), SQS takes at most %d",
			len(attrs), len(attrs)-len(names), strings.Join(quoted, ", "), maxAttributes)
	}
	size := len(body)
	for k, a := range attrs {
		size += attributeSize(k, a)
	}
	if size > p.cfg.MaxMessageSize {
		return nil, fmt.Errorf("a message of %d bytes (a payload of %d bytes, sent as %d, and the attributes), over the limit of %d",
			size, len(msg.Payload), len(body), p.cfg.MaxMessageSize)
	}
	in := &awssqs.SendMessageInput{MessageBody: aws.String(body), MessageAttributes: attrs}
	if fifo(msg.Subject) {
		group := msg.Key
		if group == "" {
			group = p.cfg.MessageGroup
		}
		if err := checkGroup(group); err != nil {
			return nil, fmt.Errorf("key as FIFO message group: %w", err)
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(dedupID(msg.ID))
		if p.cfg.FreshDeduplication {
			in.MessageDeduplicationId = aws.String(freshDedupID())
		}
	}
	return in, nil
}

// dedupID is the FIFO deduplication ID of a message ID.
func dedupID(id string) string {
	if checkGroup(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// freshDedupID is a random deduplication ID, never that of a message ID
// (which has no "fresh-" prefix with 32 hex digits unless it is one).
func freshDedupID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "fresh-" + hex.EncodeToString(b[:])
}

// queueURL returns the URL of the queue q names or locates.
func (p *Publisher) queueURL(ctx context.Context, q string) (*string, error) {
	if isURL(q) {
		return aws.String(q), nil
	}
	p.mu.Lock()
	u, ok := p.urls[q]
	p.mu.Unlock()
	if ok {
		return aws.String(u), nil
	}
	out, err := p.cl.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
	if err != nil {
		return nil, classify(err)
	}
	p.mu.Lock()
	p.urls[q] = aws.ToString(out.QueueUrl)
	p.mu.Unlock()
	return out.QueueUrl, nil
}
