// Package sqltest is the storetest environment every dialect of sqlstore
// shares: a ledger table for the handlers' writes, on a *sql.DB.
package sqltest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
	"github.com/inboxkit/inbox/store/storetest"
)

// LedgerSQL are a dialect's statements of the suite's environment: insert
// and count take the ledger key; backdate sets an inbox row's received_at
// to the database clock minus the age, which age converts; its arguments
// are the age, the consumer and the message ID.
type LedgerSQL struct {
	Insert, Count, Backdate string
	Age                     func(time.Duration) any
	// InsertMany inserts many keys (BenchEnv.WriteMany, of BenchBatch): its
	// {values} stands for InsertValue once per key, or, when InsertValue
	// is empty, it takes the keys as one array (PostgreSQL). Empty: no
	// WriteMany.
	InsertMany, InsertValue string
}

// LedgerEnv is the suite's and the benchmarks' environment on db and d, on
// tables.
func LedgerEnv(db *sql.DB, d *sqlstore.Driver, tables store.Tables, q LedgerSQL) *storetest.BenchEnv[*sql.Tx] {
	env := &storetest.Env[*sql.Tx]{
		Tables: tables,
		Exec: func(ctx context.Context, tx *sql.Tx, query string) error {
			_, err := tx.ExecContext(ctx, query)
			return err
		},
		LeaveRowsOpen: func(ctx context.Context, tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3")
			if err == nil {
				rows.Next()
			}
			return err
		},
		Driver: d,
		Write: func(ctx context.Context, tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, q.Insert, key)
			return err
		},
		Count: func(ctx context.Context, key string) (n int, err error) {
			err = db.QueryRowContext(ctx, q.Count, key).Scan(&n)
			return n, err
		},
		Backdate: func(ctx context.Context, k store.Key, age time.Duration) error {
			res, err := db.ExecContext(ctx, q.Backdate, q.Age(age), k.Consumer, k.MessageID)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("backdate: %d rows", n)
			}
			return nil
		},
		BeginPlain: func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
	}
	return &storetest.BenchEnv[*sql.Tx]{Env: env, WriteMany: q.writeMany()}
}

func (q LedgerSQL) writeMany() func(ctx context.Context, tx *sql.Tx, keys []string) error {
	switch {
	case q.InsertMany == "":
		return nil
	case q.InsertValue == "":
		return func(ctx context.Context, tx *sql.Tx, keys []string) error {
			_, err := tx.ExecContext(ctx, q.InsertMany, keys)
			return err
		}
	}
	return func(ctx context.Context, tx *sql.Tx, keys []string) error {
		if len(keys) == 0 {
			return nil
		}
		args := make([]any, len(keys))
		for i, k := range keys {
			args[i] = k
		}
		_, err := tx.ExecContext(ctx, sqldialect.ExpandList(q.InsertMany, "{values}", q.InsertValue, len(keys), ", "), args...)
		return err
	}
}

// HandBatch is BenchEnv.HandBatch on db: in one transaction, claim (which
// claims ids, sorted, for consumer, in one statement or a few, and returns
// the IDs it inserted) and one ledger insert (LedgerSQL.InsertMany) of
// those, then COMMIT: no inbox logic.
func HandBatch(db *sql.DB, q LedgerSQL, claim func(ctx context.Context, tx *sql.Tx, consumer []byte, ids [][]byte) ([]string, error)) func(ctx context.Context, consumer string, ids []string) error {
	write := q.writeMany()
	return func(ctx context.Context, consumer string, ids []string) error {
		bids := make([][]byte, len(ids))
		for i, id := range ids {
			bids[i] = []byte(id)
		}
		slices.SortFunc(bids, bytes.Compare)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		fresh, err := claim(ctx, tx, []byte(consumer), bids)
		if err != nil {
			return err
		}
		if err := write(ctx, tx, fresh); err != nil {
			return err
		}
		return tx.Commit()
	}
}

