package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// withParam adds a parameter to a go-sql-driver/mysql DSN.
func withParam(t testing.TB, dsn, param string) string {
	t.Helper()
	if _, err := gomysql.ParseDSN(dsn); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}

// mysqlInbox migrates a MySQL driver on db with cfg (Dialect set here) and
// returns an inbox with icfg on it, with a ledger table (k) when ledger.
func mysqlInbox(t *testing.T, db *sql.DB, cfg sqlstore.Config, icfg inbox.Config, ledger bool) *inbox.Inbox[*sql.Tx] {
	t.Helper()
	ctx := context.Background()
	if ledger {
		if _, err := db.Exec("CREATE TABLE ledger (k VARCHAR(100) NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Dialect = mysql.Dialect
	d, err := sqlstore.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, d, &icfg)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

func TestOpenMySQL(t *testing.T) {
	t.Parallel()
	dsn := mysqlenv.Database(t)
	tests := []struct {
		name     string
		dsn      string
		opts     *mysql.Options
		wantErr  error // errors.Is; nil: opens
		wantWait int   // session innodb_lock_wait_timeout
	}{
		{"default 5 s", dsn, nil, nil, 5},
		{"rounded up", dsn, &mysql.Options{LockTimeout: 1500 * time.Millisecond}, nil, 2},
		{"at least 1 s", dsn, &mysql.Options{LockTimeout: 300 * time.Millisecond}, nil, 1},
		{"DSN parameter kept", withParam(t, dsn, "innodb_lock_wait_timeout=7"), nil, nil, 7},
		{"option over DSN parameter", withParam(t, dsn, "innodb_lock_wait_timeout=7"), &mysql.Options{LockTimeout: 3 * time.Second}, nil, 3},
		{"clientFoundRows=true refused", withParam(t, dsn, "clientFoundRows=true"), nil, sqlstore.ErrClientFoundRows, 0},
		{"clientFoundRows=1 refused", withParam(t, dsn, "clientFoundRows=1"), nil, sqlstore.ErrClientFoundRows, 0},
		{"clientFoundRows=false", withParam(t, dsn, "clientFoundRows=false"), nil, nil, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := mysql.Open(tc.dsn, tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Open: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // one connection: the settings are the connection's
			var wait int
			if err := db.QueryRow("SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&wait); err != nil {
				t.Fatal(err)
			}
			if wait != tc.wantWait {
				t.Fatalf("innodb_lock_wait_timeout = %d, want %d", wait, tc.wantWait)
			}
			var iso string
			err = db.QueryRow("SELECT @@SESSION.transaction_isolation").Scan(&iso)
			if err != nil { // MariaDB before 11.1 and MySQL before 8 call it tx_isolation
				err = db.QueryRow("SELECT @@SESSION.tx_isolation").Scan(&iso)
			}
			if err != nil || iso != "READ-COMMITTED" {
				t.Fatalf("session isolation %q, %v; want READ-COMMITTED", iso, err)
			}
		})
	}
	for _, bad := range []string{"not a dsn", withParam(t, dsn, "innodb_lock_wait_timeout=5;DROP")} {
		if db, err := mysql.Open(bad, nil); err == nil {
			_ = db.Close()
			t.Fatalf("Open(%q) opened, want an error", bad)
		}
	}
}

// A pool opened around Open with clientFoundRows=true counts a
// duplicate claim as one row affected, like a new one: the claim must
// fail rather than run the handler a second time.
func TestMySQLClientFoundRowsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("mysql", withParam(t, mysqlenv.Database(t), "clientFoundRows=true&innodb_lock_wait_timeout=1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "found-rows"}, true)
	var runs atomic.Int32
	hd := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		runs.Add(1)
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", m.ID)
		return err
	}
	if out, err := ib.Process(ctx, inbox.Message{ID: "m"}, hd); err != nil || out.Status != inbox.Processed {
		t.Fatalf("first delivery: %v %v, want Processed", out.Status, err)
	}
	for _, process := range []func() (inbox.Outcome, error){
		func() (inbox.Outcome, error) { return ib.Process(ctx, inbox.Message{ID: "m"}, hd) },
		func() (inbox.Outcome, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			return ib.ProcessTx(ctx, tx, inbox.Message{ID: "m"}, hd)
		},
	} {
		out, err := process()
		if !errors.Is(err, sqlstore.ErrClientFoundRows) || out.Ack() || out.Commit() {
			t.Fatalf("duplicate on a clientFoundRows connection: %+v %v, want no ack and ErrClientFoundRows", out, err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || n != 1 {
		t.Fatalf("handler ran %d times, %d effects; want 1 and 1", runs.Load(), n)
	}
}

// The claim's marker of a duplicate (LAST_INSERT_ID(1)) must not leak into
// the next claim on the same connection.
func TestMySQLDuplicateThenNewOnOneConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMySQL(t, "")
	db.SetMaxOpenConns(1)
	ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "one-conn"}, false)
	nop := func(context.Context, *sql.Tx, *inbox.Message) error { return nil }
	for i, step := range []struct {
		id   string
		want inbox.Status
	}{{"a", inbox.Processed}, {"a", inbox.Duplicate}, {"b", inbox.Processed}, {"b", inbox.Duplicate}, {"c", inbox.Processed}} {
		if out, err := ib.Process(ctx, inbox.Message{ID: step.id}, nop); err != nil || out.Status != step.want {
			t.Fatalf("step %d, ID %q: %v %v, want %v", i, step.id, out.Status, err, step.want)
		}
	}
}

// heldRow makes table acct with row 1 (n = 0) and returns a transaction
// that holds that row's lock (it added 100), rolled back when t ends.
func heldRow(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	if _, err := db.Exec("CREATE TABLE acct (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO acct VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	holder, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback() })
	if _, err := holder.Exec("UPDATE acct SET n = n + 100 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	return holder
}

// The driver decides which MySQL errors are transient (a handler's own
// lock wait timeout, returned as it is or wrapped) and which no retry fixes.
func TestMySQLErrorClasses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMySQL(t, "")
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	heldRow(t, db)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, lockErr := tx.Exec("UPDATE acct SET n = n + 1 WHERE id = 1") // waits 1 s, then 1205
	_, missing := db.Exec("SELECT * FROM no_such_table")
	tests := []struct {
		name                     string
		err                      error
		transient, unrecoverable bool
	}{
		{"lock wait timeout", lockErr, true, false},
		{"wrapped", errors.Join(errors.New("handler"), lockErr), true, false},
		{"deadlock", &gomysql.MySQLError{Number: 1213}, true, false},
		// A Galera node outside the primary component, at COMMIT too.
		{"galera node not ready", &gomysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'},
			Message: "WSREP has not yet prepared node for application use"}, true, false},
		// Without Galera, 1047 is a protocol error that no retry fixes.
		{"unknown command", &gomysql.MySQLError{Number: 1047, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: "Unknown command"}, false, false},
		{"lost connection", gomysql.ErrInvalidConn, true, false},
		{"duplicate key", &gomysql.MySQLError{Number: 1062}, false, false},
		{"missing table", missing, false, true},
		{"access denied", &gomysql.MySQLError{Number: 1142}, false, true},
		{"context deadline", context.DeadlineExceeded, false, false},
		{"other", errors.New("no"), false, false},
	}
	for _, tc := range tests {
		if got := d.Retryable(tc.err); got != tc.transient {
			t.Errorf("%s: Retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.transient)
		}
		if got := d.Unrecoverable(tc.err); got != tc.unrecoverable {
			t.Errorf("%s: Unrecoverable(%v) = %v, want %v", tc.name, tc.err, got, tc.unrecoverable)
		}
	}
}

// A handler's own lock wait timeout, returned as the driver's error and not
// marked, is retried and never dead-lettered, even at MaxAttempts.
func TestMySQLHandlerLockWaitRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMySQL(t, "") // innodb_lock_wait_timeout 1 s
	ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "lock-wait", MaxAttempts: 1}, false)
	holder := heldRow(t, db)
	credit := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		_, err := tx.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 1")
		return err // the *gomysql.MySQLError as it is
	}
	m := inbox.Message{ID: "m"}
	for _, p := range []struct {
		name string
		run  func() (inbox.Outcome, error)
	}{
		{"Process", func() (inbox.Outcome, error) {
			return ib.Process(ctx, m, credit)
		}},
		{"ProcessTx", func() (inbox.Outcome, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			return ib.ProcessTx(ctx, tx, m, credit)
		}},
	} {
		out, err := p.run() // MaxAttempts 1: a counted failure would be a dead letter
		if out.Status != inbox.Retry || mysqlErrNumber(err) != 1205 {
			t.Fatalf("%s behind a held row lock: %v %v, want Retry with error 1205", p.name, out.Status, err)
		}
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if out, err := ib.Process(ctx, m, credit); err != nil || out.Status != inbox.Processed {
		t.Fatalf("after the lock is released: %v %v, want Processed", out.Status, err)
	}
	var n int
	if err := db.QueryRow("SELECT n FROM acct WHERE id = 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("balance %d (%v), want 1", n, err)
	}
	if dls, err := ib.DeadLetters(ctx, nil); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters %v (%v), want none", dls, err)
	}
}

