package mysql_test

import (
	"context"
	"database/sql"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/storetest"
)

// mysqlHarness opens a fresh database per test (a MySQL schema is a
// database), with params added to the DSN. The lock timeout of 1 s,
// MySQL's least, keeps LockTimeoutIsRetryable short while racing claims
// still queue.
func mysqlHarness(params string) storetest.Harness[*sql.Tx] { return mysqlHarnessVia(params, nil) }

// mysqlHarnessVia is mysqlHarness whose connections go to the address via
// returns for the server's (a proxy), when via is not nil. Its
// OpenLongWaits opens the pool with storetest.LongLockWait instead.
func mysqlHarnessVia(params string, via func(tb testing.TB, addr string) string) storetest.Harness[*sql.Tx] {
	return storetest.Harness[*sql.Tx]{
		Open:          storetest.SuiteOpen(mysqlOpen(params, via, time.Second)),
		OpenLongWaits: storetest.SuiteOpen(mysqlOpen(params, via, storetest.LongLockWait)),
	}
}

// mysqlBench is mysqlHarness for the benchmarks.
func mysqlBench(params string) storetest.BenchHarness[*sql.Tx] {
	return storetest.BenchHarness[*sql.Tx]{Open: mysqlOpen(params, nil, time.Second)}
}

// mysqlOpen opens a fresh database with a ledger table, through via when
// it is not nil, with Options.LockTimeout lockWait.
func mysqlOpen(params string, via func(tb testing.TB, addr string) string, lockWait time.Duration) func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
	return func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
		tb.Helper()
		db := openMySQLWith(tb, params, via, lockWait)
		if _, err := db.Exec("CREATE TABLE ledger (k VARCHAR(4100) NOT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"); err != nil {
			tb.Fatal(err)
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect, Tables: tables})
		if err != nil {
			return nil, err
		}
		return mysqlEnv(db, d, tables), nil
	}
}

// openMySQL opens a pool on a fresh database, with params added to the
// DSN and innodb_lock_wait_timeout 1 s, closed when tb ends.
func openMySQL(tb testing.TB, params string) *sql.DB {
	return openMySQLWith(tb, params, nil, time.Second)
}

// openMySQLWith is openMySQL whose connections go to the address via
// returns (when not nil), with Options.LockTimeout lockWait.
func openMySQLWith(tb testing.TB, params string, via func(tb testing.TB, addr string) string, lockWait time.Duration) *sql.DB {
	tb.Helper()
	dsn := mysqlenv.Database(tb)
	if params != "" {
		dsn = withParam(tb, dsn, params)
	}
	if via != nil {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Addr = via(tb, cfg.Addr)
		dsn = cfg.FormatDSN()
	}
	db, err := mysql.Open(dsn, &mysql.Options{LockTimeout: lockWait})
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(mysqlMaxConns)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// mysqlMaxConns is the size of the tests' pools.
const mysqlMaxConns = 20

func mysqlEnv(db *sql.DB, d *sqlstore.Driver, tables store.Tables) *storetest.BenchEnv[*sql.Tx] {
	if tables.Schema == "" {
		_ = db.QueryRow("SELECT DATABASE()").Scan(&tables.Schema)
	}
	ledger := sqltest.LedgerSQL{
		Insert:      "INSERT INTO ledger (k) VALUES (?)",
		Count:       "SELECT COUNT(*) FROM ledger WHERE k = ?",
		Backdate:    "UPDATE " + tables.Name("inbox", store.QuoteBacktick) + " SET received_at = UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND WHERE consumer = ? AND message_id = ?",
		Age:         func(d time.Duration) any { return d.Microseconds() },
		InsertMany:  "INSERT INTO ledger (k) VALUES {values}",
		InsertValue: "(?)",
	}
	env := sqltest.LedgerEnv(db, d, tables, ledger)
	env.HandBatch = sqltest.HandBatch(db, ledger, mysqlHandClaim(tables.Name("inbox", store.QuoteBacktick)))
	env.MaxConns = mysqlMaxConns
	env.Transient = func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found (raised by a test)'")
		return err
	}
	// In statements of at most 1000 rows: MySQL's cte_max_recursion_depth.
	expire := `INSERT INTO ` + tables.Name("inbox", store.QuoteBacktick) + ` (consumer, message_id, received_at, message_type, fingerprint)
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
SELECT ?, CONCAT(?, ? + i), UTC_TIMESTAMP(6) - INTERVAL (? + ? - i) MICROSECOND, 'bench', UNHEX(SHA2(CONCAT(?, ? + i), 256)) FROM s`
	env.Expire = func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error {
		for done := 0; done < n; done += 1000 {
			k := min(1000, n-done)
			// Ages count down from the oldest row (done + i = 1) to the youngest (n).
			if _, err := db.ExecContext(ctx, expire, k, []byte(consumer), prefix, done, age.Microseconds(), n-done, prefix, done); err != nil {
				return err
			}
		}
		return nil
	}
	env.LockWaits = func(ctx context.Context) (int, error) { return mysqlLockWaits(ctx, db) }
	env.LockTimeout = mysqlLockWait
	return env
}

// Statements with arguments are prepared, executed and closed, or with
// interpolateParams=true sent as text with the arguments escaped in: the
// suite runs both ways, so that binary IDs survive each (the claim of
// Process is kept prepared in both; that of ProcessTx and every other
// statement go either way).
var (
	mysqlPrepared     = mysqlHarness("")
	mysqlInterpolated = mysqlHarness("interpolateParams=true")
)

