package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// openExampleDB opens a fresh SQLite database with the inbox's tables and an
// accounts table, for the examples.
func openExampleDB() (*sql.DB, *sqlstore.Driver, func()) {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlite.Open(filepath.Join(dir, "example.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(context.Background(), driver); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts VALUES ('alice', 0)`); err != nil {
		log.Fatal(err)
	}
	return db, driver, func() { db.Close(); os.RemoveAll(dir) }
}

func exampleBalance(db *sql.DB) int {
	var b int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&b); err != nil {
		log.Fatal(err)
	}
	return b
}

// A message delivered three times credits the account once.
func Example_inbox() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()

	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 'alice'`)
		return err
	}
	msg := inbox.Message{ID: "payment-42", Type: "payment.received", Payload: []byte(`{"amount":10}`)}
	for range 3 { // the broker redelivers
		out, err := ib.Process(ctx, msg, credit)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Status, "ack:", out.Ack())
	}
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// processed ack: true
	// duplicate ack: true
	// duplicate ack: true
	// balance: 10
}

// A handler that keeps failing is retried with backoff and dead-lettered at
// MaxAttempts; the dead letter keeps the message and can be replayed.
func Example_replay() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()

	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", MaxAttempts: 2})
	if err != nil {
		log.Fatal(err)
	}
	failing := func(context.Context, *sql.Tx, *inbox.Message) error { return errors.New("ledger service down") }
	msg := inbox.Message{ID: "payment-43", Payload: []byte(`{"amount":5}`)}
	for range 2 {
		out, _ := ib.Process(ctx, msg, failing)
		fmt.Println(out.Status, "attempts:", out.Attempts)
	}
	dead, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dead letter: %s %s (%s)\n", dead[0].Message.ID, dead[0].Message.Payload, dead[0].Error)

	out, err := ib.Replay(ctx, dead[0].ID, func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 5 WHERE id = 'alice'`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replay:", out.Status, "balance:", exampleBalance(db))
	out, _ = ib.Process(ctx, msg, failing)
	fmt.Println("redelivery:", out.Status)
	// Output:
	// retry attempts: 1
	// dead-lettered attempts: 2
	// dead letter: payment-43 {"amount":5} (ledger service down)
	// replay: processed balance: 5
	// redelivery: duplicate
}

// ProcessTx claims the message in the caller's own transaction.
func Example_processTx() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()

	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: "payment-44"}, func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 7 WHERE id = 'alice'`)
			return err
		})
		if out.Commit() {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.Status, "commit:", out.Commit())
	}
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// processed commit: true
	// duplicate commit: false
	// balance: 7
}

// IdempotencyKey gives an external call a key that is the same on every
