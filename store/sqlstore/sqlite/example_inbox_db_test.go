package sqlite_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"path/filepath"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// openDemoDB does the setup of every example but [ExampleInbox_Process],
// which shows it in full. It opens a SQLite file in a new temporary
// directory and migrates the inbox's tables. It adds the example's own
// table: accounts, with alice at balance 0. done closes the database and
// removes the directory.
func openDemoDB() (db *sql.DB, driver *sqlstore.Driver, done func()) {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sqlite.Open(filepath.Join(dir, "inbox.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	driver, err = sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		log.Fatal(err)
	}
	if err := inbox.Migrate(context.Background(), driver); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL);
		INSERT INTO accounts VALUES ('alice', 0)`); err != nil {
		log.Fatal(err)
	}
	return db, driver, func() {
		db.Close()
		os.RemoveAll(dir)
	}
}

// balance reads alice's balance.
func demoBalance(db *sql.DB) int {
	var b int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = 'alice'`).Scan(&b); err != nil {
		log.Fatal(err)
	}
	return b
}

// demoCredit is the examples' handler: it adds 10 to alice's balance in tx,
// the inbox's transaction.
func demoCredit(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 'alice'`)
	return err
}
