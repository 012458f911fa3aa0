package storetest

import (
	"context"
	"testing"

	"github.com/inboxkit/inbox"
)

// SwallowedAbort runs, on PostgreSQL, a handler that swallows a failed
// statement (SELECT 1/0), which aborts its transaction, through Process,
// ProcessTx and ProcessBatch. Each must count a failure whose Outcome.Err
// reads want[name] exactly: that the handler returned nil but PostgreSQL
// aborted the transaction, with the statement's error when the driver kept
// it. A name missing from want is not run.
func SwallowedAbort[TTx any](t *testing.T, h Harness[TTx], want map[string]string) {
	t.Helper()
	type run func(ctx context.Context, env *Env[TTx], ib *inbox.Inbox[TTx], h inbox.Handler[TTx]) (inbox.Outcome, error)
	tests := []struct {
		name string
		run  run
	}{
		{"Process", func(ctx context.Context, _ *Env[TTx], ib *inbox.Inbox[TTx], h inbox.Handler[TTx]) (inbox.Outcome, error) {
			return ib.Process(ctx, msg("swallowed"), h)
		}},
		{"ProcessTx", func(ctx context.Context, env *Env[TTx], ib *inbox.Inbox[TTx], h inbox.Handler[TTx]) (inbox.Outcome, error) {
			tx, err := env.BeginPlain(ctx)
			if err != nil {
				return inbox.Outcome{}, err
			}
			defer func() { _ = env.Driver.Rollback(ctx, tx) }()
			out, err := ib.ProcessTx(ctx, tx, msg("swallowed"), h)
			if err == nil && out.Commit() {
				err = env.Driver.Commit(ctx, tx)
			}
			return out, err
		}},
		{"ProcessBatch", func(ctx context.Context, _ *Env[TTx], ib *inbox.Inbox[TTx], h inbox.Handler[TTx]) (inbox.Outcome, error) {
			outs, err := ib.ProcessBatch(ctx, []inbox.Message{msg("swallowed")}, h)
			if len(outs) != 1 {
				return inbox.Outcome{}, err
			}
			return outs[0], err
		}},
	}
	for _, tc := range tests {
		want, ok := want[tc.name]
		if !ok {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := open(t, h)
			if env.Exec == nil {
				t.Skip("the harness cannot run a statement (Env.Exec)")
			}
			ib := newInbox(t, env, inbox.Config{MaxAttempts: 3})
			swallows := func(ctx context.Context, tx TTx, m *inbox.Message) error {
				_ = env.Exec(ctx, tx, "SELECT 1/0") // the handler's bug
				return nil
			}
			out, err := tc.run(ctx, env, ib, swallows)
			if err != nil && out.Err == nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if out.Status != inbox.Retry || out.Attempts != 1 || out.Err == nil || out.Err.Error() != want {
				t.Fatalf("%s: %v after %d attempts, error %v\nwant Retry after 1 attempt, error %s", tc.name, out.Status, out.Attempts, out.Err, want)
			}
		})
	}
}
