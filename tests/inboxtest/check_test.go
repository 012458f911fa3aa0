// Package inboxtest_test holds the tests of package inboxtest that need a
// database (SQLite, PostgreSQL) or the broker suite (which needs SQLite).
// They live apart so that go mod tidy in a program that imports inboxtest
// downloads no database driver for them: the tests of a package a program
// imports count for its go.sum, measured with a scratch module.
package inboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/inboxtest/sqlitetest"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// recorder is a testing.TB that records what Check reports, so that a
// test can assert that Check failed, and why. Check calls only Helper,
// Errorf and Logf.
type recorder struct {
	testing.TB // nil: any other method panics
	mu         sync.Mutex
	errors     []string
	logs       []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// reported reports whether one of r's errors contains every one of subs.
func (r *recorder) reported(subs ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errors {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(e, s)
		}
		if all {
			return true
		}
	}
	return false
}

// ledgerDB makes an inbox on a fresh SQLite file with a ledger table
// (one row per effect), and the State that sums it and reads counter,
// the handlers' non-transactional side.
func ledgerDB(t *testing.T, ib *inbox.Inbox[*sql.Tx], db *sql.DB, counter *atomic.Int64) func(context.Context) (any, error) {
	t.Helper()
	if _, err := db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Rows, Sum int64
		Counter   int64
	}
	return func(ctx context.Context) (any, error) {
		var s state
		err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM ledger`).Scan(&s.Rows, &s.Sum)
		s.Counter = counter.Load()
		return s, err
	}
}

func credit(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id, amount) VALUES (?, ?)`, m.ID, len(m.Payload))
	return err
}

func messages(n int) []inbox.Message {
	msgs := make([]inbox.Message, n)
	for i := range msgs {
		msgs[i] = inbox.Message{ID: fmt.Sprintf("m-%d", i), Type: "credit", Payload: []byte(strings.Repeat("x", i+1))}
	}
	return msgs
}

// Check passes a handler that writes through its tx, and fails, saying
// why and at which delivery, each handler that breaks effectively-once
// processing or fails.
func TestCheckHandlers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// handler: its non-transactional counter
		handler func(counter *atomic.Int64) inbox.Handler[*sql.Tx]
		// want: substrings of one reported error; none: Check passes
		want []string
	}{
		{"writes through tx", func(*atomic.Int64) inbox.Handler[*sql.Tx] { return credit }, nil},
		{"counts outside the transaction", func(c *atomic.Int64) inbox.Handler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				c.Add(1) // a cache, a metric, an HTTP call: not rolled back
				return credit(ctx, tx, m)
			}
		}, []string{`message "m-0"`, "crash before COMMIT", "the state changed from", "Counter:0", "Counter:1", "writes outside the transaction"}},
		{"panics", func(*atomic.Int64) inbox.Handler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				panic("boom in the handler")
			}
		}, []string{`message "m-0"`, "first delivery", "not processed", "panicked", "boom in the handler", "goroutine"}},
		{"fails", func(*atomic.Int64) inbox.Handler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				return errors.New("account frozen")
			}
		}, []string{`message "m-0"`, "first delivery", "nacked", "returned an error", "account frozen"}},
		{"commits its transaction itself", func(*atomic.Int64) inbox.Handler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				if err := credit(ctx, tx, m); err != nil {
					return err
				}
				return tx.Commit()
			}
		}, []string{`message "m-0"`, "crash before COMMIT", "the state changed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ib, db := sqlitetest.New(t, &inbox.Config{Logger: discard})
			var counter atomic.Int64
			state := ledgerDB(t, ib, db, &counter)
			rec := &recorder{}
			passed := inboxtest.Check(ctx, rec, ib, tc.handler(&counter), messages(3), &inboxtest.Options{State: state})
			switch {
			case tc.want == nil && (!passed || len(rec.errors) > 0):
				t.Fatalf("Check failed a correct handler: %q", rec.errors)
			case tc.want == nil:
				var rows int
				if err := db.QueryRow(`SELECT count(*) FROM ledger`).Scan(&rows); err != nil || rows != 3 {
					t.Fatalf("ledger holds %d rows (%v) after Check, want 3: one per message", rows, err)
				}
			case passed || !rec.reported(tc.want...):
				t.Fatalf("Check returned %v and reported %q; want it to fail with an error containing %q", passed, rec.errors, tc.want)
			}
			t.Logf("reported: %q", rec.errors)
		})
	}
}

