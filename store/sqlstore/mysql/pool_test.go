package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
)

// BenchmarkMySQLIdleConns: bursts of 8 claims at once (a consumer's 8
// workers, then a pause for the next deliveries), each claiming and
// committing a new message, on a pool that keeps database/sql's default of
// 2 idle connections and on one that keeps DefaultMaxIdleConns (OpenMySQL's
// default). Compare ns/op (one burst) side by side; closed/burst counts the
// connections closed because the idle pool was full, each opened again for
// the next burst (TCP, the login, OpenMySQL's session settings).
func BenchmarkMySQLIdleConns(b *testing.B) {
	const burst = 8
	dsn := mysqlenv.Database(b)
	for _, tc := range []struct {
		name string
		idle int
	}{{"idle=2", 2}, {"idle=default", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			db, err := mysql.Open(dsn, &mysql.Options{MaxIdleConns: tc.idle})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			d, err := sqlstore.New(db, &sqlstore.Config{Dialect: mysql.Dialect, Tables: store.Tables{Prefix: testenv.Name("idle_")}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := d.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			claim := func() {
				p := &store.ClaimParams{Key: store.Key{Consumer: []byte("bench"), MessageID: fmt.Appendf(nil, "m-%d", seq.Add(1))}, LockTimeout: time.Second}
				tx, res, err := d.BeginClaim(ctx, p)
				if err != nil {
					b.Error(err)
					return
				}
				if !res.Claimed {
					b.Error("a new message was taken for a duplicate")
					return
				}
				if err := d.Commit(ctx, tx); err != nil {
					b.Error(err)
				}
			}
			closed := db.Stats().MaxIdleClosed
			b.ResetTimer()
			for b.Loop() { // one burst: 8 workers claim at once, then all connections go idle
				var wg sync.WaitGroup
				for range burst {
					wg.Go(claim)
				}
				wg.Wait()
			}
			b.ReportMetric(float64(db.Stats().MaxIdleClosed-closed)/float64(b.N), "closed/burst")
		})
	}
}

// TestOpenKeepsIdleConns: Open's pool keeps the connections of a burst
// (sqlstore.DefaultMaxIdleConns), where database/sql would close all but 2.
func TestOpenKeepsIdleConns(t *testing.T) {
	t.Parallel()
	sqltest.IdleConns(t, func(t *testing.T, idle int) (*sql.DB, error) {
		return mysql.Open(mysqlenv.Database(t), &mysql.Options{MaxIdleConns: idle})
	})
}
