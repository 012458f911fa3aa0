package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqldialect"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
	"github.com/inboxkit/inbox/store/storetest"
)

// sqliteHarness opens a fresh SQLite file per test, with a busy timeout of
// 1 s (storetest.LongLockWait for OpenLongWaits).
var (
	sqliteHarness = storetest.Harness[*sql.Tx]{
		Open:          storetest.SuiteOpen(sqliteOpen(time.Second)),
		OpenLongWaits: storetest.SuiteOpen(sqliteOpen(storetest.LongLockWait)),
	}
	sqliteBench = storetest.BenchHarness[*sql.Tx]{Open: sqliteOpen(time.Second)}
)

func sqliteOpen(busy time.Duration) func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
	return func(tb testing.TB, tables store.Tables) (*storetest.BenchEnv[*sql.Tx], error) {
		tb.Helper()
		file := filepath.Join(tb.TempDir(), "inbox.db")
		db, err := sqlite.Open(file, &sqlite.Options{BusyTimeout: busy})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = db.Close() })
		if _, err := db.Exec("CREATE TABLE ledger (key TEXT NOT NULL, at INTEGER)"); err != nil {
			tb.Fatal(err)
		}
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Tables: tables})
		if err != nil {
			return nil, err
		}
		ledger := sqltest.LedgerSQL{
			Insert:      "INSERT INTO ledger (key) VALUES (?)",
			Count:       "SELECT count(*) FROM ledger WHERE key = ?",
			Backdate:    "UPDATE " + tables.Name("inbox", store.QuoteDouble) + " SET received_at = CAST(ROUND(unixepoch('now', 'subsec') * 1000) AS INTEGER) - ? WHERE consumer = ? AND message_id = ?",
			Age:         func(d time.Duration) any { return d.Milliseconds() },
			InsertMany:  "INSERT INTO ledger (key) VALUES {values}",
			InsertValue: "(?)",
		}
		env := sqltest.LedgerEnv(db, d, tables, ledger)
		handClaim := `INSERT INTO ` + tables.Name("inbox", store.QuoteDouble) + ` (consumer, message_id, received_at)
VALUES {values} ON CONFLICT DO NOTHING RETURNING message_id`
		env.HandBatch = sqltest.HandBatch(db, ledger, func(ctx context.Context, tx *sql.Tx, consumer []byte, ids [][]byte) ([]string, error) {
			args := make([]any, 0, 2*len(ids))
			for _, id := range ids {
				args = append(args, consumer, id)
			}
			rows, err := tx.QueryContext(ctx, sqldialect.ExpandList(handClaim, "{values}", "(?, ?, CAST(ROUND(unixepoch('now', 'subsec') * 1000) AS INTEGER))", len(ids), ", "), args...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var fresh []string
			for rows.Next() {
				var id []byte
				if err := rows.Scan(&id); err != nil {
					return nil, err
				}
				fresh = append(fresh, string(id))
			}
			return fresh, rows.Err()
		})
		// SQLite counts milliseconds: a thousand rows share each.
		expire := `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?3)
INSERT INTO ` + tables.Name("inbox", store.QuoteDouble) + ` (consumer, message_id, received_at, message_type, fingerprint)
SELECT ?1, CAST(?2 || i AS BLOB), CAST(ROUND(unixepoch('now', 'subsec') * 1000) AS INTEGER) - ?4 - (?3 - i) / 1000,
	'bench', randomblob(32) FROM s`
		env.Expire = func(ctx context.Context, consumer, prefix string, n int, age time.Duration) error {
			_, err := db.ExecContext(ctx, expire, []byte(consumer), prefix, n, age.Milliseconds())
			return err
		}
		env.SingleWriter = true // no lock table: LockWaits stays nil
		env.Settle = func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
			return err
		}
		// SQLITE_BUSY, as a second writer gets it while tx writes.
		env.Transient = func(ctx context.Context, _ *sql.Tx) error {
			other, err := sqlite.Open(file, &sqlite.Options{BusyTimeout: time.Millisecond})
			if err != nil {
				return err
			}
			defer other.Close()
			tx, err := other.BeginTx(ctx, nil)
			if err == nil {
				_ = tx.Rollback()
				return errors.New("a second writer began while the handler's transaction writes")
			}
			return err
		}
		env.LockTimeout = sqliteBusyTimeout
		return env, nil
	}
}

// sqliteBusyTimeout reads the connection's busy_timeout in tx.
func sqliteBusyTimeout(ctx context.Context, tx *sql.Tx) (time.Duration, error) {
	var ms int64
	err := tx.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms)
	return time.Duration(ms) * time.Millisecond, err
}

func TestSQLiteStore(t *testing.T) { storetest.Run(t, sqliteHarness) }

func BenchmarkSQLiteStore(b *testing.B) { storetest.Bench(b, sqliteBench) }
func BenchmarkSQLitePrune(b *testing.B) { storetest.BenchPrune(b, sqliteBench) }
func BenchmarkSQLiteBatch(b *testing.B) { storetest.BenchBatch(b, sqliteBench) }

func TestSQLiteBatchTxEnded(t *testing.T) { sqltest.BatchTxEnded(t, sqliteHarness, "ROLLBACK") }

func TestSQLiteClaimBatch(t *testing.T) { sqltest.ClaimBatch(t, sqliteHarness) }

func TestSQLiteProcessTxHandlerEndsTx(t *testing.T) {
	t.Parallel()
	sqltest.ProcessTxHandlerEndsTx(t, sqliteHarness)
}
