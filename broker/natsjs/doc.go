// Package natsjs connects the inbox's consumer runtime to NATS JetStream,
// with a durable pull consumer of nats.go's jetstream package.
//
//	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: "PAYMENTS", Durable: "billing"})
//	err = inbox.Consume(ctx, ib, src, handler, nil)
//
// A message's ID is its Nats-Msg-Id header, which [Publisher] sets.
// JetStream also uses it to drop duplicate publishes within the stream's
// duplicate window. Retries use NakWithDelay. Acks are double acks, which
// wait for the server's confirmation. Message.Headers holds the producer's
// headers only. NATS's own are left out, such as Nats-Rollup, as
// [OwnHeader] tells. A dead letter replayed thus does not act on the
// stream.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
)

// Config configures a [Source]. Stream and Durable are required. The zero
// values of the others mean the defaults.
type Config struct {
	// Stream is the JetStream stream to consume.
	Stream string
	// Durable names the durable pull consumer, created or updated by
	// NewSource. Use one per logical consumer.
	Durable string
	// FilterSubjects limits the consumer to these subjects. Default all of the
	// stream's.
	FilterSubjects []string
	// AckWait is how long the server waits for an ack before redelivering. The
	// consumer runtime reports long handlers InProgress every AckWait/3.
	// Default [DefaultAckWait], 30 s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of a message. JetStream then stops
	// delivering it, silently. Set a limit only well above the inbox's
	// MaxAttempts, which is 10 by default. Retries after database errors are
	// not attempts. A value of 0 means unlimited, and the inbox dead-letters
	// failing messages itself. Default 0.
	MaxDeliver int
	// MaxAckPending bounds the deliveries in flight. Default
	// [DefaultMaxAckPending], 1000.
	MaxAckPending int
	// PullBatch is the number of messages pulled ahead of the workers. They
	// wait in the client with their AckWait running and no lease. Keep it near
	// the consumer runtime's Workers. For batches, with
	// ConsumerConfig.BatchSize, make it at least Workers × BatchSize, or
	// batches rarely fill. inbox.Consume warns of it. Default
	// [DefaultPullBatch], 8.
	PullBatch int
	// TypeHeader names the header holding the message type. Default
	// [broker.DefaultTypeHeader], "Inbox-Type".
	TypeHeader string
	// Logger receives transient consumer errors. They are missed heartbeats
	// while the server restarts, or after nats.go lost track of a pull request.
	// Default [slog.Default].
	Logger *slog.Logger
}

// The defaults of Config.
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
	DefaultPullBatch     = 8
)

// pullHeartbeat is the idle heartbeat asked of the server for each pull
// request. nats.go's Consume can lose track of its pull requests: when
// every message it counts as pending arrives while it is still sending
// the request that follows them (its checkPending skips a new request
// while one is being sent, and no later message calls it again), it waits
// with no request left on the server. Only a missed heartbeat (two
// intervals without one) makes it pull again, so the interval bounds
// that stall: 2 s here, instead of 30 s with the default (half the pull
// request's 30 s expiry).
const pullHeartbeat = time.Second

// Source is a broker.Source on a durable JetStream pull consumer.
type Source struct {
	cfg     Config
	js      jetstream.JetStream
	cc      jetstream.ConsumeContext
	msgs    chan jetstream.Msg
	failed  *latch.Error  // the terminal error
	stopped chan struct{} // closed by Close
}

var (
	_ broker.LeaseSource        = (*Source)(nil)
	_ broker.RedeliveryWindower = (*Source)(nil)
	_ broker.Prefetcher         = (*Source)(nil)
)

// Prefetch returns the messages pulled ahead, PullBatch, at most
// MaxAckPending.
func (s *Source) Prefetch() int { return min(s.cfg.MaxAckPending, s.cfg.PullBatch) }

// RedeliveryWindow returns the stream's MaxAge. It returns 0 when the
// stream keeps messages without a time limit, as by default.
func (s *Source) RedeliveryWindow(ctx context.Context) (time.Duration, error) {
	return RedeliveryWindow(ctx, s.js, s.cfg.Stream)
}

// RedeliveryWindow returns stream's MaxAge, without a consumer. It returns
// 0 when the stream keeps messages without a time limit. It is what
// [Source.RedeliveryWindow] reports. inbox check compares it with the
// retention.
func RedeliveryWindow(ctx context.Context, js jetstream.JetStream, stream string) (time.Duration, error) {
	cfg, err := streamConfig(ctx, js, stream)
	if err != nil {
		return 0, err
	}
	return cfg.MaxAge, nil
}

func streamConfig(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamConfig, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, noStream(stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsjs: stream %s: %w", stream, err)
	}
	return &info.Config, nil
}

// ErrInvalidConfig is wrapped by NewSource's error for a nil JetStream or
// a missing field.
var ErrInvalidConfig = errors.New("natsjs: invalid config")

