package kafka

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/broker"
)

var _ broker.Prober = (*Publisher)(nil)

// Probe sends a metadata request to a broker of the cluster, with the
// client's Ping. It fails when no broker answers. A topic that does not
// exist is the message's problem, not the cluster's. Probe then succeeds.
func (p *Publisher) Probe(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: probe: %w", err)
	}
	return nil
}
