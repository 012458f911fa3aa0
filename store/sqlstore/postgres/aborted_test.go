package postgres_test

import (
	"testing"

	"github.com/inboxkit/inbox/store/storetest"
)

// A handler that swallows a failed statement is told so; database/sql
// keeps no error of the statement, so the error cannot name it.
func TestSwallowedAbort(t *testing.T) {
	t.Parallel()
	const unnamed = "a statement in its transaction failed and PostgreSQL aborted it, so it cannot commit (return a failed statement's error from the handler)"
	storetest.SwallowedAbort(t, postgresHarness, map[string]string{
		"Process":      "inbox: commit: sqlstore: the handler returned nil, but " + unnamed,
		"ProcessTx":    "inbox: the handler returned no error, but: sqlstore: " + unnamed,
		"ProcessBatch": "inbox: the handler returned no error, but: sqlstore: " + unnamed,
	})
}