func mysqlErrNumber(err error) uint16 {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// On a pool that was not opened with Open (the server's 50 s lock wait
// here), every transaction of the inbox sets its own lock timeout, in
// Process and in the caller's transaction of ProcessTx, rounded up to
// whole seconds; the pool's connections keep the value afterwards.
func TestMySQLForeignPoolLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("mysql", withParam(t, mysqlenv.Database(t), "innodb_lock_wait_timeout=50"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "foreign", LockTimeout: 1500 * time.Millisecond}, true)
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := d.DurabilityWarnings(ctx); err != nil || len(w) != 0 {
		t.Fatalf("warnings %q (%v), want none: the lock wait of a pool is not the inbox's", w, err)
	}
	readBack := func(tx *sql.Tx) int {
		var s int
		if err := tx.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		run  func(h inbox.Handler[*sql.Tx]) (inbox.Outcome, error)
	}{
		{"Process", func(h inbox.Handler[*sql.Tx]) (inbox.Outcome, error) {
			return ib.Process(ctx, inbox.Message{ID: "p"}, h)
		}},
		{"ProcessTx", func(h inbox.Handler[*sql.Tx]) (inbox.Outcome, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: "tx"}, h)
			if err == nil && out.Commit() {
				err = tx.Commit()
			}
			return out, err
		}},
	} {
		var got int
		out, err := tc.run(func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			got = readBack(tx)
			return nil
		})
		if err != nil || out.Status != inbox.Processed || got != 2 {
			t.Fatalf("%s: %v %v, innodb_lock_wait_timeout %d in the handler; want Processed and 2 (1.5 s rounded up)", tc.name, out.Status, err, got)
		}
	}
}

