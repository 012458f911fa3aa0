package galera

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/storetest"
	"github.com/inboxkit/inbox/tests/internal/galera"
)

// The benchmarks run storetest's Bench and BenchBatch twice in one run:
// on node 1 of the cluster, and on the standalone MariaDB that TestMain
// starts beside it, a mariadbd of the same binary and settings with wsrep
// off. The ratio galera/standalone of each sub-benchmark is the cost of
// replication and certification on loopback. galera-syncwait is node 1
// with wsrep_sync_wait=1 on every connection: each BEGIN and read waits
// until the node applied what the cluster committed before.
//
//	go test -run '^$' -bench . -benchtime 2000x -count 3 ./tests/galera/
func BenchmarkProcess(b *testing.B) {
	for _, target := range targets(b) {
		b.Run(target.name, func(b *testing.B) { storetest.Bench(b, benchHarness(target.node, target.params)) })
	}
}

func BenchmarkProcessBatch(b *testing.B) {
	for _, target := range targets(b) {
		b.Run(target.name, func(b *testing.B) { storetest.BenchBatch(b, benchHarness(target.node, target.params)) })
	}
}

type target struct {
	name   string
	node   *galera.Node
	params string // added to the DSN
}

// targets are the standalone server and node 1, without and with
// wsrep_sync_wait=1, in that order.
func targets(b *testing.B) []target {
	c := need(b)
	if c.Standalone == nil {
		b.Fatal("no standalone server beside the cluster")
	}
	return []target{{"standalone", c.Standalone, ""}, {"galera", c.Nodes[0], ""},
		{"galera-syncwait", c.Nodes[0], "wsrep_sync_wait=1"}}
}

// benchHarness opens a fresh database on node with a ledger table, on a
// pool of mysql.Open with params added to the DSN.
func benchHarness(node *galera.Node, params string) storetest.BenchHarness[*sql.Tx] {
	return storetest.BenchHarness[*sql.Tx]{Open: func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
		tb.Helper()
		ctx := context.Background()
		name := testenv.Name("bench_")
		admin := openDB(tb, node.DSN(""), "")
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE " + name) })
		dsn := node.DSN(name)
		if params != "" {
			dsn += "?" + params
		}
		db, err := mysql.Open(dsn, &mysql.Options{LockTimeout: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		db.SetMaxOpenConns(poolSize)
		tb.Cleanup(func() { _ = db.Close() })
		if _, err := db.ExecContext(ctx, `CREATE TABLE ledger (
			id BIGINT AUTO_INCREMENT PRIMARY KEY,
			k VARCHAR(4100) NOT NULL,
			KEY (k(64))) ENGINE=InnoDB`); err != nil {
			tb.Fatal(err)
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect, Tables: tables})
		if err != nil {
			return nil, err
		}
		env := &storetest.Env[*sql.Tx]{
			Driver: d,
			Write: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", key)
				return err
			},
			Count: func(ctx context.Context, key string) (int, error) {
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE k = ?", key).Scan(&n)
				return n, err
			},
			BeginPlain: func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
			Tables:     tables,
			MaxConns:   poolSize,
		}
		return &storetest.BenchEnv[*sql.Tx]{Env: env,
			WriteMany: func(ctx context.Context, tx *sql.Tx, keys []string) error {
				args := make([]any, len(keys))
				for i, k := range keys {
					args[i] = k
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES "+strings.Repeat("(?), ", len(keys)-1)+"(?)", args...)
				return err
			}}, nil
	}}
}
