package sqlite_test

// What is specific to SQLite. The behaviour every store shares (claims,
// duplicates, IDs, attempts, dead letters, pruning, migrations, table names)
// is tested by the conformance suite in storetest_test.go.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/internal/sqltest"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// openSQLite opens path with OpenSQLite and closes it at the end of the test.
func openSQLite(t *testing.T, path string, opts *sqlite.Options) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(path, opts)
	if err != nil {
		t.Fatalf("OpenSQLite(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newDriver(t *testing.T, db *sql.DB) *sqlstore.Driver {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// migrated returns a driver on a migrated database in a new file at path.
func migrated(t *testing.T, path string) (*sqlstore.Driver, *sql.DB) {
	t.Helper()
	db := openSQLite(t, path, nil)
	d := newDriver(t, db)
	if err := d.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d, db
}

func claimParams(id string, fingerprint []byte) *store.ClaimParams {
	return &store.ClaimParams{Key: store.Key{Consumer: []byte("c"), MessageID: []byte(id)}, Type: "t", Fingerprint: fingerprint}
}

func TestOpenSQLitePaths(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a?b#c%20d.db", "100%.db", "with space;&=.db", "ünïcødé.db", "file:x.db", "//double-slash"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path, want := filepath.Join(dir, name), name
			if name == "//double-slash" { // "//tmp/..." is "/tmp/...", not a URI authority
				path, want = "/"+dir+"/inbox.db", "inbox.db"
			}
			db, err := sqlite.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			var mode string
			_, err = db.Exec("CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('here')")
			if err != nil || db.QueryRow("PRAGMA journal_mode").Scan(&mode) != nil || mode != "wal" {
				t.Fatalf("write: %v; journal_mode %q, want wal (the settings were lost in the path)", err, mode)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil || len(entries) != 1 || entries[0].Name() != want {
				t.Fatalf("files in the directory: %v, %v; want only %q", entries, err, want)
			}
			var v string
			if err := openSQLite(t, path, nil).QueryRow("SELECT v FROM kept").Scan(&v); err != nil || v != "here" {
				t.Fatalf("reopened: %q, %v; want the row written before", v, err)
			}
		})
	}
	for _, path := range []string{"", filepath.Join(t.TempDir(), "missing", "inbox.db")} {
		if db, err := sqlite.Open(path, nil); err == nil {
			_ = db.Close()
			t.Errorf("OpenSQLite(%q): want an error", path)
		}
	}
}

func TestBusy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	holder, _ := migrated(t, path)
	ctx := t.Context()
	tx, res, err := holder.BeginClaim(ctx, claimParams("held", nil)) // BEGIN IMMEDIATE: the write lock
	if err != nil || !res.Claimed {
		t.Fatalf("BeginClaim = %+v, %v", res, err)
	}
	t.Cleanup(func() { _ = holder.Rollback(ctx, tx) }) // after the parallel subtests
	const timeout = 100 * time.Millisecond

	for _, tc := range []struct {
		name string
		op   func(*testing.T, *sqlstore.Driver) error
	}{
		{"BeginClaim", func(t *testing.T, d *sqlstore.Driver) error {
			tx, _, err := d.BeginClaim(ctx, claimParams("other", nil))
			if tx != nil {
				t.Error("BeginClaim returned a tx with its error")
			}
			return err
		}},
		{"Begin", func(_ *testing.T, d *sqlstore.Driver) error { _, err := d.Begin(ctx, nil); return err }},
		{"Migrate", func(_ *testing.T, d *sqlstore.Driver) error { return d.Migrate(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openSQLite(t, path, &sqlite.Options{BusyTimeout: timeout})
			start := time.Now()
			err := tc.op(t, newDriver(t, db))
			var re *store.RetryableError
			var se *msqlite.Error
			if !errors.As(err, &re) || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
				t.Fatalf("while another connection writes: %v (%T); want a *store.RetryableError wrapping a *msqlite.Error with code 5", err, err)
			}
			if waited := time.Since(start); waited < timeout*8/10 {
				t.Errorf("gave up after %v, want about the busy timeout %v", waited, timeout)
			}
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("%d connections still in use after the error, want 0", n)
			}
		})
	}
}

