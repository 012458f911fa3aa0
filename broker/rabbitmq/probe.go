package rabbitmq

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.Prober = (*Publisher)(nil)

// Probe opens a channel on the publisher's connection and closes it. It
// reconnects first when the connection is gone. That round trip fails when
// the broker does not answer. An unroutable message or a missing exchange
// is the message's problem, not the broker's. Probe then succeeds.
func (p *Publisher) Probe(ctx context.Context) error {
	if _, err := p.current(ctx); err != nil {
		return fmt.Errorf("rabbitmq: probe: %w", err)
	}
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("rabbitmq: probe: %w", ErrPublisherClosed)
	}
	done := make(chan error, 1)
	go func() { // amqp091 takes no ctx: a dead broker's channel open waits for the heartbeat
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rabbitmq: probe: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: probe: %w", ctx.Err())
	}
}
