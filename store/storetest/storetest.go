// Package storetest is the one conformance suite of the inbox's stores.
//
// Every store's test file runs it against a real database.
//
//	func TestStore(t *testing.T) { storetest.Run(t, harness) }
//	func BenchmarkStore(b *testing.B) { storetest.Bench(b, benchHarness) }
//
// [Run] takes a [Harness] of [Env]. The benchmarks take a [BenchHarness]
// of [BenchEnv], an Env with the benchmarks' yardsticks.
//
// Each test opens fresh tables through the harness, in a new schema or
// file. The tests thus run in parallel.
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
// database. The suite's handlers write their business effects to the
// ledger.
type Env[TTx any] struct {
	Driver store.Driver[TTx]
	// Write records one business effect for key in tx. It inserts a row into
	// the ledger.
	Write func(ctx context.Context, tx TTx, key string) error
	// Count returns the number of effects recorded for key, outside any
	// transaction.
	Count func(ctx context.Context, key string) (int, error)
	// Backdate sets the received_at of an inbox row to the database's
	// clock minus age.
	Backdate func(ctx context.Context, key store.Key, age time.Duration) error
	// BeginPlain begins a transaction the way an application does without the
	// inbox. It is the caller's transaction of ProcessTx, and the benchmarks'
	// baseline.
	BeginPlain func(ctx context.Context) (TTx, error)
	// LockWaits returns the number of transactions of this environment that
	// wait for a lock. They are its schema's or database's connections, as the
	// database's lock table shows them. On PostgreSQL that is pg_locks not
	// granted. On MySQL it is SHOW ENGINE INNODB STATUS. A case can thus tell
	// that racing claims, or a pruner, queue behind a held row. It is required
	// unless SingleWriter is set. A case that needs it fails without it.
	LockWaits func(ctx context.Context) (int, error)
	// SingleWriter is true for a database where one transaction at a time
	// writes, such as SQLite. Its write lock is then the pruners' lock too. A
	// transaction waiting for it sleeps in the database's busy handler, which
	// no lock table shows. The cases then skip that precondition visibly, in a
	// skipped subtest, when LockWaits is nil.
	SingleWriter bool
	// LockTimeout, if set, returns the lock timeout in effect in tx. That is
	// lock_timeout on PostgreSQL, innodb_lock_wait_timeout on MySQL and
	// busy_timeout on SQLite. The suite checks with it that the store sets the
	// one it is given in each transaction. It also checks that ProcessTx leaves
	// it set for the rest of the caller's transaction, whatever the outcome.
	LockTimeout func(ctx context.Context, tx TTx) (time.Duration, error)
	// QueueWrite, if set, queues the statement of Write for key, for
	// ProcessQueued. It is for stores that implement store.QueuedClaimer.
	QueueWrite func(q *inbox.Queue, key string)
	// Exec runs a statement in tx.
	Exec func(ctx context.Context, tx TTx, query string) error
	// Transient makes the database return an error that the store must
	// recognize as transient, and returns it. The error comes in tx or while tx
	// is open. Examples are a deadlock and a busy database.
	Transient func(ctx context.Context, tx TTx) error
	// LeaveRowsOpen runs a query in tx that returns many rows and reads one. It
	// leaves the rest unread and the rows not closed. A handler that breaks out
	// of its loop without Close does the same.
	LeaveRowsOpen func(ctx context.Context, tx TTx) error
	// Tables are the table names the driver uses, with the schema the harness
	// chose.
	Tables store.Tables
	// MaxConns is the size of the driver's connection pool. It is 0 when the
	// pool is not bounded, or when one transaction at a time writes, as on
	// SQLite.
	MaxConns int
}

// Harness opens environments for the suite.
type Harness[TTx any] struct {
	// Open returns an environment on fresh tables named by tables, not
	// migrated. When tables.Schema is empty, the environment gets a fresh schema
	// of its own. Open returns the store constructor's error, for example for a
	// hostile prefix. It cleans up with tb.
	Open func(tb testing.TB, tables store.Tables) (*Env[TTx], error)
	// OpenLongWaits, if set, is Open on connections that wait at least
	// LongLockWait for a lock by themselves. On MySQL that is the DSN's
	// innodb_lock_wait_timeout. On SQLite it is the busy timeout. The lock
	// timeout cases can then tell the store's lock timeout from the
	// connection's. Nil means Open's connections wait that long already, as
	// PostgreSQL's do with lock_timeout 0, no limit.
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
