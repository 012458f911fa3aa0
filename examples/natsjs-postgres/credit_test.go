package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/inboxtest/pgtest"
)

// The handler credits each payment once, however the broker delivers it
// and wherever the consumer crashes (inboxtest.Check), on PostgreSQL, in
// a schema of the test's own. Your handlers deserve a test like this one.
func TestCreditOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ib, pool := pgtest.New(t, &inbox.Config{Consumer: "example-billing"}) // a schema of its own, migrated
	if _, err := pool.Exec(ctx, createAccounts); err != nil {
		t.Fatal(err)
	}
	balances := func(ctx context.Context) (any, error) {
		rows, _ := pool.Query(ctx, `SELECT id, balance FROM example_accounts ORDER BY id`)
		return pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID      string
			Balance int64
		}])
	}
	msgs := []inbox.Message{
		{ID: "payment-1", Type: "payment.received", Payload: []byte(`{"account":"acct-1","amount":10}`)},
		{ID: "payment-2", Type: "payment.received", Payload: []byte(`{"account":"acct-1","amount":5}`)},
		{ID: "payment-3", Type: "payment.received", Payload: []byte(`{"account":"acct-2","amount":7}`)},
	}
	inboxtest.Check(ctx, t, ib, credit, msgs, &inboxtest.Options{State: balances})

	got, err := balances(ctx)
	if want := "[{acct-1 15} {acct-2 7}]"; err != nil || fmt.Sprint(got) != want {
		t.Fatalf("balances %v (%v) after Check, want %s: each payment once", got, err, want)
	}
}