func TestMySQLStore(t *testing.T)             { storetest.Run(t, mysqlPrepared) }
func TestMySQLStoreInterpolated(t *testing.T) { storetest.Run(t, mysqlInterpolated) }

// The benchmarks' harnesses, both ways too.
var (
	mysqlPreparedBench     = mysqlBench("")
	mysqlInterpolatedBench = mysqlBench("interpolateParams=true")
)

func BenchmarkMySQLStore(b *testing.B)             { storetest.Bench(b, mysqlPreparedBench) }
func BenchmarkMySQLStoreInterpolated(b *testing.B) { storetest.Bench(b, mysqlInterpolatedBench) }
func BenchmarkMySQLPrune(b *testing.B)             { storetest.BenchPrune(b, mysqlPreparedBench) }
func BenchmarkMySQLBatch(b *testing.B)             { storetest.BenchBatch(b, mysqlPreparedBench) }
func BenchmarkMySQLBatchInterpolated(b *testing.B) { storetest.BenchBatch(b, mysqlInterpolatedBench) }

// mysqlHandClaim is the raw batched claim of BenchBatch on MySQL, which
// has no INSERT ... RETURNING: the dialect's multi-row INSERT ... ON
// DUPLICATE KEY UPDATE, each duplicate marking its bit in LAST_INSERT_ID,
// 64 rows a statement.
func mysqlHandClaim(inboxTable string) func(ctx context.Context, tx *sql.Tx, consumer []byte, ids [][]byte) ([]string, error) {
	stmt := `INSERT INTO ` + inboxTable + ` (consumer, message_id, received_at, dead) VALUES (?, ?, UTC_TIMESTAMP(6), LAST_INSERT_ID(0)){values}
ON DUPLICATE KEY UPDATE consumer = IF(LAST_INSERT_ID(LAST_INSERT_ID() | 1 << (FIELD(VALUES(message_id), {ids}) - 1)), consumer, consumer)`
	return func(ctx context.Context, tx *sql.Tx, consumer []byte, ids [][]byte) ([]string, error) {
		var fresh []string
		for chunk := range slices.Chunk(ids, 64) {
			args := make([]any, 0, 3*len(chunk))
			for _, id := range chunk {
				args = append(args, consumer, id)
			}
			for _, id := range chunk {
				args = append(args, id)
			}
			q := sqldialect.ExpandList(stmt, "{values}", ", (?, ?, UTC_TIMESTAMP(6), FALSE)", len(chunk)-1, "")
			res, err := tx.ExecContext(ctx, sqldialect.ExpandList(q, "{ids}", "?", len(chunk), ", "), args...)
			if err != nil {
				return nil, err
			}
			mask, err := res.LastInsertId()
			if err != nil {
				return nil, err
			}
			for i, id := range chunk {
				if uint64(mask)&(1<<i) == 0 {
					fresh = append(fresh, string(id))
				}
			}
		}
		return fresh, nil
	}
}

// mysqlLockWaits counts the transactions of db's database (of its
// connections) that wait for a lock, from SHOW ENGINE INNODB STATUS, which
// the server writes afresh on each call. information_schema.INNODB_TRX is a
// cache that MariaDB refreshes only after 100 ms without a read: tests that
// poll it in parallel, or other processes, keep it stale (measured on
// MariaDB 10.11: two readers every 50 ms hid a lock wait for 3 s).
func mysqlLockWaits(ctx context.Context, db *sql.DB) (int, error) {
	var typ, name, status string
	if err := db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return 0, err
	}
	waiting := map[string]bool{}
	for _, trx := range strings.Split(status, "---TRANSACTION ")[1:] {
		if m := mysqlWaitingThread.FindStringSubmatch(trx); m != nil {
			waiting[m[1]] = true
		}
	}
	if len(waiting) == 0 {
		return 0, nil
	}
	rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE()")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, err
		}
		if waiting[id] {
			n++
		}
	}
	return n, rows.Err()
}

// mysqlWaitingThread finds, in one transaction of SHOW ENGINE INNODB
// STATUS, a lock wait and the thread (connection) ID of the transaction.
var mysqlWaitingThread = regexp.MustCompile(`(?ms)^LOCK WAIT .*?^(?:MySQL|MariaDB) thread id (\d+),`)

func TestMySQLBatchTxEnded(t *testing.T) { sqltest.BatchTxEnded(t, mysqlPrepared, "ROLLBACK") }

func TestMySQLClaimBatch(t *testing.T) {
	for name, h := range map[string]storetest.Harness[*sql.Tx]{"prepared": mysqlPrepared, "interpolated": mysqlInterpolated} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sqltest.ClaimBatch(t, h)
		})
	}
}

func TestMySQLProcessTxHandlerEndsTx(t *testing.T) {
	t.Parallel()
	sqltest.ProcessTxHandlerEndsTx(t, mysqlPrepared)
}

// mysqlLockWait reads the session's innodb_lock_wait_timeout in tx.
func mysqlLockWait(ctx context.Context, tx *sql.Tx) (time.Duration, error) {
	var s int64
	err := tx.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&s)
	return time.Duration(s) * time.Second, err
}
