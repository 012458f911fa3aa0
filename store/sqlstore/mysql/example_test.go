package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"log"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// processTx claims msg in a transaction the service owns, credits an
// account in it, and commits when the outcome says so.
func processTx(ctx context.Context, db *sql.DB, ib *inbox.Inbox[*sql.Tx], msg inbox.Message, credit string) (inbox.Outcome, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return inbox.Outcome{}, err
	}
	out, err := ib.ProcessTx(ctx, tx, msg, func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		_, err := tx.ExecContext(ctx, credit, msg.ID)
		return err
	})
	if !out.Commit() {
		_ = tx.Rollback()
		return out, err
	}
	if cerr := tx.Commit(); cerr != nil {
		return inbox.Outcome{Status: inbox.Retry}, cerr // not committed: do not ack
	}
	return out, err // ack when out.Ack()
}

// ProcessTx with a *sql.Tx on MySQL or MariaDB; mysql.Open refuses
// clientFoundRows and sets READ COMMITTED and the lock wait timeout on
// every connection.
func Example() {
	ctx := context.Background()
	db, err := mysql.Open("root@tcp(127.0.0.1:3306)/test", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		log.Fatal(err)
	}
	if err := driver.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	out, err := processTx(ctx, db, ib, inbox.Message{ID: "payment-1"},
		`INSERT INTO credits (payment) VALUES (?)`)
	fmt.Println(out.Status, err)
}

// The examples' flow, run on the server.
func TestProcessTxFlow(t *testing.T) {
	t.Parallel()
	sqltest.ProcessTxFlow(t, openMySQL(t, ""), mysql.Dialect, `INSERT INTO credits (payment) VALUES (?)`, processTx)
}
