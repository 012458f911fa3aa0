package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
)

// Publisher publishes to JetStream with the message's ID as Nats-Msg-Id,
// the header JetStream deduplicates by. Message.Key is ignored, since NATS
// has no partition key. The subject orders.
type Publisher struct {
	js         jetstream.JetStream
	typeHeader string
	refuseDups bool
}

var _ broker.Publisher = (*Publisher)(nil)

// PublisherConfig configures a Publisher. Zero values mean the defaults.
type PublisherConfig struct {
	// TypeHeader names the header for Message.Type. It must match the
	// consumers' Config.TypeHeader. Default [broker.DefaultTypeHeader].
	TypeHeader string
	// RefuseDuplicates makes Publish return a [*DuplicateError] instead of nil
	// when JetStream dropped the message as a duplicate. JetStream does that
	// when it saw the ID within the stream's duplicate window. The error wraps
	// [ErrDuplicate]. Without it, a duplicate is a success, as an outbox relay
	// that publishes again after a lost ack wants it. A publisher whose message
	// must reach the consumers again sets it, as inbox dead-letters replay
	// does. Default false.
	RefuseDuplicates bool
}

// ErrDuplicate is wrapped by Publish's error, with
// PublisherConfig.RefuseDuplicates, for a message that JetStream dropped
// because it saw its ID within the stream's duplicate window.
var ErrDuplicate = errors.New("natsjs: JetStream dropped the message as a duplicate")

// DuplicateError is the error of a publish that JetStream dropped as a
// duplicate. It wraps ErrDuplicate and [broker.ErrDuplicate].
type DuplicateError struct {
	ID, Stream string
	// Window is the stream's duplicate window, StreamConfig.Duplicates, which
	// is 2 min by default. It is 0 when it could not be read. A publish of the
	// ID is stored once the window has passed since its first.
	Window time.Duration
}

func (e *DuplicateError) Error() string {
	w := "its duplicate window"
	if e.Window > 0 {
		w = fmt.Sprintf("its duplicate window of %v", e.Window)
	}
	return fmt.Sprintf("%v: stream %s saw ID %q within %s and did not store it", ErrDuplicate, e.Stream, e.ID, w)
}

func (e *DuplicateError) Unwrap() []error { return []error{ErrDuplicate, broker.ErrDuplicate} }

// NewPublisher returns a Publisher on js, which the caller owns. cfg may
// be nil. A nil js is an error wrapping ErrInvalidConfig.
func NewPublisher(js jetstream.JetStream, cfg *PublisherConfig) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.TypeHeader == "" {
		c.TypeHeader = broker.DefaultTypeHeader
	}
	return &Publisher{js: js, typeHeader: c.TypeHeader, refuseDups: c.RefuseDuplicates}, nil
}

// Publish publishes msg to msg.Subject and waits for the stream's ack.
//
// JetStream drops a message whose ID it has seen within the stream's
// duplicate window, and acks it all the same. Publish then returns nil, or
// a [*DuplicateError] with PublisherConfig.RefuseDuplicates. A header, ID
// or type that NATS would refuse or alter is an error wrapping
// broker.ErrInvalidMessage. So is a message over the server's max_payload.
// A publish that no stream answers wraps jetstream.ErrNoStreamResponse. Its
// text says whether a stream captures the subject but has no leader, as
// for the seconds a cluster elects one, or none does.
// A Message's Nats-* headers are never sent, as [OwnHeader] tells. So
// JetStream controls such as Nats-TTL or Nats-Expected-Last-Sequence cannot
// be set through Message.Headers.
func (p *Publisher) Publish(ctx context.Context, msg *broker.Message) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("natsjs: publish %q to %q: %w", msg.ID, msg.Subject, err)
	}
	if err := p.check(msg); err != nil {
		return fmt.Errorf("natsjs: publish %q to %q: %w: %w", msg.ID, msg.Subject, broker.ErrInvalidMessage, err)
	}
	nm := &nats.Msg{Subject: msg.Subject, Data: msg.Payload, Header: nats.Header{}}
	for k, v := range msg.Headers {
		if !OwnHeader(k) {
			nm.Header.Set(k, v)
		}
	}
	if msg.Type != "" {
		nm.Header.Set(p.typeHeader, msg.Type)
	}
	ack, err := p.js.PublishMsg(ctx, nm, jetstream.WithMsgID(msg.ID))
	switch {
	case err == nil && ack.Duplicate && p.refuseDups:
		de := &DuplicateError{ID: msg.ID, Stream: ack.Stream}
		if cfg, err := streamConfig(ctx, p.js, ack.Stream); err == nil {
			de.Window = cfg.Duplicates
		}
		return fmt.Errorf("natsjs: publish %q to %q: %w", msg.ID, msg.Subject, de)
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("natsjs: publish %q to %q: %w: payload of %d bytes: %w",
			msg.ID, msg.Subject, broker.ErrInvalidMessage, len(msg.Payload), err)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return p.noResponse(ctx, msg, err)
	}
	return fmt.Errorf("natsjs: publish %q to %q: %w", msg.ID, msg.Subject, err)
}

// check refuses what nats.go would refuse with a vague error (a header
// name) or alter silently (a value with CR or LF, which it replaces by
// spaces, or with leading or trailing white space, which it trims): the
// consumer would see another ID or header than was published.
func (p *Publisher) check(msg *broker.Message) error {
	if msg.ID == "" {
		return errors.New("the message has no ID")
	}
	if err := checkValue(msg.ID); err != nil {
		return fmt.Errorf("ID: %w", err)
	}
	if err := checkValue(msg.Type); err != nil {
		return fmt.Errorf("type: %w", err)
	}
	for k, v := range msg.Headers {
		if OwnHeader(k) {
			continue // not sent
		}
		if !validHeaderName(k) {
			return fmt.Errorf("header name %q: NATS takes printable ASCII without space or any of %s", k, headerNameForbidden)
		}
		if err := checkValue(v); err != nil {
			return fmt.Errorf("header %q: %w", k, err)
		}
	}
	return nil
}

// headerNameForbidden are the printable ASCII characters that nats.go
// refuses in a header name (ADR-4 forbids only the colon).
const headerNameForbidden = `"(),/:;<=>?@[\]{}`

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(headerNameForbidden, c) >= 0 {
			return false
		}
	}
	return true
}

func checkValue(v string) error {
	switch {
	case strings.ContainsAny(v, "\r\n"):
		return fmt.Errorf("value %q: NATS cannot carry CR or LF in a header", v)
	case textproto.TrimString(v) != v:
		return fmt.Errorf("value %q: NATS trims leading and trailing white space from a header", v)
	}
	return nil
}

// lookupTimeout bounds the question of which stream captures a subject,
// asked after a publish that no stream answered.
const lookupTimeout = time.Second

// noResponse is the error of a publish that no stream answered. It asks
// JetStream which stream captures the subject. A stream that does has no
// leader at the moment, as while a cluster elects one, and a later
// publish succeeds. Only when none does is the stream missing.
func (p *Publisher) noResponse(ctx context.Context, msg *broker.Message, err error) error {
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	stream, lerr := p.js.StreamNameBySubject(lctx, msg.Subject)
	switch {
	case lerr == nil:
		return noLeader(msg.ID, msg.Subject, stream, err)
	case errors.Is(lerr, jetstream.ErrStreamNotFound):
		return noStreamFor(msg.ID, msg.Subject, err)
	}
	return noAnswer(msg.ID, msg.Subject, lerr, err)
}