// The same for a batch handler.
func TestCheckBatchHandlers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler func(counter *atomic.Int64) inbox.BatchHandler[*sql.Tx]
		want    []string
	}{
		{"writes through tx", func(*atomic.Int64) inbox.BatchHandler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, ms []*inbox.Message) error {
				for _, m := range ms {
					if err := credit(ctx, tx, m); err != nil {
						return err
					}
				}
				return nil
			}
		}, nil},
		{"counts outside the transaction", func(c *atomic.Int64) inbox.BatchHandler[*sql.Tx] {
			return func(ctx context.Context, tx *sql.Tx, ms []*inbox.Message) error {
				for _, m := range ms {
					c.Add(1)
					if err := credit(ctx, tx, m); err != nil {
						return err
					}
				}
				return nil
			}
		}, []string{"batch of 4 messages", "crash before COMMIT", "the state changed", "writes outside the transaction"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ib, db := sqlitetest.New(t, &inbox.Config{Logger: discard})
			var counter atomic.Int64
			state := ledgerDB(t, ib, db, &counter)
			rec := &recorder{}
			passed := inboxtest.CheckBatch(context.Background(), rec, ib, tc.handler(&counter), messages(4), &inboxtest.Options{State: state})
			switch {
			case tc.want == nil && (!passed || len(rec.errors) > 0):
				t.Fatalf("CheckBatch failed a correct handler: %q", rec.errors)
			case tc.want != nil && (passed || !rec.reported(tc.want...)):
				t.Fatalf("CheckBatch returned %v and reported %q; want it to fail with an error containing %q", passed, rec.errors, tc.want)
			}
			t.Logf("reported: %q", rec.errors)
		})
	}
}

// Bad arguments are reported, not a panic.
func TestCheckBadArguments(t *testing.T) {
	t.Parallel()
	ib, db := sqlitetest.New(t, nil)
	var counter atomic.Int64
	state := ledgerDB(t, ib, db, &counter)
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(rec *recorder) bool
		want string
	}{
		{"nil inbox", func(r *recorder) bool {
			return inboxtest.Check(ctx, r, (*inbox.Inbox[*sql.Tx])(nil), credit, messages(1), &inboxtest.Options{State: state})
		}, "nil *inbox.Inbox"},
		{"nil handler", func(r *recorder) bool {
			return inboxtest.Check(ctx, r, ib, nil, messages(1), &inboxtest.Options{State: state})
		}, "nil handler"},
		{"no State", func(r *recorder) bool { return inboxtest.Check(ctx, r, ib, credit, messages(1), nil) }, "Options.State is required"},
		{"no messages", func(r *recorder) bool {
			return inboxtest.Check(ctx, r, ib, credit, nil, &inboxtest.Options{State: state})
		}, "no messages"},
		{"empty ID", func(r *recorder) bool {
			return inboxtest.Check(ctx, r, ib, credit, []inbox.Message{{}}, &inboxtest.Options{State: state})
		}, "msgs[0] has no ID"},
		{"shared ID", func(r *recorder) bool {
			return inboxtest.Check(ctx, r, ib, credit, []inbox.Message{{ID: "a"}, {ID: "a"}}, &inboxtest.Options{State: state})
		}, `msgs[0] and msgs[1] share the ID "a"`},
		{"State fails", func(r *recorder) bool {
			fails := func(context.Context) (any, error) { return nil, errors.New("no such table") }
			return inboxtest.Check(ctx, r, ib, credit, messages(1), &inboxtest.Options{State: fails})
		}, "no such table"},
	}
	for _, tc := range tests {
		rec := &recorder{}
		if tc.run(rec) || !rec.reported(tc.want) {
			t.Errorf("%s: reported %q, want an error containing %q", tc.name, rec.errors, tc.want)
		}
	}
}

