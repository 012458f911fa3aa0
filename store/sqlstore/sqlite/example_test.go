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
