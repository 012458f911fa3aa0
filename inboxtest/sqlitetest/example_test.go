package sqlitetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/inboxtest/sqlitetest"
)

// credit is the handler under test: it credits the message's account in
// tx, the inbox's transaction.
func credit(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (?, 10)
		ON CONFLICT (id) DO UPDATE SET balance = balance + 10`, string(m.Payload))
	return err
}

// Check delivers each message in every way a broker and a crash can, and
// reports through t when its effect did not happen once. In a test, pass
// the test's t; here a testing.TB that prints stands in for it.
func Example() {
	t := &printer{}
	defer t.done()
	ib, db := sqlitetest.New(t, nil)
	if _, err := db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	balance := func(ctx context.Context) (any, error) {
		var sum int64
		err := db.QueryRowContext(ctx, `SELECT coalesce(sum(balance), 0) FROM accounts`).Scan(&sum)
		return sum, err
	}
	msgs := []inbox.Message{{ID: "pay-1", Payload: []byte("alice")}, {ID: "pay-2", Payload: []byte("bob")}}
	ok := inboxtest.Check(context.Background(), t, ib, credit, msgs, &inboxtest.Options{State: balance})
	sum, _ := balance(context.Background())
	fmt.Println("passed:", ok, "balance:", sum)
	// Output:
	// passed: true balance: 20
}

// printer is a testing.TB that prints what Check reports; done runs its
// cleanups, as a test's end would.
type printer struct {
	testing.TB // nil: Check and New call only the methods below
	cleanups   []func()
	dir        string
}

func (p *printer) Helper()                           {}
func (p *printer) Cleanup(f func())                  { p.cleanups = append(p.cleanups, f) }
func (p *printer) Errorf(format string, args ...any) { fmt.Printf("error: "+format+"\n", args...) }
func (p *printer) Fatalf(format string, args ...any) { fmt.Printf("fatal: "+format+"\n", args...) }
func (p *printer) Logf(format string, args ...any)   { fmt.Printf("log: "+format+"\n", args...) }

func (p *printer) TempDir() string {
	if p.dir == "" {
		p.dir, _ = os.MkdirTemp("", "sqlitetest")
	}
	return p.dir
}

func (p *printer) done() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
	os.RemoveAll(p.dir)
}
