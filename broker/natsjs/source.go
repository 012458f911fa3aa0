package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
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
