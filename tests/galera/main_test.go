package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/tests/internal/galera"
)

// cluster is the package's cluster, started once by TestMain. It is nil
// when startErr says why not.
var (
	cluster  *galera.Cluster
	startErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := galera.Available(); err != nil {
		startErr = err
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := galera.Start(ctx, &galera.Options{Standalone: true, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		startErr = err
		return m.Run()
	}
	cluster = c
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "galera: close:", err)
		}
	}()
	return m.Run()
}

// need skips t without MariaDB, galera-4 or rsync, or fails it with
// INBOX_REQUIRE_SERVICES=1. A cluster that would not start fails t.
func need(t testing.TB) *galera.Cluster {
	t.Helper()
	switch {
	case errors.Is(startErr, galera.ErrUnavailable):
		testenv.Unavailable(t, "MariaDB Galera (mariadbd, galera-4, rsync)", startErr)
	case cluster == nil:
		t.Fatalf("galera: the cluster did not start: %v", startErr)
	}
	return cluster
}

// nodes is the number of Galera nodes.
const nodes = 3

// env is one fresh database on the cluster, with an inbox on each node.
type env struct {
	name string
	// dbs are the pools of the nodes, node 1 first; readers the same with
	// wsrep_sync_wait=1, for reads that must see every commit before them.
	dbs, readers []*sql.DB
	drivers      []*sqlstore.Driver
	inboxes      []*inbox.Inbox[*sql.Tx]
}

// poolSize is the size of each node's pool.
const poolSize = 24

// open creates a database on the cluster with a ledger table, migrates the
// inbox's tables from node 1, and opens an inbox with cfg on every node.
func open(t testing.TB, cfg inbox.Config) *env {
	t.Helper()
	c := need(t)
	ctx := context.Background()
	e := &env{name: testenv.Name("galera_")}
	admin := openDB(t, c.Nodes[0].DSN(""), "")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+e.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE " + e.name); err != nil {
			t.Errorf("drop database %s: %v", e.name, err)
		}
	})
	for i, n := range c.Nodes {
		// CREATE DATABASE returns once node 1 ran it. The others apply it in
		// the cluster's order, a moment later: a connection to the new
		// database there may fail with 1049 until then.
		var found int
		if err := openDB(t, n.DSN(""), "wsrep_sync_wait=1").QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", e.name).Scan(&found); err != nil || found != 1 {
			t.Fatalf("node %d: database %s found %d times (%v) after a causal wait, want once", i+1, e.name, found, err)
		}
		db, err := mysql.Open(n.DSN(e.name), &mysql.Options{LockTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(poolSize)
		t.Cleanup(func() { _ = db.Close() })
		e.dbs = append(e.dbs, db)
		e.readers = append(e.readers, openDB(t, n.DSN(e.name), "wsrep_sync_wait=1"))
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect})
		if err != nil {
			t.Fatal(err)
		}
		e.drivers = append(e.drivers, d)
	}
	// The ledger has a primary key of its own: Galera certifies rows by key.
	if _, err := e.dbs[0].ExecContext(ctx, `CREATE TABLE ledger (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		k VARCHAR(255) NOT NULL,
		node INT NOT NULL,
		KEY (k)) ENGINE=InnoDB`); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, e.drivers[0]); err != nil {
		t.Fatal(err)
	}
	// DDL is applied on the other nodes in total order, but not before
	// node 1 returns: each node reads the schema after a causal wait.
	for i, r := range e.readers {
		var n int
		if err := r.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", e.name).Scan(&n); err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "galera"
	}
	for _, d := range e.drivers {
		cfg := cfg
		ib, err := inbox.New(ctx, d, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.inboxes = append(e.inboxes, ib)
	}
	return e
}

// openDB opens a plain pool on dsn with params added, closed when t ends.
func openDB(t testing.TB, dsn, params string) *sql.DB {
	t.Helper()
	if params != "" {
		dsn += "?" + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(poolSize)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// write is the handler's business effect: one ledger row for key, on node.
func write(ctx context.Context, tx *sql.Tx, key string, node int) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k, node) VALUES (?, ?)", key, node)
	return err
}

// effects returns the number of ledger rows of each key, read on node i
// after a causal wait.
func (e *env) effects(t testing.TB, i int) map[string]int {
	t.Helper()
	rows, err := e.readers[i].Query("SELECT k, COUNT(*) FROM ledger GROUP BY k")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		got[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// wantOnce fails t unless every key of keys has exactly one effect, and
// nothing else has any, on every node.
func (e *env) wantOnce(t testing.TB, keys []string) {
	t.Helper()
	for i := range e.readers {
		got := e.effects(t, i)
		lost, doubled := 0, 0
		for _, k := range keys {
			switch n := got[k]; {
			case n == 0:
				lost++
			case n > 1:
				doubled++
			}
		}
		if lost > 0 || doubled > 0 || len(got) != len(keys) {
			t.Fatalf("node %d: of %d keys %d lost and %d doubled, %d keys in all, want each exactly once", i+1, len(keys), lost, doubled, len(got))
		}
	}
}

// tally counts the errors of Retry outcomes by class, safely for
// concurrent use.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (y *tally) add(err error) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.n == nil {
		y.n = map[string]int{}
	}
	y.n[errClass(err)]++
}

func (y *tally) get(class string) int {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.n[class]
}

func (y *tally) String() string {
	y.mu.Lock()
	defer y.mu.Unlock()
	return fmt.Sprint(y.n)
}

// errClass names an error by its MySQL number, or as a lost connection.
func errClass(err error) string {
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &me):
		return strconv.Itoa(int(me.Number))
	case errors.Is(err, gomysql.ErrInvalidConn), strings.Contains(err.Error(), "bad connection"):
		return "lost connection"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	default:
		return err.Error()
	}
}

// deliver processes m on ib as a broker redelivers it: again after every
// Retry, at once, until the outcome may be acked. It tallies the Retry
// outcomes' errors.
func deliver(ctx context.Context, ib *inbox.Inbox[*sql.Tx], m inbox.Message, h inbox.Handler[*sql.Tx], y *tally) (inbox.Outcome, error) {
	for i := 0; ; i++ {
		out, err := ib.Process(ctx, m, h)
		if out.Ack() || i >= 500 || ctx.Err() != nil {
			return out, err
		}
		y.add(err)
		time.Sleep(min(out.Delay, 5*time.Millisecond))
	}
}

// wsrepCounters reads the certification failures and brute-force aborts
// of every node.
func wsrepCounters(t testing.TB, e *env) (certFailures, bfAborts int) {
	t.Helper()
	for _, db := range e.dbs {
		rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			var v int
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			if name == "wsrep_local_cert_failures" {
				certFailures += v
			} else {
				bfAborts += v
			}
		}
		_ = rows.Close()
	}
	return certFailures, bfAborts
}

// counted reports the cluster's certification failures and brute-force
// aborts during fn.
func counted(t testing.TB, e *env, fn func()) (certFailures, bfAborts int) {
	t.Helper()
	c0, b0 := wsrepCounters(t, e)
	fn()
	c1, b1 := wsrepCounters(t, e)
	return c1 - c0, b1 - b0
}

// messages returns the number of messages of the larger runs:
// INBOX_GALERA_MESSAGES, or def.
func messages(t testing.TB, def int) int {
	t.Helper()
	if s := os.Getenv("INBOX_GALERA_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("INBOX_GALERA_MESSAGES=%q: want a positive number", s)
		}
		return n
	}
	return def
}
