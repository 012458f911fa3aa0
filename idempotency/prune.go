package idempotency

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// Pruner returns an [inbox.Pruner] that deletes the keys older than their
// expiry. cfg.Retention defaults to Config.Expiry, and may not be shorter:
// a key must answer for as long as the API promises. Run it as the inbox's
// pruner is run, in one or in several processes.
func (m *Middleware[TTx]) Pruner(cfg *inbox.PrunerConfig) (*inbox.Pruner, error) {
	var c inbox.PrunerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Retention == 0 {
		c.Retention = m.cfg.Expiry
	}
	if c.Retention < m.cfg.Expiry {
		return nil, fmt.Errorf("%w: the pruner's Retention %v is shorter than the keys' Expiry %v", ErrInvalidConfig, c.Retention, m.cfg.Expiry)
	}
	return inbox.NewPruner(keyPruneStore[TTx]{m.store}, &c)
}

// keyPruneStore prunes the keys' table through an inbox.Pruner.
type keyPruneStore[TTx any] struct{ s store.KeyStore[TTx] }

func (k keyPruneStore[TTx]) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	return k.s.KeyPrune(ctx, p)
}
