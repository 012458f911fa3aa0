package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/inboxkit/inbox"
)

// A payment for an account that does not exist will never succeed: the
// handler marks its error Permanent. The message is dead-lettered at its
// first attempt instead of being retried, and the delivery is acked. A
// redelivery is a duplicate.
func Example_permanent() {
	ctx := context.Background()
	_, driver, done := openExampleDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	errUnknownAccount := errors.New("unknown account")
	creditBob := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		res, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 'bob'`)
		if err != nil {
			return err // retried with backoff
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return inbox.Permanent(fmt.Errorf("bob: %w", errUnknownAccount))
		}
		return nil
	}
	msg := inbox.Message{ID: "payment-1", Payload: []byte(`{"account":"bob"}`)}
	for range 2 {
		out, err := ib.Process(ctx, msg, creditBob)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Status, "attempts:", out.Attempts, "ack:", out.Ack())
	}
	dead, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters:", len(dead), dead[0].Message.ID, dead[0].Error)
	// Output:
	// dead-lettered attempts: 1 ack: true
	// duplicate attempts: 0 ack: true
	// dead letters: 1 payment-1 bob: unknown account
}

// A service the handler calls says to come back in 30 seconds. RetryAfter
// makes that the delay: Process returns an error, nothing committed, and
// the delivery is nacked with out.Delay. The attempt counts towards
// MaxAttempts. The redelivery succeeds.
func Example_retryAfter() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	errRateLimited := errors.New("ledger: rate limited")
	calls := 0
	creditLater := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		calls++
		if calls == 1 {
			return inbox.RetryAfter(30*time.Second, errRateLimited)
		}
		return demoCredit(ctx, tx, msg)
	}
	msg := inbox.Message{ID: "payment-1"}
	out, err := ib.Process(ctx, msg, creditLater)
	fmt.Println(out.Status, "delay:", out.Delay, "attempts:", out.Attempts, "error:", err)
	out, err = ib.Process(ctx, msg, creditLater) // the redelivery
	fmt.Println(out.Status, "error:", err)
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// retry delay: 30s attempts: 1 error: ledger: rate limited
	// processed error: <nil>
	// balance: 10
}