// NewSource creates or updates the durable consumer and starts consuming.
func NewSource(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Source, error) {
	if cfg == nil || cfg.Stream == "" || cfg.Durable == "" {
		return nil, fmt.Errorf("%w: Config.Stream and Config.Durable are required", ErrInvalidConfig)
	}
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", ErrInvalidConfig)
	}
	c := *cfg
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = -1
	}
	if c.PullBatch <= 0 {
		c.PullBatch = DefaultPullBatch
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.TypeHeader == "" {
		c.TypeHeader = broker.DefaultTypeHeader
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	cc := jetstream.ConsumerConfig{
		Durable:       c.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
	}
	if len(c.FilterSubjects) == 1 { // servers before 2.10 refuse the list, even of one
		cc.FilterSubject = c.FilterSubjects[0]
	} else {
		cc.FilterSubjects = c.FilterSubjects
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, cc)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, noStream(c.Stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("natsjs: consumer %s on stream %s: %w", c.Durable, c.Stream, err)
	}
	s := &Source{cfg: c, js: js, msgs: make(chan jetstream.Msg), failed: latch.New(), stopped: make(chan struct{})}
	s.cc, err = cons.Consume(s.receive, jetstream.ConsumeErrHandler(s.consumeError),
		jetstream.PullMaxMessages(min(c.MaxAckPending, c.PullBatch)), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("natsjs: consume %s: %w", c.Durable, err)
	}
	return s, nil
}

// receive hands a message to a waiting Next; it blocks until one takes it,
// so that at most a pull batch waits in the client.
func (s *Source) receive(m jetstream.Msg) {
	select {
	case s.msgs <- m:
	case <-s.stopped:
	case <-s.failed.Done():
	}
}

// consumeError surfaces terminal errors (the consumer or stream deleted, a
// bad request, the connection closed for good) to Next instead of letting
// consumption stop silently; other errors (missed heartbeats while the
// server restarts) are logged and ridden out.
func (s *Source) consumeError(_ jetstream.ConsumeContext, err error) {
	switch {
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
		errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrBadRequest),
		errors.Is(err, jetstream.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionClosed):
		s.failed.Set(fmt.Errorf("natsjs: consumer %s: %w", s.cfg.Durable, err))
	default:
		s.cfg.Logger.Warn("natsjs: consumer error, retrying", "consumer", s.cfg.Durable, "error", err)
	}
}

// Next returns the next delivery.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case m := <-s.msgs:
		return s.delivery(m), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.stopped:
		return nil, broker.ErrSourceClosed
	case <-s.failed.Done():
		return nil, s.failed.Err()
	}
}

// LeaseInterval is a third of AckWait.
func (s *Source) LeaseInterval() time.Duration { return s.cfg.AckWait / 3 }

// Close stops consuming. Unacked messages are redelivered after AckWait.
func (s *Source) Close() error {
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
		s.cc.Stop()
	}
	return nil
}

func (s *Source) delivery(m jetstream.Msg) *delivery {
	msg := &broker.Message{Subject: m.Subject(), Payload: m.Data(), System: broker.SystemNATS}
	if h := m.Headers(); len(h) > 0 {
		msg.ID = h.Get(jetstream.MsgIDHeader)
		msg.Type = h.Get(s.cfg.TypeHeader)
		msg.Headers = make(map[string]string, len(h))
		for k, v := range h {
			if len(v) > 0 && !OwnHeader(k) {
				msg.Headers[k] = v[0]
			}
		}
	}
	if md, err := m.Metadata(); err == nil {
		msg.Deliveries = int(md.NumDelivered)
		msg.Time = md.Timestamp // when the stream stored it
	}
	return &delivery{m: m, msg: msg}
}

type delivery struct {
	m   jetstream.Msg
	msg *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack acks and waits for the server's confirmation.
func (d *delivery) Ack(ctx context.Context) error { return d.m.DoubleAck(ctx) }

func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	if delay <= 0 {
		return d.m.Nak()
	}
	return d.m.NakWithDelay(delay)
}

func (d *delivery) Term(_ context.Context, reason string) error { return d.m.TermWithReason(reason) }

func (d *delivery) InProgress(context.Context) error { return d.m.InProgress() }

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
// duplicate. It wraps ErrDuplicate.
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

func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

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
		return noStreamFor(msg.ID, msg.Subject, err)
	}
	return fmt.Errorf("natsjs: publish %q to %q: %w", msg.ID, msg.Subject, err)
}

// OwnHeader tells whether a header is NATS's own rather than the
// producer's. Such a name begins with "Nats-", in that case exactly.
//   - JetStream's controls, such as Nats-Rollup, Nats-Expected-Last-Sequence
//     and Nats-TTL.
//   - What the server adds, such as Nats-Stream and Nats-Sequence.
//   - Nats-Msg-Id, which Publisher sets from Message.ID.
//
// Source leaves them out of Message.Headers. Publisher never sends them
// from Message.Headers. Published again, in a replay or by a relay, they
// would act again, as a rollup purging the stream. NATS matches header
// names case-sensitively. So nats-rollup or NATS-TTL are a producer's own
// headers. JetStream ignores them, and they round-trip.
func OwnHeader(name string) bool { return strings.HasPrefix(name, "Nats-") }

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
