package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/mysqlenv"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/mysql"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
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

// TestOpenKeepsIdleConns: the pools of OpenMySQL and OpenSQLite keep the
// connections of a burst of 8 (DefaultMaxIdleConns), where database/sql
// would close all but 2; MaxIdleConns changes it, negative keeps none.
func TestOpenKeepsIdleConns(t *testing.T) {
	t.Parallel()
	const burst = 8
	for _, tc := range []struct {
		name     string
		idle     int // the option
		wantIdle int
	}{
		{"mysql default", 0, burst},
		{"mysql 3", 3, 3},
		{"mysql none", -1, 0},
		{"sqlite default", 0, burst},
		{"sqlite 3", 3, 3},
		{"sqlite none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var db *sql.DB
			var err error
			if strings.HasPrefix(tc.name, "mysql") {
				db, err = mysql.Open(mysqlenv.Database(t), &mysql.Options{MaxIdleConns: tc.idle})
			} else {
				db, err = sqlite.Open(filepath.Join(t.TempDir(), "idle.db"), &sqlite.Options{MaxIdleConns: tc.idle})
			}
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
