// Package storetest is the one conformance suite of the inbox's stores.
// Every store's test file runs it against a real database:
//
//	func TestStore(t *testing.T) { storetest.Run(t, harness) }
//	func BenchmarkStore(b *testing.B) { storetest.Bench(b, harness) }
//
// Each test opens fresh tables (a new schema or file) through the harness,
// so the tests run in parallel.
package storetest

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// Env is one fresh set of inbox tables, with a ledger table in the same
// database that the suite's handlers write their business effects to.
type Env[TTx any] struct {
	Driver store.Driver[TTx]
	// Write records one business effect for key in tx: it inserts a row
	// into the ledger.
	Write func(ctx context.Context, tx TTx, key string) error
	// Count returns the number of effects recorded for key, outside any
	// transaction.
	Count func(ctx context.Context, key string) (int, error)
	// Backdate sets the received_at of an inbox row to the database's
	// clock minus age.
	Backdate func(ctx context.Context, key store.Key, age time.Duration) error
	// BeginPlain begins a transaction the way an application does without
	// the inbox: the benchmarks' baseline, and the caller's transaction of
	// ProcessTx.
	BeginPlain func(ctx context.Context) (TTx, error)
	// Settle, if set, finishes the database's background work (vacuum,
	// checkpoint) before each timed benchmark, so that one benchmark's
	// debt is not paid during the next one's run.
	Settle func(ctx context.Context) error
	// Expire, if set, inserts n inbox rows of consumer, their IDs starting
	// with prefix, received at least age before the database's clock (one
	// microsecond apart, the last one youngest), in few statements: the
	// backlog of the pruning benchmarks. Without it they are skipped.
	Expire func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error
	// LockWaits returns the number of transactions of this environment
	// (its schema's or database's connections) that wait for a lock, as
	// the database's lock table shows them (PostgreSQL: pg_locks not
	// granted; MySQL: SHOW ENGINE INNODB STATUS), so that a case can tell
	// that racing claims, or a pruner, queue behind a held row. Required
	// unless SingleWriter: a case that needs it fails without it.
	LockWaits func(ctx context.Context) (int, error)
	// SingleWriter is true for a database where one transaction at a time
	// writes (SQLite). Its write lock is then the pruners' lock too, and a
	// transaction waiting for it sleeps in the database's busy handler,
	// which no lock table shows: the cases skip that precondition visibly
	// (a skipped subtest) when LockWaits is nil.
	SingleWriter bool
	// LockTimeout, if set, returns the lock timeout in effect in tx
	// (PostgreSQL: lock_timeout; MySQL: innodb_lock_wait_timeout; SQLite:
	// busy_timeout), so that the suite can check that the store sets the
	// one it is given in each transaction, and that ProcessTx leaves it
	// set for the rest of the caller's transaction, whatever the outcome.
	LockTimeout func(ctx context.Context, tx TTx) (time.Duration, error)
	// WriteMany, if set, records the effects of keys in tx in one
	// statement: the multi-row business write of BenchBatch's batch
	// handler.
	WriteMany func(ctx context.Context, tx TTx, keys []string) error
	// HandBatch, if set, is the raw batched SQL that BenchBatch measures
	// ProcessBatch against: in one transaction, one multi-row claim of ids
	// for consumer (no inbox logic), one multi-row ledger insert of the
	// new ones, COMMIT.
	HandBatch func(ctx context.Context, consumer string, ids []string) error
	// QueueWrite, if set, queues the statement of Write for key, for
	// ProcessQueued (stores that implement store.Pipeliner).
	QueueWrite func(q *inbox.Queue, key string)
	// HandPipeline, if set, is the hand-written one-round-trip inbox that
	// ProcessQueued is measured against: a plain INSERT of the claim into
	// the inbox table and the ledger insert for id, sent as one implicit
	// transaction (on pgx: one batch), with no inbox logic.
	HandPipeline func(ctx context.Context, consumer, id string) error
	// HandWrite, if set, writes one outgoing message in tx with a
	// hand-written INSERT into a table equivalent to the outbox's (the
	// same columns and indexes): BenchOutbox's yardstick for Write.
	HandWrite func(ctx context.Context, tx TTx, id string, payload []byte) error
	// Exec runs a statement in tx.
	Exec func(ctx context.Context, tx TTx, query string) error
	// Transient makes the database return, in tx or while tx is open, an
	// error that the store must recognize as transient (a deadlock, a
	// busy database), and returns it.
	Transient func(ctx context.Context, tx TTx) error
	// LeaveRowsOpen runs a query in tx that returns many rows, reads one
	// and leaves the rest unread and the rows not closed, as a handler that
	// breaks out of its loop without Close does.
	LeaveRowsOpen func(ctx context.Context, tx TTx) error
	// Tables are the table names the driver uses (with the schema the
	// harness chose).
	Tables store.Tables
	// MaxConns is the size of the driver's connection pool, 0 when it is
	// not bounded or one transaction at a time writes (SQLite).
	MaxConns int
}

