package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"log"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
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

// ProcessTx with a *sql.Tx on PostgreSQL through pgx's stdlib driver
// (import _ "github.com/jackc/pgx/v5/stdlib").
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect})
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
		`INSERT INTO credits (payment) VALUES ($1)`)
	fmt.Println(out.Status, err)
}

// The examples' flow, run on the server.
func TestProcessTxFlow(t *testing.T) {
	t.Parallel()
	pgenv.Pool(t, 1)
	db, err := sql.Open("pgx", pgenv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	schema := testenv.Name("flow_")
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE"); db.Close() })
	db.SetMaxOpenConns(1) // search_path below holds for the one connection
	if _, err := db.Exec("SET search_path TO " + schema); err != nil {
		t.Fatal(err)
	}
	sqltest.ProcessTxFlow(t, db, postgres.Dialect, `INSERT INTO credits (payment) VALUES ($1)`, processTx)
}
