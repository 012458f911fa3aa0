package inbox_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"slices"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
)

// A BatchHandler that adds each payment to its account's balance. Several
// payments of a batch, and of the batches other workers run at the same
// time, may touch the same account. Updated in the batch's order, two
// batches can lock the same two rows in opposite orders and deadlock.
// Sorted by account, every batch locks rows in one order: they wait for
// each other instead.
func ExampleBatchHandler() {
	type payment struct {
		Account string `json:"account"`
		Cents   int64  `json:"cents"`
	}
	credit := func(ctx context.Context, tx *sql.Tx, msgs []*inbox.Message) error {
		totals := map[string]int64{}
		for _, m := range msgs {
			var p payment
			if err := json.Unmarshal(m.Payload, &p); err != nil {
				return inbox.Permanent(err)
			}
			totals[p.Account] += p.Cents
		}
		accounts := make([]string, 0, len(totals))
		for a := range totals {
			accounts = append(accounts, a)
		}
		slices.SortFunc(accounts, cmp.Compare) // a stable lock order
		for _, a := range accounts {
			if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", totals[a], a); err != nil {
				return err
			}
		}
		return nil
	}
	consume := func(ctx context.Context, ib *inbox.Inbox[*sql.Tx], src broker.Source) error {
		return inbox.ConsumeBatch(ctx, ib, src, credit, &inbox.ConsumerConfig{BatchSize: 100})
	}
	_ = consume
}