func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	all := []string{"journal_mode", "synchronous", "busy_timeout"}
	for _, tc := range []struct {
		name string
		open func(path string) (*sql.DB, error)
		want []string
	}{
		{"plain sql.Open", func(p string) (*sql.DB, error) {
			return sql.Open("sqlite", "file:"+p+"?_pragma=synchronous(NORMAL)")
		}, all},
		{"OpenSQLite", func(p string) (*sql.DB, error) { return sqlite.Open(p, nil) }, nil},
		{"OpenSQLite without busy timeout", func(p string) (*sql.DB, error) {
			return sqlite.Open(p, &sqlite.Options{BusyTimeout: -1})
		}, []string{"busy_timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := tc.open(filepath.Join(t.TempDir(), "inbox.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			w, err := newDriver(t, db).DurabilityWarnings(t.Context())
			if err != nil || len(w) != len(tc.want) {
				t.Fatalf("DurabilityWarnings = %q, %v; want %d, about %v", w, err, len(tc.want), tc.want)
			}
			for i, topic := range tc.want {
				if !strings.Contains(w[i], topic) || !strings.Contains(w[i], "sqlite.Open") {
					t.Errorf("warning %d = %q, want one about %s that names sqlite.Open", i, w[i], topic)
				}
			}
		})
	}
}

func TestSchemaRejected(t *testing.T) {
	t.Parallel()
	db := openSQLite(t, filepath.Join(t.TempDir(), "inbox.db"), nil)
	for _, tables := range []store.Tables{{Schema: "inbox"}, {Schema: "main", Prefix: "svc_"}} {
		d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Tables: tables})
		if d != nil || !errors.Is(err, store.ErrInvalidTables) {
			t.Errorf("New(%+v) = %v, %v; want nil and an error wrapping store.ErrInvalidTables", tables, d, err)
		}
	}
}

func TestStrictTablesRefuseTextIDs(t *testing.T) {
	t.Parallel()
	_, db := migrated(t, filepath.Join(t.TempDir(), "inbox.db"))
	for _, q := range []string{
		`INSERT INTO "inbox" (consumer, message_id, received_at) VALUES (?, ?, 0)`,
		`INSERT INTO "inbox_attempts" (consumer, message_id, attempts, first_failed_at, last_failed_at) VALUES (?, ?, 1, 0, 0)`,
		`INSERT INTO "inbox_dead_letters" (consumer, message_id, failed_at) VALUES (?, ?, 0)`,
	} {
		_, err := db.Exec(q, []byte("c"), "text-id")
		if err == nil || !strings.Contains(err.Error(), "cannot store TEXT value in BLOB column") {
			t.Errorf("%s with a TEXT ID: %v, want STRICT to refuse it", q, err)
		}
		if _, err := db.Exec(q, []byte("c"), []byte("blob-id")); err != nil {
			t.Errorf("%s with a BLOB ID: %v", q, err)
		}
	}
}