// A handler's deadlock in ProcessBatch: InnoDB rolls back the whole
// transaction (the batch's victim is its heavier one), the savepoints
// with it, so the whole batch fails: every message gets Retry and the
// error is returned, and nothing of the batch commits. (On PostgreSQL and
// SQLite only the savepoint is undone: see storetest's BatchTransient.)
func TestMySQLBatchDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openMySQL(t, "")
	ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "deadlock"}, true)
	for _, q := range []string{
		"CREATE TABLE acct (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO acct VALUES (1, 0), (2, 0)",
		"CREATE TABLE heavy (id INT PRIMARY KEY) ENGINE=InnoDB",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var deadlocks atomic.Int64
	hd := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", m.ID); err != nil {
			return err
		}
		if m.ID != "dl" || deadlocks.Load() >= 2 {
			return nil
		}
		// The other transaction locks row 2 and waits for row 1, which
		// tx holds; tx then asks for row 2. It changed 100 rows first, so
		// that InnoDB picks tx as the victim.
		if _, err := tx.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		other, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer other.Rollback()
		if _, err := other.ExecContext(ctx, "INSERT INTO heavy (id) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100) SELECT i FROM s"); err != nil {
			return err
		}
		if _, err := other.ExecContext(ctx, "DELETE FROM heavy"); err != nil {
			return err
		}
		if _, err := other.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 2"); err != nil {
			return err
		}
		waiting := make(chan error, 1)
		go func() {
			_, err := other.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 1")
			waiting <- err
		}()
		time.Sleep(200 * time.Millisecond) // other waits for row 1 by now
		_, err = tx.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 2")
		if mysqlErrNumber(err) == 1213 {
			deadlocks.Add(1)
		}
		<-waiting
		return err
	}
	outs, err := ib.ProcessBatch(ctx, []inbox.Message{{ID: "t-1"}, {ID: "dl"}, {ID: "t-2"}}, hd)
	if deadlocks.Load() == 0 {
		t.Fatalf("no deadlock in the handler (%v): the test did not make one", err)
	}
	if err == nil || len(outs) != 3 {
		t.Fatalf("outcomes %+v, %v; want an error", outs, err)
	}
	for i, o := range outs {
		if o.Status != inbox.Retry {
			t.Fatalf("message %d: %v, want Retry for all (%v)", i, o.Status, err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d effects committed (%v), want none", n, err)
	}
	var attempts, transient int
	if err := db.QueryRow("SELECT attempts, transient_failures FROM inbox_attempts WHERE message_id = 'dl'").Scan(&attempts, &transient); err != nil || attempts != 0 || transient != 1 {
		t.Fatalf("dl: %d attempts, %d transient failures (%v); want 0 and 1", attempts, transient, err)
	}
	if outs, err := ib.ProcessBatch(ctx, []inbox.Message{{ID: "t-1"}, {ID: "dl"}, {ID: "t-2"}}, hd); err != nil || outs[0].Status != inbox.Processed || outs[1].Status != inbox.Processed {
		t.Fatalf("the batch again, without the deadlock: %+v %v; want all processed", outs, err)
	}
}

// ProcessTx in a transaction of another pool than the driver's, after
// Process kept the claim statements prepared on the driver's pool: the
// caller's transaction must not be given those statements.
func TestMySQLProcessTxOtherPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := mysqlenv.Database(t)
	var pools [2]*sql.DB
	for i := range pools {
		db, err := mysql.Open(dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		pools[i] = db
	}
	ib := mysqlInbox(t, pools[0], sqlstore.Config{}, inbox.Config{Consumer: "c"}, false)
	noop := func(context.Context, *sql.Tx, *inbox.Message) error { return nil }
	if out, err := ib.Process(ctx, inbox.Message{ID: "first"}, noop); err != nil || out.Status != inbox.Processed {
		t.Fatalf("Process: %v %v", out.Status, err)
	}
	for i, want := range []inbox.Status{inbox.Processed, inbox.Duplicate} {
		tx, err := pools[1].BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: "second"}, noop)
		if out.Commit() {
			err = errors.Join(err, tx.Commit())
		} else {
			_ = tx.Rollback()
		}
		if err != nil || out.Status != want {
			t.Fatalf("ProcessTx %d in another pool's transaction: %v %v, want %v", i+1, out.Status, err, want)
		}
	}
}

