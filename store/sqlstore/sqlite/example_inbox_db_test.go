package sqlite_test

import (
	"context"
	"database/sql"

	"github.com/inboxkit/inbox"
)

// demoCredit is the examples' handler: it adds 10 to alice's balance in tx,
// the inbox's transaction.
func demoCredit(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 'alice'`)
	return err
}
