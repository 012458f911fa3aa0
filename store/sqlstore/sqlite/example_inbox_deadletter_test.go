package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/inboxkit/inbox"
)

// A handler fails while the ledger is down. At MaxAttempts the message is
// dead-lettered with its payload. Once the ledger is back, Replay
// processes the dead letter through a handler that works. The dead letter
// is then gone, and a late redelivery is a duplicate.
func Example_deadLetterReplay() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", MaxAttempts: 2})
	if err != nil {
		log.Fatal(err)
	}
	ledgerDown := func(context.Context, *sql.Tx, *inbox.Message) error {
		return errors.New("ledger down")
	}
	msg := inbox.Message{ID: "payment-1", Payload: []byte(`{"cents":10}`)}
	for range 2 {
		out, _ := ib.Process(ctx, msg, ledgerDown) // a Retry's error is out.Err
		fmt.Println(out.Status, "attempts:", out.Attempts)
	}

	dead, err := ib.DeadLetters(ctx, &inbox.DeadLetterQuery{Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("dead letter: %s %s attempts: %d error: %s\n", d.Message.ID, d.Message.Payload, d.Attempts, d.Error)
	}
	out, err := ib.Replay(ctx, dead[0].ID, demoCredit)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replay:", out.Status, "balance:", exampleBalance(db))

	dead, err = ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, _ = ib.Process(ctx, msg, demoCredit)
	fmt.Println("dead letters:", len(dead), "redelivery:", out.Status, "balance:", exampleBalance(db))
	// Output:
	// retry attempts: 1
	// dead-lettered attempts: 2
	// dead letter: payment-1 {"cents":10} attempts: 2 error: ledger down
	// replay: processed balance: 10
	// dead letters: 0 redelivery: duplicate balance: 10
}

// Discard deletes a dead letter that should never be processed. The
// message's inbox row stays marked dead: a redelivery is still a
// duplicate, and the handler does not run.
func Example_discard() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	refuse := func(context.Context, *sql.Tx, *inbox.Message) error {
		return inbox.Permanent(errors.New("a test message sent to production"))
	}
	msg := inbox.Message{ID: "payment-1"}
	if _, err := ib.Process(ctx, msg, refuse); err != nil {
		log.Fatal(err)
	}
	dead, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Discard(ctx, dead[0].ID); err != nil {
		log.Fatal(err)
	}
	dead, err = ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := ib.Process(ctx, msg, demoCredit)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters:", len(dead), "redelivery:", out.Status, "balance:", exampleBalance(db))
	// Output:
	// dead letters: 0 redelivery: duplicate balance: 0
}
