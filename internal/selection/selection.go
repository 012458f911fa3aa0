// Package selection reads every row a filter selects now, a page at a
// time: the bulk actions of the command and of the console act on these
// and stop, so that a row added meanwhile is left for the next run.
package selection

import (
	"context"

	"github.com/inboxkit/inbox/store"
)

// Page is how many rows a search reads at a time.
const Page = 500

// Parked returns the parked outbox rows p selects now, in sequence order.
// It sets p.State, p.Limit and moves p.AfterSeq.
func Parked(ctx context.Context, in store.OutboxInspector, p *store.OutboxSearchParams) ([]*store.OutboxInfo, error) {
	var out []*store.OutboxInfo
	p.State, p.Limit = store.OutboxStateParked, Page
	for {
		found, err := in.OutboxSearch(ctx, p)
		if err != nil || len(found) == 0 {
			return out, err
		}
		out = append(out, found...)
		p.AfterSeq = found[len(found)-1].Seq
		if len(p.MessageID) > 0 {
			return out, nil // one row at most
		}
	}
}