// A handler whose statement is a real deadlock's victim: InnoDB rolled
// back the caller's whole transaction (the claim and the savepoint with it).
// Whether the handler returns the deadlock or swallows it, ProcessTx must
// not call that Processed, and records the failure (transient when
// returned, counted when swallowed) in a transaction that the caller's
// COMMIT commits.
func TestMySQLProcessTxDeadlockVictim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		swallow   bool
		attempts  int
		transient bool
	}{{"returned", false, 0, true}, {"swallowed", true, 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := openMySQL(t, "")
			ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "victim",
				Backoff: inbox.Backoff{Initial: time.Second, Max: time.Hour, Jitter: -1}}, false)
			deadlockVictim := deadlockSetup(t, db)
			handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				err := deadlockVictim(ctx, tx)
				if tc.swallow {
					_, _ = tx.ExecContext(ctx, "INSERT INTO later VALUES ('after')") // outside the rolled-back transaction
					return nil
				}
				return err
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: "m"}, handler)
			if out.Status != inbox.Retry || !out.Commit() || out.Attempts != tc.attempts || err == nil || inbox.IsRetryable(err) != tc.transient {
				_ = tx.Rollback()
				t.Fatalf("ProcessTx of a deadlock's victim: %v, commit %v, %d attempts, error %v; want Retry to commit, %d attempts, transient %v",
					out.Status, out.Commit(), out.Attempts, err, tc.attempts, tc.transient)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			// The failure was recorded: the next one adds to it.
			next, _ := ib.Process(ctx, inbox.Message{ID: "m"}, func(ctx context.Context, tx *sql.Tx, _ *inbox.Message) error {
				if tc.transient {
					return &gomysql.MySQLError{Number: 1213, Message: "Deadlock found"}
				}
				return errors.New("ordinary")
			})
			if tc.transient && next.Delay != 2*time.Second || !tc.transient && next.Attempts != 2 {
				t.Fatalf("next failure: %d attempts, delay %v; want the first failure counted before it", next.Attempts, next.Delay)
			}
			if out, err := ib.Process(ctx, inbox.Message{ID: "m"}, func(context.Context, *sql.Tx, *inbox.Message) error { return nil }); err != nil || out.Status != inbox.Processed {
				t.Fatalf("redelivery: %v %v, want Processed (the claim never committed)", out.Status, err)
			}
			// (MariaDB runs a swallowing handler's write after the deadlock
			// outside any transaction: it committed at once, beyond any
			// rollback. No store can undo a handler's writes after an error
			// it swallowed; the claim, at least, did not commit.)
		})
	}
}

