package replicacheck

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/postgres"
	"github.com/inboxkit/inbox/tests/internal/inboxcmd"
	"github.com/inboxkit/inbox/tests/internal/pgcluster"
)

// drivers opens both PostgreSQL drivers on dsn: pgx's, and database/sql's
// through pgx's stdlib.
func drivers(t *testing.T, dsn string) map[string]interface {
	DurabilityWarnings(context.Context) ([]string, error)
} {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pd, err := pgxstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sd, err := sqlstore.New(db, &sqlstore.Config{Dialect: postgres.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]interface {
		DurabilityWarnings(context.Context) ([]string, error)
	}{"pgx": pd, "database/sql": sd}
}

// newInbox migrates the tables on dsn (unless migrate is false) and
// returns inbox.New's error and what it logged.
func newInbox(t *testing.T, dsn string, migrate bool) (string, error) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := pgxstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if migrate {
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	_, err = inbox.New(ctx, d, &inbox.Config{Consumer: "c", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	return logs.String(), err
}

// wantWarning checks that every driver on dsn gives exactly one warning,
// which says want.
func wantWarning(t *testing.T, dsn, want string) {
	t.Helper()
	for name, d := range drivers(t, dsn) {
		w, err := d.DurabilityWarnings(context.Background())
		if err != nil || len(w) != 1 || !strings.Contains(w[0], want) {
			t.Errorf("%s: DurabilityWarnings = %q, %v; want one saying %q", name, w, err, want)
		}
	}
}

// An asynchronous standby: commits on the primary do not wait for it, and
// a failover loses the last of them. Both drivers warn, inbox.New logs it,
// and on the standby itself inbox.New fails as read-only, as the command's
// check does. The multi-host DSN skips the standby listed first.
func TestAsyncStandby(t *testing.T) {
	t.Parallel()
	c := pgcluster.New(t, &pgcluster.Options{Replication: pgcluster.Async})
	const want = "streams to 1 standby, but commits wait for none"
	wantWarning(t, c.Primary.DSN(), want)
	logs, err := newInbox(t, c.Primary.DSN(), true)
	if err != nil || !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, want) {
		t.Fatalf("inbox.New on the primary: %v, logged:\n%s\nwant a WARN saying %q", err, logs, want)
	}
	for name, d := range drivers(t, c.Standby.DSN()) {
		if w, err := d.DurabilityWarnings(context.Background()); !errors.Is(err, store.ErrReadOnly) || !strings.Contains(err.Error(), "is a standby") {
			t.Errorf("%s on the standby: DurabilityWarnings = %q, %v; want store.ErrReadOnly saying it is a standby", name, w, err)
		}
	}
	if _, err := newInbox(t, c.Standby.DSN(), false); !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("inbox.New on the standby: %v, want store.ErrReadOnly", err)
	}
	standbyFirst := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write",
		c.Standby.Port, c.Primary.Port)
	if _, err := newInbox(t, standbyFirst, false); err != nil {
		t.Errorf("inbox.New on %q: %v; target_session_attrs=read-write should reach the primary", standbyFirst, err)
	}

	inboxCmd := inboxcmd.Build(t)
	for _, tt := range []struct{ node, dsn, want string }{
		{"primary", c.Primary.DSN(), want},
		{"standby", c.Standby.DSN(), "is a standby"},
	} {
		code, out := inboxcmd.Check(t, inboxCmd, "-postgres", tt.dsn)
		if code != 3 || !strings.Contains(out, "problem: ") || !strings.Contains(out, tt.want) {
			t.Errorf("inbox check on the %s: exit %d, output:\n%s\nwant exit 3 and a problem saying %q", tt.node, code, out, tt.want)
		}
	}
}

// A synchronous standby: commits wait for it, and nothing is said. Named
// wrong in synchronous_standby_names, or gone, it makes every commit wait:
// the check says so, without a commit of its own that would hang.
func TestSyncStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.New(t, &pgcluster.Options{Replication: pgcluster.Sync})
	logs, err := newInbox(t, c.Primary.DSN(), true)
	if err != nil || strings.Contains(logs, "level=WARN") {
		t.Fatalf("inbox.New on the primary of a sync standby: %v, logged:\n%s\nwant no warning", err, logs)
	}
	admin, err := pgxpool.New(ctx, c.Primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var state string
		if err := admin.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "async" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby is still %s after the reload", state)
		}
	}
	wantWarning(t, c.Primary.DSN(), `streams to 1 standby, but synchronous_standby_names ("nobody") names none of them`)
	if err := c.StopStandby(ctx); err != nil {
		t.Fatal(err)
	}
	// The primary's WAL sender ends a moment after the standby.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d WAL senders 10 s after the standby stopped", n)
		}
	}
	checkCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for name, d := range drivers(t, c.Primary.DSN()) {
		w, err := d.DurabilityWarnings(checkCtx)
		if err != nil || len(w) != 1 || !strings.Contains(w[0], "none is streaming") {
			t.Errorf("%s without the sync standby: DurabilityWarnings = %q, %v; want one saying none is streaming", name, w, err)
		}
	}
}
