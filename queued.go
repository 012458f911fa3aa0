package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/inboxkit/inbox/store"
)

// Queue collects the statements of a [QueuedHandler]. They are in the
// store's SQL dialect, with $1 placeholders on PostgreSQL.
type Queue struct{ stmts []store.Statement }

// Add queues a statement, to run after the claim in the same transaction.
func (q *Queue) Add(sql string, args ...any) {
	q.stmts = append(q.stmts, store.Statement{SQL: sql, Args: args})
}

// QueuedHandler queues the statements of a message's effect instead of
// running them.
//
// It has no transaction. It must not read what its statements depend on,
// because they run after it returns. It suits effects that are writes
// alone, such as inserting an event, bumping a counter or upserting a row.
type QueuedHandler func(ctx context.Context, q *Queue, msg *Message) error

// ErrNoQueued is returned by [Inbox.ProcessQueued] for a store that
// cannot send a claim and statements in one round trip. Only pgxstore can.
var ErrNoQueued = errors.New("inbox: the store cannot run queued statements with the claim")

// ProcessQueued is Process for a handler that queues its statements.
//
// The claim, the statements and the COMMIT go to the database in one round
// trip. They run as one implicit transaction. The claim is a plain INSERT.
// Process takes three round trips, for BEGIN with the claim, for the
// handler's statements and for COMMIT.
//
// A duplicate's claim fails on the key, and nothing applies. A racing
// delivery waits for the holder. It then fails the same way, or succeeds if
// the holder rolled back.
//
// Outcomes, attempts, dead letters and hooks are those of Process. A
// handler error or a failed statement is the handler's failure. A deadlock
// or a serialization failure in the statements is transient. A store
// that cannot run queued statements gives Retry and an error wrapping
// [ErrNoQueued]. Then nothing runs. Only pgxstore can run them.
//
// The handler runs before the claim, so it also runs for a duplicate.
// Should it fail for one, the failure is counted like a new message's. That
// goes on until the dead letter, which finds the processed row and makes
// the outcome Duplicate. Nothing applies twice.
//
// [ConsumeQueued] runs it for each delivery of a broker.
func (ib *Inbox[TTx]) ProcessQueued(ctx context.Context, msg Message, h QueuedHandler) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	qc, ok := ib.driver.(store.QueuedClaimer)
	if !ok {
		return Outcome{Status: Retry}, fmt.Errorf("%w (%T)", ErrNoQueued, ib.driver)
	}
	return ib.process(ctx, nil, &msg, func(ctx context.Context, pr *processing) (Outcome, error) {
		q := &Queue{}
		// It only queues: its statements run with the claim.
		if herr := ib.runHandler(pr, func() error { return h(ctx, q, pr.msg) }); herr != nil {
			return ib.failed(ctx, nil, pr.msg, pr.claim, herr)
		}
		res, err := qc.ClaimAndRun(ctx, pr.claim, q.stmts)
		var se *store.StatementError
		switch {
		case errors.As(err, &se):
			ib.health.ok(ctx)
			return ib.failed(ctx, nil, pr.msg, pr.claim, se)
		case err != nil:
			return ib.dbFailed(ctx, "claim and statements", err)
		}
		ib.health.ok(ctx)
		if !res.Claimed {
			return ib.duplicate(ctx, pr, res), nil
		}
		return Outcome{Status: Processed}, nil
	})
}