// deadlockSetup makes tables for a deadlock and returns a function that
// makes the statement it runs in tx a real deadlock's victim and returns
// its error: another transaction, heavier (200 rows changed) so that InnoDB
// picks tx as the victim, takes row 2, then waits for row 1, which tx holds.
func deadlockSetup(t *testing.T, db *sql.DB) func(ctx context.Context, tx *sql.Tx) error {
	t.Helper()
	for _, q := range []string{
		"CREATE TABLE acct (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO acct VALUES (1, 0), (2, 0)",
		"CREATE TABLE later (k VARCHAR(20) NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE filler (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB",
		"INSERT INTO filler SELECT seq, 0 FROM seq_1_to_200",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	other, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Rollback() })
	for _, q := range []string{"UPDATE filler SET n = n + 1", "UPDATE acct SET n = n + 10 WHERE id = 2"} {
		if _, err := other.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		otherDone := make(chan error, 1)
		go func() {
			_, err := other.Exec("UPDATE acct SET n = n + 10 WHERE id = 1") // waits for tx
			otherDone <- err
		}()
		time.Sleep(300 * time.Millisecond)
		_, err := tx.ExecContext(ctx, "UPDATE acct SET n = n + 1 WHERE id = 2") // the deadlock
		if mysqlErrNumber(err) != 1213 {
			t.Errorf("the handler's statement: %v, want a deadlock (1213) with the handler as its victim", err)
		}
		if oerr := <-otherDone; oerr != nil {
			t.Errorf("the other transaction: %v", oerr)
		}
		return err
	}
}

