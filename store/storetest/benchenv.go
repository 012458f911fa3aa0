package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
)

// BenchEnv is an [Env] with what only the benchmarks need. That is the
// database's housekeeping, a backlog for pruning, and hand-written
// yardsticks. Every field is optional, as its comment tells.
type BenchEnv[TTx any] struct {
	*Env[TTx]
	// Settle, if set, finishes the database's background work before each timed
	// benchmark, such as vacuum or a checkpoint. One benchmark's debt is then
	// not paid during the next one's run.
	Settle func(ctx context.Context) error
	// Expire, if set, inserts n inbox rows of consumer in few statements. Their
	// IDs start with prefix. They are received at least age before the
	// database's clock, one microsecond apart, the last one youngest. They are
	// the backlog of the pruning benchmarks, which are skipped without Expire.
	Expire func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error
	// WriteMany, if set, records the effects of keys in tx in one statement.
	// It is the multi-row business write of BenchBatch's batch handler.
	WriteMany func(ctx context.Context, tx TTx, keys []string) error
	// HandBatch, if set, is the raw batched SQL that BenchBatch measures
	// ProcessBatch against. In one transaction, it runs one multi-row claim of
	// ids for consumer, with no inbox logic. It then runs one multi-row ledger
	// insert of the new ones, and COMMIT.
	HandBatch func(ctx context.Context, consumer string, ids []string) error
	// HandQueued, if set, is the hand-written one-round-trip inbox that
	// ProcessQueued is measured against. It sends a plain INSERT of the claim
	// into the inbox table and the ledger insert for id. They go as one
	// implicit transaction, with no inbox logic. On pgx that is one batch.
	HandQueued func(ctx context.Context, consumer, id string) error
	// HandWrite, if set, writes one outgoing message in tx with a hand-written
	// INSERT. The table is equivalent to the outbox's, with the same columns
	// and indexes. It is BenchOutbox's yardstick for Write.
	HandWrite func(ctx context.Context, tx TTx, id string, payload []byte) error
}

// BenchHarness opens environments for the benchmarks: [Bench],
// [BenchBatch], [BenchOutbox] and [BenchPrune].
type BenchHarness[TTx any] struct {
	// Open is [Harness.Open] with the benchmarks' fields set. The benchmarks
	// ask for the default table names.
	Open func(tb testing.TB, tables store.Tables) (*BenchEnv[TTx], error)
}

// SuiteOpen adapts open to [Harness.Open]. It leaves the benchmarks' fields
// out. A store's test can thus build both environments in one function.
func SuiteOpen[TTx any](open func(tb testing.TB, tables store.Tables) (*BenchEnv[TTx], error)) func(tb testing.TB, tables store.Tables) (*Env[TTx], error) {
	return func(tb testing.TB, tables store.Tables) (*Env[TTx], error) {
		env, err := open(tb, tables)
		if err != nil {
			return nil, err
		}
		return env.Env, nil
	}
}

// openBench opens and migrates an environment for a benchmark, as open
// does for a case.
func openBench[TTx any](tb testing.TB, h BenchHarness[TTx]) *BenchEnv[TTx] {
	tb.Helper()
	var bench *BenchEnv[TTx]
	open(tb, Harness[TTx]{Open: SuiteOpen(func(tb testing.TB, tables store.Tables) (*BenchEnv[TTx], error) {
		var err error
		bench, err = h.Open(tb, tables)
		return bench, err
	})})
	return bench
}