func TestRejectsNonPositiveLimits(t *testing.T) {
	t.Parallel()
	d, db := migrated(t, filepath.Join(t.TempDir(), "inbox.db"))
	ctx := t.Context()
	tx, _, err := d.BeginClaim(ctx, claimParams("kept", nil))
	if err != nil || d.Commit(ctx, tx) != nil {
		t.Fatalf("claim: %v", err)
	}
	time.Sleep(5 * time.Millisecond) // older than a zero retention
	var re *store.RetryableError
	for _, p := range []*store.PruneParams{{Limit: 10}, {Retention: -time.Hour, Limit: 10}, {Retention: time.Millisecond}} {
		if _, err := d.Prune(ctx, p); err == nil || errors.As(err, &re) {
			t.Errorf("Prune(%+v) = %v, want an error that is not retryable", p, err)
		}
	}
	for _, limit := range []int{0, -1} {
		_, err := d.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: []byte("c"), Limit: limit})
		if err == nil || errors.As(err, &re) {
			t.Errorf("DeadLetterList(limit %d) = %v, want an error that is not retryable", limit, err)
		}
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM "inbox"`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("inbox rows after refused prunes: %d, %v; want 1", n, err)
	}
}

func TestBeginClaimDuplicate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	d, db := migrated(t, path)
	ctx := t.Context()
	for _, tc := range []struct {
		name          string
		stored, given []byte
	}{
		{"same fingerprint", []byte("fp-1"), []byte("fp-1")},
		{"other fingerprint", []byte("fp-1"), []byte("fp-2")},
		{"none stored", nil, []byte("fp-2")},
	} {
		tx, res, err := d.BeginClaim(ctx, claimParams(tc.name, tc.stored))
		if err != nil || !res.Claimed || d.Commit(ctx, tx) != nil {
			t.Fatalf("%s: first claim = %+v, %v", tc.name, res, err)
		}
		tx, res, err = d.BeginClaim(ctx, claimParams(tc.name, tc.given))
		if err != nil || tx != nil || res == nil || res.Claimed || !bytes.Equal(res.Fingerprint, tc.stored) ||
			(res.Fingerprint == nil) != (tc.stored == nil) {
			t.Fatalf("%s: duplicate BeginClaim = %v, %+v, %v; want a nil tx, Claimed false, Fingerprint %#v", tc.name, tx, res, err, tc.stored)
		}
		if err := d.Rollback(ctx, tx); err != nil {
			t.Errorf("%s: Rollback(nil tx) = %v, want nil", tc.name, err)
		}
	}
	// The duplicate's transaction is over: no connection is held, and a
	// writer that does not wait gets the write lock at once.
	if n := db.Stats().InUse; n != 0 {
		t.Errorf("%d connections in use after duplicates, want 0", n)
	}
	other := newDriver(t, openSQLite(t, path, &sqlite.Options{BusyTimeout: -1}))
	tx, res, err := other.BeginClaim(ctx, claimParams("after", nil))
	if err != nil || !res.Claimed || other.Commit(ctx, tx) != nil {
		t.Fatalf("claim on another connection after the duplicates = %+v, %v; want the write lock free", res, err)
	}
}

// Behind a writer of another pool (another process, as SQLite sees it),
// a transaction of the inbox waits its lock timeout for the write lock,
// not the pool's busy timeout: a connection of Open sets busy_timeout
// before BEGIN IMMEDIATE.
func TestSQLiteLockTimeoutOtherPool(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	holder, _ := migrated(t, path)
	ctx := t.Context()
	tx, err := holder.Begin(ctx, &store.BeginParams{LockTimeout: time.Second}) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(ctx, tx) })
	d := newDriver(t, openSQLite(t, path, &sqlite.Options{BusyTimeout: 20 * time.Second}))
	for _, lt := range []time.Duration{300 * time.Millisecond, 900 * time.Millisecond} {
		start := time.Now()
		p := claimParams("other", nil)
		p.LockTimeout = lt
		_, _, err := d.BeginClaim(ctx, p)
		waited := time.Since(start)
		var se *msqlite.Error
		if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || !d.Retryable(err) {
			t.Fatalf("lock timeout %v, behind another pool's writer: %v; want a retryable SQLITE_BUSY", lt, err)
		}
		if waited < lt*8/10 || waited > lt+time.Second {
			t.Fatalf("lock timeout %v: gave up after %v, want about the lock timeout (the pool's busy timeout is 20 s)", lt, waited)
		}
	}
}

// A connection of Open that the application's statements gave another
// busy_timeout does not skip the next read-write transaction's PRAGMA:
// that transaction, the inbox's or the application's, gets its own value
// back, however the statement was written or sent.
func TestSQLiteBusyTimeoutSetByApplication(t *testing.T) {
	t.Parallel()
	const set = "PRAGMA busy_timeout = 30000"
	for _, tc := range []struct {
		name string
		set  func(context.Context, *sql.DB) error
	}{
		{"PRAGMA", sqltest.Exec(set)},
		{"schema", sqltest.Exec("PRAGMA main.busy_timeout = 30000")},
		{"call form, other case", sqltest.Exec("pragma Busy_Timeout(30000)")},
		{"leading comment", sqltest.Exec("/* app */ " + set)},
		{"quoted name", sqltest.Exec(`PRAGMA "busy_timeout" = 30000`)},
		{"query", func(ctx context.Context, db *sql.DB) error { return db.QueryRowContext(ctx, set).Scan(new(int)) }},
		{"prepared statement run again", sqltest.PreparedTwice(set)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openSQLite(t, filepath.Join(t.TempDir(), "inbox.db"), &sqlite.Options{BusyTimeout: 2 * time.Second})
			db.SetMaxOpenConns(1)
			sqltest.NextTxLockTimeout(t, db, sqlite.Dialect, 2*time.Second, tc.set, sqliteBusyTimeout)
		})
	}
}