// On a pool of Open, the lock timeout costs no statement per message:
// a connection sets innodb_lock_wait_timeout once when the inbox's
// differs from Options.LockTimeout, and never when they agree. The server
// counts the statements of the session (one connection here): Questions,
// and Com_set_option for SET.
func TestMySQLLockTimeoutNoRoundTrip(t *testing.T) {
	t.Parallel()
	const messages = 20
	for _, tc := range []struct {
		name     string
		lt       time.Duration
		wantSets int
	}{
		{"same as the pool's", 5 * time.Second, 0},
		{"another", 2 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := mysql.Open(mysqlenv.Database(t), nil) // 5 s
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1)
			ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "rt", LockTimeout: tc.lt}, true)
			status := func() (questions, sets int) {
				for _, v := range []struct {
					name string
					n    *int
				}{{"Questions", &questions}, {"Com_set_option", &sets}} {
					var name string
					if err := db.QueryRow("SHOW SESSION STATUS LIKE '"+v.name+"'").Scan(&name, v.n); err != nil {
						t.Fatal(err)
					}
				}
				return questions, sets
			}
			write := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", m.ID)
				return err
			}
			_, before := status()
			if out, err := ib.Process(ctx, inbox.Message{ID: "warm-up"}, write); err != nil || out.Status != inbox.Processed {
				t.Fatalf("warm-up: %v %v", out.Status, err)
			}
			_ = db.QueryRow("SELECT 1").Scan(new(int)) // an application's statement: no SET
			q0, s0 := status()
			// The warm-up's transaction sets it, if at all.
			if s0-before != tc.wantSets {
				t.Fatalf("%d SETs in the first transaction, want %d", s0-before, tc.wantSets)
			}
			for i := range messages {
				if out, err := ib.Process(ctx, inbox.Message{ID: fmt.Sprintf("m-%d", i)}, write); err != nil || out.Status != inbox.Processed {
					t.Fatalf("message %d: %v %v", i, out.Status, err)
				}
			}
			q1, s1 := status()
			// Between the two readings: the second's 2 statements, the first's second one.
			perMessage := float64(q1-q0-3) / messages
			t.Logf("%.1f statements per message, %d SETs", perMessage, s1-s0)
			if s1-s0 != 0 {
				t.Fatalf("%d SETs for %d messages after the first, want none", s1-s0, messages)
			}
		})
	}
}

// A connection of Open that the application's statements gave another
// innodb_lock_wait_timeout does not skip the next transaction's SET:
// that transaction, the inbox's or the application's, gets its own
// value back, however the statement was written or sent.
func TestMySQLLockWaitSetByApplication(t *testing.T) {
	t.Parallel()
	const set = "SET SESSION innodb_lock_wait_timeout = 30"
	for _, tc := range []struct {
		name string
		dsn  string // parameters added to the DSN
		set  func(context.Context, *sql.DB) error
	}{
		{"SET SESSION", "", sqltest.Exec(set)},
		{"leading blank", "", sqltest.Exec(" \n\t" + set)},
		{"leading comment", "", sqltest.Exec("/* app */ " + set)},
		{"@@SESSION", "", sqltest.Exec("SET @@SESSION.innodb_lock_wait_timeout = 30")},
		{"@@", "", sqltest.Exec("SET @@innodb_lock_wait_timeout = 30")},
		{"no SESSION", "", sqltest.Exec("SET innodb_lock_wait_timeout = 30")},
		{"other case", "", sqltest.Exec("set session INNODB_Lock_Wait_Timeout = 30")},
		{"backticks", "", sqltest.Exec("SET SESSION `innodb_lock_wait_timeout` = 30")},
		{"with another variable", "", sqltest.Exec("SET SESSION sql_mode = DEFAULT, innodb_lock_wait_timeout = 30")},
		{"argument, prepared by the driver", "", sqltest.Exec("SET SESSION innodb_lock_wait_timeout = ?", 30)},
		{"argument, interpolated", "interpolateParams=true", sqltest.Exec("SET SESSION innodb_lock_wait_timeout = ?", 30)},
		{"prepared statement run again", "", sqltest.PreparedTwice("SET SESSION innodb_lock_wait_timeout = ?", 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := mysqlenv.Database(t)
			if tc.dsn != "" {
				dsn = withParam(t, dsn, tc.dsn)
			}
			db, err := mysql.Open(dsn, &mysql.Options{LockTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			db.SetMaxOpenConns(1)
			sqltest.NextTxLockTimeout(t, db, mysql.Dialect, 2*time.Second, tc.set, mysqlLockWait)
		})
	}
}