// forgetful is a store whose claims never meet: each one carries a key
// of its own, as if the consumer name changed on every delivery. The
// inbox's duplicate check is broken, and Check must see it.
type forgetful struct {
	store.Driver[*sql.Tx]
	n atomic.Int64
}

func (f *forgetful) BeginClaim(ctx context.Context, p *store.ClaimParams) (*sql.Tx, *store.ClaimResult, error) {
	q := *p
	q.Consumer = fmt.Appendf(nil, "%s-%d", p.Consumer, f.n.Add(1))
	return f.Driver.BeginClaim(ctx, &q)
}

// A mutation of the inbox: with its duplicate check broken, Check fails
// a handler that writes through its tx, at every kind of redelivery.
func TestCheckCatchesBrokenDuplicateCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := sqlitetest.New(t, nil)
	d := driverOf(t, db)
	ib, err := inbox.New(ctx, &forgetful{Driver: d}, &inbox.Config{Consumer: "forgetful", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	var counter atomic.Int64
	state := ledgerDB(t, ib, db, &counter)
	rec := &recorder{}
	if inboxtest.Check(ctx, rec, ib, credit, messages(1), &inboxtest.Options{State: state}) {
		t.Fatal("Check passed an inbox whose duplicate check is broken")
	}
	for _, want := range [][]string{
		{`message "m-0"`, "ack is lost", "the handler ran 4 times", "not a duplicate"},
		{"redelivery 1 of 2 (one after the other)", "outcome processed", "want duplicate"},
		{"redelivery 1 of 2 (one after the other)", "the handler ran", "did not recognize the redelivery"},
		{"redelivery 1 of 2 (one after the other)", "the state changed from {Rows:4", "to {Rows:5"},
	} {
		if !rec.reported(want...) {
			t.Errorf("no error containing %q; reported %q", want, rec.errors)
		}
	}
}

var discard = slog.New(slog.DiscardHandler)

// driverOf returns a store on db, an inbox's SQLite database.
func driverOf(t *testing.T, db *sql.DB) store.Driver[*sql.Tx] {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// racy is a store whose duplicate check misses a racing delivery: a claim
// made while another claim of the same ID is uncommitted gets a key of its
// own, as a check-then-insert without a unique key would. Deliveries one
// after the other are still recognized.
type racy struct {
	store.Driver[*sql.Tx]
	mu       sync.Mutex
	inflight map[string]int
	of       map[*sql.Tx]string
	n        int
}

func (r *racy) BeginClaim(ctx context.Context, p *store.ClaimParams) (*sql.Tx, *store.ClaimResult, error) {
	id := string(p.MessageID)
	q := *p
	r.mu.Lock()
	if r.inflight[id] > 0 {
		r.n++
		q.MessageID = fmt.Appendf(nil, "%s-race-%d", id, r.n)
	}
	r.inflight[id]++
	r.mu.Unlock()
	tx, res, err := r.Driver.BeginClaim(ctx, &q)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || !res.Claimed {
		r.inflight[id]--
	} else {
		r.of[tx] = id
	}
	return tx, res, err
}

func (r *racy) end(tx *sql.Tx) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.of[tx]; ok {
		r.inflight[id]--
		delete(r.of, tx)
	}
}

func (r *racy) Commit(ctx context.Context, tx *sql.Tx) error {
	defer r.end(tx)
	return r.Driver.Commit(ctx, tx)
}

func (r *racy) Rollback(ctx context.Context, tx *sql.Tx) error {
	defer r.end(tx)
	return r.Driver.Rollback(ctx, tx)
}

// A mutation of the inbox that only racing deliveries reveal: Check's
// first delivery, two copies at once, catches it; the redeliveries one
// after the other do not.
func TestCheckCatchesRacyDuplicateCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, db := sqlitetest.New(t, nil)
	r := &racy{Driver: driverOf(t, db), inflight: map[string]int{}, of: map[*sql.Tx]string{}}
	ib, err := inbox.New(ctx, r, &inbox.Config{Consumer: "racy", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	var counter atomic.Int64
	state := ledgerDB(t, ib, db, &counter)
	slow := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		time.Sleep(100 * time.Millisecond) // the other copy's claim comes meanwhile
		return credit(ctx, tx, m)
	}
	rec := &recorder{}
	if inboxtest.Check(ctx, rec, ib, slow, messages(1), &inboxtest.Options{State: state}) {
		t.Fatal("Check passed an inbox whose duplicate check misses racing deliveries")
	}
	if !rec.reported(`message "m-0"`, "twice at once", "the handler ran", "want once", "not a duplicate") {
		t.Errorf("no error about the racing first delivery; reported %q", rec.errors)
	}
	if rec.reported("one after the other") {
		t.Errorf("the sequential redeliveries failed too, want them recognized by this mutation: %q", rec.errors)
	}
}

// A handler that changes nothing State can see fails Check, unless
// Options.AllowUnchanged says that nothing is right; Check and CheckBatch.
func TestCheckUnchangedState(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *sql.Tx, *inbox.Message) error { return nil }
	noopBatch := func(context.Context, *sql.Tx, []*inbox.Message) error { return nil }
	// elsewhere writes to a table that State does not read.
	elsewhere := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO audit (id) VALUES (?)`, m.ID)
		return err
	}
	tests := []struct {
		name  string
		check func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool
		allow bool
		want  []string // none: Check passes
	}{
		{"no-op handler", func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool {
			return inboxtest.Check(ctx, rec, ib, noop, messages(2), opts)
		}, false, []string{`message "m-0"`, "the state stayed", "want it changed", "AllowUnchanged"}},
		{"writes what State does not read", func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool {
			return inboxtest.Check(ctx, rec, ib, elsewhere, messages(2), opts)
		}, false, []string{`message "m-1"`, "the state stayed", "Options.State does not see"}},
		{"no-op batch handler", func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool {
			return inboxtest.CheckBatch(ctx, rec, ib, noopBatch, messages(3), opts)
		}, false, []string{"batch of 3 messages", "the state stayed"}},
		{"no-op handler, AllowUnchanged", func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool {
			return inboxtest.Check(ctx, rec, ib, noop, messages(2), opts)
		}, true, nil},
		{"no-op batch handler, AllowUnchanged", func(ctx context.Context, rec *recorder, ib *inbox.Inbox[*sql.Tx], opts *inboxtest.Options) bool {
			return inboxtest.CheckBatch(ctx, rec, ib, noopBatch, messages(3), opts)
		}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ib, db := sqlitetest.New(t, &inbox.Config{Logger: discard})
			if _, err := db.Exec(`CREATE TABLE audit (id TEXT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			var counter atomic.Int64
			rec := &recorder{}
			passed := tc.check(ctx, rec, ib, &inboxtest.Options{State: ledgerDB(t, ib, db, &counter), AllowUnchanged: tc.allow})
			switch {
			case tc.want == nil && (!passed || len(rec.errors) > 0):
				t.Fatalf("Check failed with AllowUnchanged: %q; want it passed", rec.errors)
			case tc.want != nil && (passed || !rec.reported(tc.want...)):
				t.Fatalf("Check returned %v and reported %q; want it failed with an error containing %q", passed, rec.errors, tc.want)
			}
		})
	}
}