// Exec returns a function that runs query with args on db: a way for an
// application to set its session's lock timeout, for NextTxLockTimeout.
func Exec(query string, args ...any) func(ctx context.Context, db *sql.DB) error {
	return func(ctx context.Context, db *sql.DB) error {
		_, err := db.ExecContext(ctx, query, args...)
		return err
	}
}

// PreparedTwice returns a function that prepares query on db, runs it
// with args, lets a transaction of db's set the pool's lock timeout
// again, and runs the prepared statement once more: no prepare tells a
// connection of that second run.
func PreparedTwice(query string, args ...any) func(ctx context.Context, db *sql.DB) error {
	return func(ctx context.Context, db *sql.DB) error {
		st, err := db.PrepareContext(ctx, query)
		if err != nil {
			return err
		}
		defer st.Close()
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := tx.Rollback(); err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, args...)
		return err
	}
}

// NextTxLockTimeout checks that after set, the application's statement
// that gives the session another lock timeout, the next transaction has
// lt in effect again: the inbox's (Driver.Begin with lt) and then the
// application's (db.BeginTx). db has one connection, and its pool's lock
// timeout is lt, so that a connection that took set's value for its own
// would skip its SET. read reads the lock timeout in effect in tx.
func NextTxLockTimeout(t *testing.T, db *sql.DB, dialect sqlstore.Dialect, lt time.Duration,
	set func(ctx context.Context, db *sql.DB) error, read func(ctx context.Context, tx *sql.Tx) (time.Duration, error)) {
	t.Helper()
	ctx := t.Context()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	next := []struct {
		name  string
		begin func() (*sql.Tx, error)
	}{
		{"the inbox's transaction", func() (*sql.Tx, error) { return d.Begin(ctx, &store.BeginParams{LockTimeout: lt}) }},
		{"the application's transaction", func() (*sql.Tx, error) { return db.BeginTx(ctx, nil) }},
	}
	// after returns the lock timeout in effect in the transaction of next[i].
	after := func(i int) (time.Duration, error) {
		if err := set(ctx, db); err != nil {
			return 0, fmt.Errorf("the application's statement: %w", err)
		}
		tx, err := next[i].begin()
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback() }()
		return read(ctx, tx)
	}
	for i := range next {
		got, err := after(i)
		if err != nil {
			t.Fatalf("%s: %v", next[i].name, err)
		}
		if got != lt {
			t.Errorf("%s after the application's statement: lock timeout %v, want %v (its SET was skipped)", next[i].name, got, lt)
		}
	}
}

