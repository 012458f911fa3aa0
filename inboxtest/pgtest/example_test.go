package pgtest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/inboxtest/pgtest"
)

// credit is the handler under test: it credits the message's account in
// tx, the inbox's transaction.
func credit(ctx context.Context, tx pgx.Tx, m *inbox.Message) error {
	_, err := tx.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 10)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 10`, string(m.Payload))
	return err
}

// Check delivers each message in every way a broker and a crash can, here
// on PostgreSQL in a schema of the test's own. In a test, pass the test's
// t; here a testing.TB that prints stands in for it.
func Example() {
	t := &printer{}
	defer t.done()
	ctx := context.Background()
	ib, pool := pgtest.New(t, &inbox.Config{Consumer: "billing"})
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	balance := func(ctx context.Context) (any, error) {
		var sum int64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(balance), 0) FROM accounts`).Scan(&sum)
		return sum, err
	}
	msgs := []inbox.Message{{ID: "pay-1", Payload: []byte("alice")}, {ID: "pay-2", Payload: []byte("bob")}}
	ok := inboxtest.Check(ctx, t, ib, credit, msgs, &inboxtest.Options{State: balance})
	sum, _ := balance(ctx)
	fmt.Println("passed:", ok, "balance:", sum)
	// Output:
	// passed: true balance: 20
}

// printer is a testing.TB that prints what New and Check report; done runs
// its cleanups, as a test's end would.
type printer struct {
	testing.TB // nil: New and Check call only the methods below
	cleanups   []func()
}

func (p *printer) Helper()                           {}
func (p *printer) Cleanup(f func())                  { p.cleanups = append(p.cleanups, f) }
func (p *printer) Errorf(format string, args ...any) { fmt.Printf("error: "+format+"\n", args...) }
func (p *printer) Fatalf(format string, args ...any) { fmt.Printf("fatal: "+format+"\n", args...) }
func (p *printer) Fatal(args ...any)                 { fmt.Println(append([]any{"fatal:"}, args...)...) }
func (p *printer) Logf(format string, args ...any)   { fmt.Printf("log: "+format+"\n", args...) }

func (p *printer) done() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
}
