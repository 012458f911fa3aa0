package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// A broker delivers a payment three times. The handler credits the
// account once; the two redeliveries are duplicates, and each delivery
// may be acked.
func Example_process() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "inbox.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(ctx, driver); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL);
		INSERT INTO accounts VALUES ('alice', 0)`); err != nil {
		log.Fatal(err)
	}

	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	demoCredit := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 'alice'`)
		return err
	}
	msg := inbox.Message{ID: "payment-1", Type: "payment.received", Payload: []byte(`{"cents":10}`)}
	for range 3 {
		out, err := ib.Process(ctx, msg, demoCredit)
		if err != nil { // Retry: nothing committed; nack with out.Delay
			log.Fatal(err)
		}
		fmt.Println(out.Status, "ack:", out.Ack())
	}
	var balance int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&balance); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", balance)
	// Output:
	// processed ack: true
	// duplicate ack: true
	// duplicate ack: true
	// balance: 10
}

// A service that owns its transaction claims the message in it. The
// outcome says whether to commit; ack only after the COMMIT. The second
// delivery is a duplicate: roll back and ack.
func Example_processTxOutcomes() {
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
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: "payment-1"}, demoCredit)
		if out.Commit() {
			if cerr := tx.Commit(); cerr != nil {
				log.Fatal(cerr) // do not ack: the message comes back
			}
		} else {
			_ = tx.Rollback()
		}
		if err != nil { // Retry: nack with out.Delay
			log.Fatal(err)
		}
		fmt.Println(out.Status, "commit:", out.Commit(), "ack:", out.Ack())
	}
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// processed commit: true ack: true
	// duplicate commit: false ack: true
	// balance: 10
}