// IdleConns checks that a pool opened by open with MaxIdleConns idle keeps
// the connections of a burst of 8 (sqlstore.DefaultMaxIdleConns for 0),
// where database/sql would close all but 2; negative keeps none.
func IdleConns(t *testing.T, open func(t *testing.T, idle int) (*sql.DB, error)) {
	const burst = 8
	for _, tc := range []struct {
		name     string
		idle     int // the option
		wantIdle int
	}{
		{"default", 0, burst},
		{"3", 3, 3},
		{"none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := open(t, tc.idle)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			before := db.Stats().MaxIdleClosed // Open's ping
			conns := make([]*sql.Conn, burst)
			for i := range conns {
				if conns[i], err = db.Conn(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range conns {
				_ = c.Close()
			}
			if s := db.Stats(); s.Idle != tc.wantIdle || s.MaxIdleClosed-before != int64(burst-tc.wantIdle) {
				t.Fatalf("after a burst of %d connections: %d idle, %d closed; want %d idle, %d closed",
					burst, s.Idle, s.MaxIdleClosed-before, tc.wantIdle, burst-tc.wantIdle)
			}
		})
	}
}

// PruneRetentionMS and PruneLimit are the arguments the prune plan tests
// explain the statements with: 1 h and a batch of 100, on 2000 young rows
// (inserted first) and 3000 expired ones.
const PruneRetentionMS, PruneLimit = 3_600_000, 100

// PruneStatement is a prune statement of a dialect, on the default tables:
// the table it deletes from, its time column and that column's index.
type PruneStatement struct{ Table, Column, Index, Stmt string }

// PruneStatements returns d's two prune statements, on the default tables.
func PruneStatements(d sqldialect.Dialect) []PruneStatement {
	q := sqldialect.Render(d.Templates(), store.Tables{}, d.Quote)
	return []PruneStatement{
		{"inbox", "received_at", "inbox_received_at_idx", q.PruneInbox},
		{"inbox_attempts", "last_failed_at", "inbox_attempts_last_failed_at_idx", q.PruneAttempts},
	}
}

// Migrate migrates the default tables of dialect on db.
func Migrate(t *testing.T, db *sql.DB, dialect sqlstore.Dialect) {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// ProcessTxFunc is the examples' flow: claim msg in a transaction the
// service owns, credit with the statement credit in it, commit when the
// outcome says so.
type ProcessTxFunc func(ctx context.Context, db *sql.DB, ib *inbox.Inbox[*sql.Tx], msg inbox.Message, credit string) (inbox.Outcome, error)

// ProcessTxFlow runs processTx twice for one message on db, migrated for
// dialect, with a credits table: the first delivery is Processed, the
// second a Duplicate, and one credit is written.
func ProcessTxFlow(t *testing.T, db *sql.DB, dialect sqlstore.Dialect, credit string, processTx ProcessTxFunc) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE credits (payment VARCHAR(100) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect})
	if err != nil {
		t.Fatal(err)
	}
	if err := driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []inbox.Status{inbox.Processed, inbox.Duplicate} {
		out, err := processTx(ctx, db, ib, inbox.Message{ID: "payment-1"}, credit)
		if err != nil || out.Status != want {
			t.Fatalf("delivery %d: %v %v, want %v", i+1, out.Status, err, want)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM credits`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d credits (%v), want 1", n, err)
	}
}

// OutboxBatches checks the outbox statements that a dialect runs in
// chunks (multi-row inserts, lists of sequence numbers, failures) on d,
// whose tables are migrated: one Write of more rows than a statement
// takes, with a payload of more bytes than one takes and a duplicate ID
// across chunks, then a claim, release, claim, a stale token's release
// (which releases nothing), delete and mark, then deletes and marks of
// thousands, Writes of their IDs and prunes of the marked rows, oldest
// first.
func OutboxBatches(t *testing.T, db *sql.DB, d *sqlstore.Driver) {
	t.Helper()
	ctx := context.Background()
	const n = 11001 // more placeholders than MySQL (65535) and SQLite (32766) take in one statement
	rows := make([]*store.OutboxRow, n)
	for i := range rows {
		rows[i] = &store.OutboxRow{ID: fmt.Appendf(nil, "b-%04d", i), Destination: "d", Payload: []byte("p")}
	}
	rows[1] = &store.OutboxRow{ID: []byte("b-big"), Destination: "d", Key: []byte("k"), Payload: make([]byte, 3<<20)}
	rows[900].ID = rows[3].ID // skipped
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrote, err := d.OutboxWrite(ctx, tx, rows)
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("OutboxWrite: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if wrote != n-1 {
		t.Fatalf("OutboxWrite wrote %d rows, want %d (one duplicate skipped)", wrote, n-1)
	}
	claim := func(token string) []*store.OutboxRecord {
		t.Helper()
		recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 2 * n, Lease: time.Minute, Token: []byte(token)})
		if err != nil {
			t.Fatalf("OutboxClaim: %v", err)
		}
		if len(recs) != n-1 {
			t.Fatalf("claimed %d rows, want %d", len(recs), n-1)
		}
		for i, r := range recs {
			want := rows[i]
			if i >= 900 {
				want = rows[i+1]
			}
			if string(r.ID) != string(want.ID) || len(r.Payload) != len(want.Payload) || string(r.Key) != string(want.Key) {
				t.Fatalf("claimed row %d is %q (%d bytes, key %q), want %q (%d bytes, key %q): not in the order written",
					i, r.ID, len(r.Payload), r.Key, want.ID, len(want.Payload), want.Key)
			}
		}
		return recs
	}
	recs := claim("first")
	fails := make([]store.OutboxFailure, len(recs))
	seqs := make([]int64, len(recs))
	for i, r := range recs {
		fails[i], seqs[i] = store.OutboxFailure{Seq: r.Seq, Released: true}, r.Seq
	}
	if err := d.OutboxFail(ctx, []byte("first"), fails); err != nil {
		t.Fatalf("OutboxFail: %v", err)
	}
	claim("second")
	// The first lease's token releases nothing of the second's.
	if err := d.OutboxFail(ctx, []byte("first"), fails); err != nil {
		t.Fatalf("OutboxFail with a stale token: %v", err)
	}
	if recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: n, Lease: time.Minute, Token: []byte("third")}); err != nil || len(recs) != 0 {
		t.Fatalf("claimed %d rows (%v) after a failure recorded with a stale token, want none: it released the second lease", len(recs), err)
	}
	if got, err := d.OutboxDelete(ctx, []byte("first"), seqs); err != nil || got != 0 {
		t.Fatalf("OutboxDelete with the released lease's token deleted %d (%v), want 0", got, err)
	}
	if got, err := d.OutboxMarkPublished(ctx, []byte("first"), seqs); err != nil || got != 0 {
		t.Fatalf("OutboxMarkPublished with the released lease's token marked %d (%v), want 0", got, err)
	}
	// Deleted, kept (marked in two batches, the second later) and pruned
	// by thousands: more sequence numbers than a statement takes.
	deleted, older, newer := seqs[:5000], seqs[5000:8000], seqs[8000:]
	if got, err := d.OutboxDelete(ctx, []byte("second"), deleted); err != nil || got != len(deleted) {
		t.Fatalf("OutboxDelete deleted %d (%v), want %d", got, err, len(deleted))
	}
	mark := func(s []int64) {
		t.Helper()
		if got, err := d.OutboxMarkPublished(ctx, []byte("second"), s); err != nil || got != len(s) {
			t.Fatalf("OutboxMarkPublished marked %d (%v), want %d", got, err, len(s))
		}
	}
	mark(older)
	time.Sleep(5 * time.Millisecond) // SQLite's clock counts milliseconds
	mark(newer)
	if got, err := d.OutboxDelete(ctx, []byte("second"), seqs); err != nil || got != 0 {
		t.Fatalf("OutboxDelete after the rows were marked published deleted %d (%v), want 0: the mark kept the lease", got, err)
	}
	// Which of three IDs, a deleted row's, an older and a newer kept row's,
	// a Write inserts: a kept row's ID is skipped until it is pruned.
	ids := func(seqs ...int64) []*store.OutboxRow {
		var out []*store.OutboxRow
		for _, r := range recs {
			if slices.Contains(seqs, r.Seq) {
				out = append(out, &store.OutboxRow{ID: r.ID, Destination: "d"})
			}
		}
		return out
	}
	rewrite := func(want int, what string) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.OutboxWrite(ctx, tx, ids(deleted[0], older[0], newer[0]))
		if err != nil {
			_ = tx.Rollback()
			t.Fatalf("OutboxWrite: %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("OutboxWrite of a deleted row's ID and two kept rows' %s inserted %d rows, want %d", what, got, want)
		}
	}
	rewrite(1, "while they are kept")
	prune := func(age time.Duration, limit, want int) {
		t.Helper()
		if got, err := d.OutboxPrunePublished(ctx, age, limit); err != nil || got != want {
			t.Fatalf("OutboxPrunePublished(%v, %d) deleted %d (%v), want %d", age, limit, got, err, want)
		}
	}
	prune(time.Hour, n, 0)
	prune(0, len(older), len(older))
	rewrite(2, "after the older were pruned (oldest first)")
	prune(0, n, len(newer))
	rewrite(3, "after all were pruned")
}

// OutboxKept checks, on d whose tables are migrated, that a row marked
// published is never claimed again, though its lease ran out, and that it
// holds back no later row of its key in the ordered claim, which an
// unpublished older row does.
func OutboxKept(t *testing.T, db *sql.DB, d *sqlstore.Driver) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rows []*store.OutboxRow
	for _, id := range []string{"k-1", "k-2", "k-3"} {
		rows = append(rows, &store.OutboxRow{ID: []byte(id), Destination: "d", Key: []byte("k")})
	}
	if _, err := d.OutboxWrite(ctx, tx, rows); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	claim := func(token, want string) []int64 {
		t.Helper()
		recs, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Millisecond, Token: []byte(token), Ordered: true})
		if err != nil {
			t.Fatalf("OutboxClaim: %v", err)
		}
		var got []string
		var seqs []int64
		for _, r := range recs {
			got, seqs = append(got, string(r.ID)), append(seqs, r.Seq)
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("ordered claim %s took %q, want %q", token, got, want)
		}
		return seqs
	}
	seqs := claim("a", "k-1")
	if got, err := d.OutboxMarkPublished(ctx, []byte("a"), seqs); err != nil || got != 1 {
		t.Fatalf("OutboxMarkPublished marked %d (%v), want 1", got, err)
	}
	time.Sleep(10 * time.Millisecond) // the 1 ms lease ran out
	claim("b", "k-2")                 // k-1 published: neither claimed again nor holding k-2 back
	time.Sleep(10 * time.Millisecond)
	claim("c", "k-2") // k-2 unpublished, its lease run out: claimed again, holding k-3 back
}

// BatchTxEnded checks that ProcessBatchFunc notices, before its COMMIT, a
// transaction that a handler's statement ended while the handler returned
// nil (CheckTx without a savepoint), for each statement of ends: "ROLLBACK",
// as MySQL does on a deadlock, after which later statements commit on their
// own; on PostgreSQL, a failed statement, which aborts the transaction. The
// handler does it in its first call only: the batch is then run again with
// a savepoint per message, and every message is processed once.
func BatchTxEnded(t *testing.T, h storetest.Harness[*sql.Tx], ends ...string) {
	t.Helper()
	for _, end := range ends {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := openMigrated(t, h)
			ib, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "ended"})
			if err != nil {
				t.Fatal(err)
			}
			// In the second pass too: e-3's handler ends the transaction
			// after e-1 and e-2 were processed in it. They must not be
			// reported processed unless their writes commit.
			t.Run("second pass", func(t *testing.T) {
				ib2, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "ended-2"})
				if err != nil {
					t.Fatal(err)
				}
				ended, seen := false, map[string]int{}
				outs, err := ib2.ProcessBatch(ctx, []inbox.Message{{ID: "s-1"}, {ID: "s-2"}, {ID: "s-3"}, {ID: "s-4"}},
					func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
						seen[m.ID]++
						if err := env.Write(ctx, tx, m.ID); err != nil {
							return err
						}
						switch {
						case m.ID == "s-4" && !ended: // fails the first pass
							return errors.New("s-4 fails")
						case m.ID == "s-3" && !ended && seen[m.ID] == 2: // in the second pass
							ended = true
							_ = env.Exec(ctx, tx, end)
						}
						return nil
					})
				for i, o := range outs {
					id := fmt.Sprintf("s-%d", i+1)
					n, cerr := env.Count(ctx, id)
					if cerr != nil {
						t.Fatal(cerr)
					}
					if o.Status == inbox.Processed && n != 1 || o.Status == inbox.Retry && n != 0 {
						t.Fatalf("%s: %v with %d effects (batch error %v): reported processed without its effect, or lost", id, o.Status, n, err)
					}
				}
			})
			calls := 0
			outs, err := ib.ProcessBatchFunc(ctx, []inbox.Message{{ID: "e-1"}, {ID: "e-2"}, {ID: "e-3"}},
				func(ctx context.Context, tx *sql.Tx, ms []*inbox.Message) error {
					calls++
					for _, m := range ms {
						if err := env.Write(ctx, tx, m.ID); err != nil {
							return err
						}
					}
					if calls == 1 {
						_ = env.Exec(ctx, tx, end) // the handler's bug, or a deadlock it swallowed
					}
					return nil
				})
			if err != nil {
				t.Fatalf("ProcessBatchFunc: %v", err)
			}
			for i, o := range outs {
				if o.Status != inbox.Processed {
					t.Fatalf("message %d: %v, want processed", i, o.Status)
				}
			}
			if calls != 4 {
				t.Fatalf("%d handler calls, want 4: the batch, then one per message after the first COMMIT was refused", calls)
			}
			for _, id := range []string{"e-1", "e-2", "e-3"} {
				if n, err := env.Count(ctx, id); err != nil || n != 1 {
					t.Fatalf("%s: %d effects (%v), want 1", id, n, err)
				}
			}
		})
	}
}

// ClaimBatch checks Driver.ClaimBatch on a batch of 130 IDs, more than one
// MySQL statement takes (64), sorted bytewise, among them IDs that differ
// only in case, trailing spaces or NUL bytes and invalid UTF-8: a
// committed claim of some of them first (the first and last of each 64, of
// another type and payload) makes those duplicates, with their stored
// fingerprint and type; an ID given twice is a duplicate of its first
// claim; the others are claimed.
func ClaimBatch(t *testing.T, h storetest.Harness[*sql.Tx]) {
	t.Helper()
	ctx := context.Background()
	env := openMigrated(t, h)
	d := env.Driver.(*sqlstore.Driver)
	ids := [][]byte{[]byte("a"), []byte("A"), []byte("a "), []byte("a\x00"), {0xff, 0xfe}, {0}}
	for i := len(ids); i < 130; i++ {
		ids = append(ids, fmt.Appendf(nil, "id-%03d", i))
	}
	slices.SortFunc(ids, bytes.Compare)
	claim := func(id []byte, typ string) store.ClaimParams {
		fp := sha256.Sum256(append([]byte(typ), id...))
		return store.ClaimParams{Key: store.Key{Consumer: []byte("c"), MessageID: id}, Type: typ, Fingerprint: fp[:]}
	}
	batch := func(claims []store.ClaimParams) []store.ClaimResult {
		t.Helper()
		tx, err := d.Begin(ctx, &store.BeginParams{LockTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.ClaimBatch(ctx, tx, &store.ClaimBatchParams{Claims: claims, LockTimeout: time.Second})
		if err == nil {
			err = d.CheckTx(ctx, tx, "")
		}
		if err != nil {
			_ = d.Rollback(ctx, tx)
			t.Fatalf("ClaimBatch of %d: %v", len(claims), err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if len(res) != len(claims) {
			t.Fatalf("ClaimBatch of %d returned %d results", len(claims), len(res))
		}
		return res
	}
	old := map[int]bool{0: true, 63: true, 64: true, 127: true, 128: true, 129: true, 5: true}
	var before []store.ClaimParams
	for i := range old {
		before = append(before, claim(ids[i], "old"))
	}
	slices.SortFunc(before, func(a, b store.ClaimParams) int { return bytes.Compare(a.MessageID, b.MessageID) })
	for i, r := range batch(before) {
		if !r.Claimed {
			t.Fatalf("first batch: %q not claimed", before[i].MessageID)
		}
	}
	var claims []store.ClaimParams
	for _, id := range ids {
		claims = append(claims, claim(id, "new"))
	}
	claims = append(claims, claim(ids[7], "again"), claim(ids[0], "again"))
	res := batch(claims)
	for i, r := range res {
		c := claims[i]
		var want store.ClaimResult
		switch {
		case i >= len(ids) && old[slices.IndexFunc(ids, func(id []byte) bool { return bytes.Equal(id, c.MessageID) })]:
			want = store.ClaimResult{Fingerprint: claim(c.MessageID, "old").Fingerprint, Type: "old"}
		case i >= len(ids):
			want = store.ClaimResult{Fingerprint: claim(c.MessageID, "new").Fingerprint, Type: "new"}
		case old[i]:
			want = store.ClaimResult{Fingerprint: claim(c.MessageID, "old").Fingerprint, Type: "old"}
		default:
			want = store.ClaimResult{Claimed: true}
		}
		if r.Claimed != want.Claimed || !bytes.Equal(r.Fingerprint, want.Fingerprint) || r.Type != want.Type {
			t.Fatalf("claim %d (%q): claimed %v, fingerprint %x, type %q; want claimed %v, fingerprint %x, type %q",
				i, c.MessageID, r.Claimed, r.Fingerprint, r.Type, want.Claimed, want.Fingerprint, want.Type)
		}
	}
}

// ProcessTxHandlerEndsTx checks ProcessTx with a handler that commits or
// rolls back the caller's transaction: Retry, counted as a handler failure
// in a transaction of ProcessTx's own (the caller's is over: Commit() is
// false), with an error wrapping inbox.ErrTxEndedByHandler; the redelivery
// is a Duplicate if the handler committed, processed if it rolled back.
// (pgxstore cannot tell that a pgxpool.Tx of the caller's is over without
// a round trip, so this is sqlstore's alone.)
func ProcessTxHandlerEndsTx(t *testing.T, h storetest.Harness[*sql.Tx]) {
	t.Helper()
	ctx := context.Background()
	env := openMigrated(t, h)
	ib, err := inbox.New(ctx, env.Driver, &inbox.Config{Consumer: "tx-ended"})
	if err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error { return env.Write(ctx, tx, m.ID) }
	for _, tc := range []struct {
		id      string
		end     func(*sql.Tx) error
		effects int
		again   inbox.Status
	}{
		{"ends-commit", (*sql.Tx).Commit, 1, inbox.Duplicate},
		{"ends-rollback", (*sql.Tx).Rollback, 0, inbox.Processed},
	} {
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: tc.id}, func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			if err := write(ctx, tx, m); err != nil {
				return err
			}
			return tc.end(tx)
		})
		_ = tx.Rollback()
		if out.Status != inbox.Retry || out.Attempts != 1 || out.Commit() || !errors.Is(err, inbox.ErrTxEndedByHandler) {
			t.Fatalf("%s: %v after %d attempts, Commit() %v (%v); want Retry after 1, Commit() false, an error wrapping inbox.ErrTxEndedByHandler",
				tc.id, out.Status, out.Attempts, out.Commit(), err)
		}
		if n, err := env.Count(ctx, tc.id); err != nil || n != tc.effects {
			t.Fatalf("%s: %d effects (%v) after the handler ended the transaction, want %d", tc.id, n, err, tc.effects)
		}
		out, err = ib.Process(ctx, inbox.Message{ID: tc.id}, write)
		if n, _ := env.Count(ctx, tc.id); out.Status != tc.again || n != 1 {
			t.Fatalf("%s: redelivery %v (%v) with %d effects, want %v with 1", tc.id, out.Status, err, n, tc.again)
		}
	}
}

// openMigrated opens an environment of h on the default tables, migrated.
func openMigrated(t *testing.T, h storetest.Harness[*sql.Tx]) *storetest.Env[*sql.Tx] {
	t.Helper()
	env, err := h.Open(t, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return env
}
