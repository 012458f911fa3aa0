package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"

	"github.com/inboxkit/inbox"
)

// A batch of four deliveries runs in one transaction. The third is the
// first one again: a duplicate. The fourth cannot be parsed: its handler
// fails permanently, and it alone is dead-lettered while the others
// commit. Each outcome says whether to ack its delivery.
func Example_processBatch() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	creditCents := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		var p struct{ Cents int }
		if err := json.Unmarshal(msg.Payload, &p); err != nil {
			return inbox.Permanent(err) // no retry can parse it
		}
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = 'alice'`, p.Cents)
		return err
	}
	msgs := []inbox.Message{
		{ID: "payment-1", Payload: []byte(`{"cents":10}`)},
		{ID: "payment-2", Payload: []byte(`{"cents":20}`)},
		{ID: "payment-1", Payload: []byte(`{"cents":10}`)},
		{ID: "payment-3", Payload: []byte(`not json`)},
	}
	outs, err := ib.ProcessBatch(ctx, msgs, creditCents)
	if err != nil { // nothing committed: nack every delivery
		log.Fatal(err)
	}
	for i, out := range outs {
		fmt.Println(msgs[i].ID, out.Status, "ack:", out.Ack())
	}
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// payment-1 processed ack: true
	// payment-2 processed ack: true
	// payment-1 duplicate ack: true
	// payment-3 dead-lettered ack: true
	// balance: 30
}
