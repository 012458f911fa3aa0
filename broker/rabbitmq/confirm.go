package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	// ErrNotConfirmed says the broker refused a publish with a negative
	// confirm, or the channel closed before it confirmed. The message may or
	// may not have been taken.
	ErrNotConfirmed = errors.New("rabbitmq: publish not confirmed")
	// ErrUnroutable says no queue took a published message. The broker
	// returned the mandatory publish.
	ErrUnroutable = errors.New("rabbitmq: message unroutable")
)

// confirmer publishes on a channel in confirm mode with the mandatory flag
// and reports a returned (unroutable) message as ErrUnroutable. It is safe
// for concurrent use.
//
// The broker sends a mandatory message's basic.return before its
// basic.ack, and amqp091-go hands both over from one reader goroutine, in
// order: the return goes to drain over an unbuffered channel before the
// ack completes the publish's confirmation. A publisher that saw its ack
// syncs with drain (barrier) and so sees any return of its message.
// Returns are matched by message_id: a return marks every publish of that
// ID in flight on the channel, which at worst fails a concurrent publish
// of the same ID (the caller retries; a duplicate is harmless).
type confirmer struct {
	ch       *amqp.Channel
	mu       sync.Mutex
	inflight map[string][]*pending
	barrier  chan struct{}
	drained  chan struct{}
	// closed is closed once the channel is, after closeErr is set to the
	// broker's reason (a missing exchange, a message too large), which a
	// publish's error then carries instead of a bare negative confirm.
	closed   chan struct{}
	closeErr *amqp.Error
}

type pending struct{ returned *amqp.Return }

func newConfirmer(conn *amqp.Connection) (*confirmer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	c := &confirmer{ch: ch, inflight: map[string][]*pending{}, barrier: make(chan struct{}), drained: make(chan struct{}),
		closed: make(chan struct{})}
	go c.drain(ch.NotifyReturn(make(chan amqp.Return)))
	go c.watch(ch.NotifyClose(make(chan *amqp.Error, 1)))
	return c, nil
}

func (c *confirmer) watch(closes <-chan *amqp.Error) {
	defer close(c.closed)
	for e := range closes {
		c.mu.Lock()
		c.closeErr = e
		c.mu.Unlock()
	}
}

// closeReason returns the broker's reason for closing the channel, when
// it is closed, so that a publish's error says what was wrong; it waits
// for the close's notice, which amqp091-go sends just before it fails the
// pending confirms, unless ctx is done first.
func (c *confirmer) closeReason(ctx context.Context) string {
	if !c.ch.IsClosed() {
		return ""
	}
	select {
	case <-c.closed:
	case <-ctx.Done():
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeErr == nil {
		return ": the channel was closed"
	}
	return ": the broker closed the channel: " + c.closeErr.Error()
}

// retire closes the channel after a negative confirm, so that the next
// publish opens a new one. A channel's quorum queue client stays with the
// leader it first found. Opened while that leader's node was down, it is
// refused until the node returns (RabbitMQ 3.10: a cluster test saw every
// publish nacked for as long as the node was down). A new channel finds the
// new leader. Publishes in flight on the channel fail, and are retried.
func (c *confirmer) retire() { _ = c.ch.Close() }

func (c *confirmer) drain(returns <-chan amqp.Return) {
	defer close(c.drained)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return
			}
			c.mu.Lock()
			for _, p := range c.inflight[r.MessageId] {
				p.returned = &r
			}
			c.mu.Unlock()
		case <-c.barrier:
		}
	}
}

// publish publishes msg (whose MessageId must be set) and waits for its
// confirm or ctx.
func (c *confirmer) publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	id := msg.MessageId
	p := &pending{}
	c.mu.Lock()
	c.inflight[id] = append(c.inflight[id], p)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		ps := c.inflight[id]
		for i, q := range ps {
			if q == p {
				ps = append(ps[:i], ps[i+1:]...)
				break
			}
		}
		if len(ps) == 0 {
			delete(c.inflight, id)
		} else {
			c.inflight[id] = ps
		}
	}()

	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		return fmt.Errorf("%w%s", err, c.closeReason(ctx))
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the confirm: %w", err)
	}
	if !acked {
		if reason := c.closeReason(ctx); reason != "" {
			return fmt.Errorf("%w%s", ErrNotConfirmed, reason)
		}
		c.retire()
		return fmt.Errorf("%w: the broker refused it; the next publish opens a new channel", ErrNotConfirmed)
	}
	select {
	case c.barrier <- struct{}{}: // drain has handled any earlier return
	case <-c.drained: // and here all of them
	}
	c.mu.Lock()
	r := p.returned
	c.mu.Unlock()
	if r != nil {
		return fmt.Errorf("%w: exchange %q, routing key %q: %d %s", ErrUnroutable, exchange, key, r.ReplyCode, r.ReplyText)
	}
	return nil
}
