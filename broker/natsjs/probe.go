package natsjs

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.Prober = (*Publisher)(nil)

// Probe asks JetStream for the account's information. That round trip
// fails when the connection is down or JetStream does not answer. A subject
// that no stream takes, with "no responders", is the message's problem, not
// the broker's. Probe then succeeds.
func (p *Publisher) Probe(ctx context.Context) error {
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("natsjs: probe: %w", err)
	}
	return nil
}
