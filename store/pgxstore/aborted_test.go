package pgxstore_test

import (
	"testing"

	"github.com/inboxkit/inbox/store/storetest"
)

// A handler that swallows a failed statement is told so, with the
// statement's error where the transaction is the driver's own.
func TestSwallowedAbort(t *testing.T) {
	t.Parallel()
	const abort = "the handler returned nil, but a statement in its transaction failed and PostgreSQL aborted it"
	storetest.SwallowedAbort(t, harness, map[string]string{
		"Process": "inbox: commit: pgxstore: " + abort + ": ERROR: division by zero (SQLSTATE 22012)",
		"ProcessTx": "inbox: the handler returned no error, but: pgxstore: a statement in its transaction failed and PostgreSQL aborted it, " +
			"so it cannot commit (return a failed statement's error from the handler)",
		"ProcessBatch": "inbox: the handler returned no error, but: pgxstore: a statement in its transaction failed and PostgreSQL aborted it: " +
			"ERROR: division by zero (SQLSTATE 22012)",
	})
}