// Harness opens environments for the suite.
type Harness[TTx any] struct {
	// Open returns an environment on fresh tables named by tables (with a
	// fresh schema of its own when tables.Schema is empty), not migrated.
	// It returns the store constructor's error, for example for a hostile
	// prefix, and cleans up with tb.
	Open func(tb testing.TB, tables store.Tables) (*Env[TTx], error)
	// OpenLongWaits, if set, is Open on connections that wait at least
	// LongLockWait for a lock by themselves (MySQL: the DSN's
	// innodb_lock_wait_timeout; SQLite: the busy timeout), so that the
	// lock timeout cases tell the store's lock timeout from the
	// connection's. Nil: Open's connections wait that long already
	// (PostgreSQL: lock_timeout 0, no limit).
	OpenLongWaits func(tb testing.TB, tables store.Tables) (*Env[TTx], error)
}

// open opens and migrates an environment with the default table names.
func open[TTx any](tb testing.TB, h Harness[TTx]) *Env[TTx] {
	tb.Helper()
	env, err := h.Open(tb, store.Tables{})
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	if err := env.Driver.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return env
}

func newInbox[TTx any](tb testing.TB, env *Env[TTx], cfg inbox.Config) *inbox.Inbox[TTx] {
	tb.Helper()
	if cfg.Consumer == "" {
		cfg.Consumer = "storetest"
	}
	ib, err := inbox.New(context.Background(), env.Driver, &cfg)
	if err != nil {
		tb.Fatalf("inbox.New: %v", err)
	}
	return ib
}

// inTx runs fn in a transaction that begin opens, and commits it when fn
// returns nil. The rollback is deferred right after begin: an error or a
// test's Fatal inside fn leaves nothing open.
func inTx[TTx any](ctx context.Context, d store.Driver[TTx], begin func(context.Context) (TTx, error), fn func(TTx) error) error {
	tx, err := begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = d.Rollback(context.WithoutCancel(ctx), tx) }() // nothing to do after Commit
	if err := fn(tx); err != nil {
		return err
	}
	return d.Commit(ctx, tx)
}

// key is the ledger key of a message ID (IDs may be any bytes).
func key(id string) string { return hex.EncodeToString([]byte(id)) }

func msg(id string) inbox.Message {
	return inbox.Message{ID: id, Type: "storetest.credit", Payload: []byte("payload of " + id),
		Headers: map[string]string{"trace": "t-1", "bin": "\x00\xff"}}
}

// writer is a handler that records the message's effect.
func writer[TTx any](env *Env[TTx]) inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, m *inbox.Message) error {
		return env.Write(ctx, tx, key(m.ID))
	}
}

func count[TTx any](tb testing.TB, env *Env[TTx], id string) int {
	tb.Helper()
	n, err := env.Count(context.Background(), key(id))
	if err != nil {
		tb.Fatalf("count %q: %v", id, err)
	}
	return n
}
