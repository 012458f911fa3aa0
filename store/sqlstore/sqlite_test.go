package sqlstore_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
)

var quiet = slog.New(slog.DiscardHandler)

// openDB opens a fresh SQLite file in t.TempDir() and closes it at the end.
func openDB(t *testing.T, path string, opts *sqlstore.SQLiteOptions) *sql.DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "inbox.db")
	}
	db, err := sqlstore.OpenSQLite(path, opts)
	if err != nil {
		t.Fatalf("OpenSQLite(%q): %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newDriver(t *testing.T, db *sql.DB, tables store.Tables) *sqlstore.Driver {
	t.Helper()
	d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Tables: tables, Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// migrated returns a driver on a fresh, migrated database.
func migrated(t *testing.T) (*sqlstore.Driver, *sql.DB) {
	t.Helper()
	db := openDB(t, "", nil)
	d := newDriver(t, db, store.Tables{})
	if err := d.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d, db
}

func claimParams(consumer, id string) *store.ClaimParams {
	return &store.ClaimParams{
		Key:         store.Key{Consumer: []byte(consumer), MessageID: []byte(id)},
		Type:        "order.created",
		Fingerprint: []byte("fp-" + id),
	}
}

// claimCommit claims and commits, failing unless the claim is new.
func claimCommit(t *testing.T, d *sqlstore.Driver, p *store.ClaimParams) {
	t.Helper()
	ctx := t.Context()
	tx, res, err := d.BeginClaim(ctx, p)
	if err != nil {
		t.Fatalf("BeginClaim(%q): %v", p.MessageID, err)
	}
	if !res.Claimed {
		_ = d.Rollback(ctx, tx)
		t.Fatalf("BeginClaim(%q): Claimed = false, want true (new ID)", p.MessageID)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestNewRejectsTables(t *testing.T) {
	t.Parallel()
	hostile := `x"; DROP TABLE y; --` + strings.Repeat("z", 200-len(`x"; DROP TABLE y; --`))
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "never-touched.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for _, tc := range []struct {
		name   string
		tables store.Tables
	}{
		{"hostile prefix", store.Tables{Prefix: hostile}},
		{"long prefix", store.Tables{Prefix: strings.Repeat("a", 42)}},
		{"schema on SQLite", store.Tables{Schema: "inbox"}},
		{"hostile schema", store.Tables{Schema: hostile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Tables: tc.tables})
			if !errors.Is(err, store.ErrInvalidTables) || d != nil {
				t.Fatalf("New(%+v) = %v, %v; want nil, an error wrapping store.ErrInvalidTables", tc.tables, d, err)
			}
		})
	}
	if _, err := sqlstore.New(db, &sqlstore.Config{}); err == nil {
		t.Error("New without a Dialect: want an error")
	}
	if _, err := sqlstore.New(db, nil); err == nil {
		t.Error("New(nil config): want an error")
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	tables := store.Tables{Prefix: "svc_"}
	drivers := []*sqlstore.Driver{
		newDriver(t, openDB(t, path, nil), tables),
		newDriver(t, openDB(t, path, nil), tables),
	}
	var wg sync.WaitGroup
	errs := make([]error, len(drivers))
	for i, d := range drivers {
		wg.Go(func() { errs[i] = d.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	// And once more: nothing left to apply.
	if err := drivers[0].Migrate(t.Context()); err != nil {
		t.Fatalf("third Migrate: %v", err)
	}

	db := openDB(t, path, nil)
	ms := drivers[0].Migrations()
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "inbox" {
		t.Fatalf("Migrations() = %+v, want 0001_inbox first", ms)
	}
	if got := count(t, db, `SELECT count(*) FROM "svc_inbox_migrations"`); got != len(ms) {
		t.Errorf("recorded migrations = %d, want %d (each once)", got, len(ms))
	}
	// Every statement of the multi-statement file ran, with the prefix.
	for _, name := range []string{"svc_inbox", "svc_inbox_attempts", "svc_inbox_dead_letters",
		"svc_inbox_received_at_idx", "svc_inbox_attempts_last_failed_at_idx", "svc_inbox_dead_letters_consumer_id_idx"} {
		if got := count(t, db, `SELECT count(*) FROM sqlite_schema WHERE name = ?`, name); got != 1 {
			t.Errorf("schema object %q: found %d, want 1", name, got)
		}
	}
	if strings.Contains(ms[0].SQL, "{") {
		t.Errorf("Migrations()[0].SQL still holds a token:\n%s", ms[0].SQL)
	}
}

func TestClaimDuplicate(t *testing.T) {
	t.Parallel()
	d, _ := migrated(t)
	ctx := t.Context()
	if got := d.Dialect(); got != "sqlite" {
		t.Errorf("Dialect() = %q, want sqlite", got)
	}
	p := claimParams("billing", "m-1")
	claimCommit(t, d, p)

	dup := claimParams("billing", "m-1")
	dup.Fingerprint = []byte("another payload")
	tx, res, err := d.BeginClaim(ctx, dup)
	if err != nil {
		t.Fatalf("BeginClaim(duplicate): %v", err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if res.Claimed || !bytes.Equal(res.Fingerprint, p.Fingerprint) {
		t.Fatalf("duplicate claim = %+v, want Claimed false, Fingerprint %q", res, p.Fingerprint)
	}

	// Another consumer has its own inbox.
	claimCommit(t, d, claimParams("shipping", "m-1"))

	// A duplicate without a stored fingerprint reports nil.
	np := claimParams("billing", "no-fp")
	np.Fingerprint = nil
	claimCommit(t, d, np)
	tx2, res, err := d.BeginClaim(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Rollback(ctx, tx2)
	if res.Claimed || res.Fingerprint != nil {
		t.Fatalf("duplicate without fingerprint = %+v, want Claimed false, Fingerprint nil", res)
	}
}

func TestClaimConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	d, _ := migrated(t)
	const racers = 8
	var wg sync.WaitGroup
	claimed := make([]bool, racers)
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			ctx := t.Context()
			tx, res, err := d.BeginClaim(ctx, claimParams("c", "same"))
			if err != nil {
				errs[i] = err
				return
			}
			claimed[i] = res.Claimed
			errs[i] = d.Commit(ctx, tx)
		})
	}
	wg.Wait()
	n := 0
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if claimed[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d of %d racing claims won, want exactly 1", n, racers)
	}
}

func TestIDsAreOpaqueBytes(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ids := []string{"a", "A", "a ", " a", "\x00x", "x\x00", "\xff\xfe", "é", "e\u0301", strings.Repeat("k", 1024)}
	for _, id := range ids {
		claimCommit(t, d, claimParams("c", id))
	}
	if got := count(t, db, `SELECT count(*) FROM "inbox"`); got != len(ids) {
		t.Fatalf("inbox rows = %d, want %d distinct IDs", got, len(ids))
	}
	for _, id := range ids {
		tx, res, err := d.BeginClaim(t.Context(), claimParams("c", id))
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Rollback(t.Context(), tx)
		if res.Claimed || !bytes.Equal(res.Fingerprint, []byte("fp-"+id)) {
			t.Errorf("second claim of %q = %+v, want a duplicate with its own fingerprint", id, res)
		}
	}
	// Stored bytes are the bytes given, not text.
	var got []byte
	if err := db.QueryRow(`SELECT message_id FROM "inbox" WHERE message_id = ?`, []byte("\xff\xfe")).Scan(&got); err != nil || !bytes.Equal(got, []byte("\xff\xfe")) {
		t.Errorf("stored ID = %q, %v; want %q", got, err, "\xff\xfe")
	}
}

func TestRollbackUndoesClaim(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ctx := t.Context()
	p := claimParams("c", "m")

	tx, res, err := d.BeginClaim(ctx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("BeginClaim = %+v, %v; want claimed", res, err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE business (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	// The handler failed: everything goes.
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatalf("second Rollback: %v, want nil", err)
	}
	if n := count(t, db, `SELECT count(*) FROM "inbox"`); n != 0 {
		t.Fatalf("inbox rows after rollback = %d, want 0", n)
	}
	claimCommit(t, d, p) // the redelivery is new again
}

func TestClaimSavepoint(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ctx := t.Context()
	if _, err := db.Exec(`CREATE TABLE business (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	tx, err := d.Begin(ctx, &store.BeginParams{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, tx)
	if _, err := tx.ExecContext(ctx, `INSERT INTO business VALUES ('before')`); err != nil {
		t.Fatal(err)
	}
	p := claimParams("c", "m")
	p.Savepoint = `inbox_claim`
	res, err := d.Claim(ctx, tx, p)
	if err != nil || !res.Claimed {
		t.Fatalf("Claim = %+v, %v; want claimed", res, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO business VALUES ('handler')`); err != nil {
		t.Fatal(err)
	}
	if err := d.RollbackToSavepoint(ctx, tx, p.Savepoint); err != nil {
		t.Fatalf("RollbackToSavepoint: %v", err)
	}
	// The claim and the handler's write are undone, the caller's earlier write stays.
	var inbox, business int
	if err := tx.QueryRow(`SELECT (SELECT count(*) FROM "inbox"), (SELECT count(*) FROM business)`).Scan(&inbox, &business); err != nil {
		t.Fatal(err)
	}
	if inbox != 0 || business != 1 {
		t.Fatalf("after RollbackToSavepoint: inbox %d, business %d rows; want 0 and 1", inbox, business)
	}
	if n, err := d.AttemptAdd(ctx, tx, &store.AttemptParams{Key: p.Key, Error: "boom"}); err != nil || n != 1 {
		t.Fatalf("AttemptAdd after RollbackToSavepoint = %d, %v; want 1", n, err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// A savepoint name is quoted, not spliced.
	tx, err = d.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, tx)
	p = claimParams("c", "m2")
	p.Savepoint = `sp"; DROP TABLE business; --`
	if _, err := d.Claim(ctx, tx, p); err != nil {
		t.Fatalf("Claim with an odd savepoint name: %v", err)
	}
	if err := d.RollbackToSavepoint(ctx, tx, p.Savepoint); err != nil {
		t.Fatalf("RollbackToSavepoint(odd name): %v", err)
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ctx := t.Context()
	key := store.Key{Consumer: []byte("c"), MessageID: []byte("m")}
	for want := 1; want <= 3; want++ {
		tx, err := d.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := d.AttemptAdd(ctx, tx, &store.AttemptParams{Key: key, Error: fmt.Sprintf("failure %d", want)})
		if err != nil || n != want {
			t.Fatalf("AttemptAdd #%d = %d, %v; want %d", want, n, err, want)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	var lastErr string
	var first, last int64
	if err := db.QueryRow(`SELECT last_error, first_failed_at, last_failed_at FROM "inbox_attempts"`).Scan(&lastErr, &first, &last); err != nil {
		t.Fatal(err)
	}
	if lastErr != "failure 3" || first > last || time.Since(time.UnixMilli(first)).Abs() > time.Minute {
		t.Errorf("attempt row: last_error %q, first %d, last %d; want failure 3 and recent times", lastErr, first, last)
	}
	tx, err := d.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.AttemptsDelete(ctx, tx, key); err != nil {
		t.Fatal(err)
	}
	n, err := d.AttemptAdd(ctx, tx, &store.AttemptParams{Key: key, Error: "again"})
	if err != nil || n != 1 {
		t.Fatalf("AttemptAdd after AttemptsDelete = %d, %v; want 1", n, err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ctx := t.Context()
	consumer := []byte("c")
	dlp := func(id string) *store.DeadLetterParams {
		return &store.DeadLetterParams{
			ClaimParams: *claimParams("c", id),
			Payload:     []byte("payload\x00" + id),
			Headers:     []byte("h=" + id),
			Error:       "handler: " + id,
			Attempts:    10,
		}
	}
	add := func(p *store.DeadLetterParams) bool {
		t.Helper()
		tx, err := d.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := d.DeadLetterAdd(ctx, tx, p)
		if err != nil {
			_ = d.Rollback(ctx, tx)
			t.Fatalf("DeadLetterAdd(%q): %v", p.MessageID, err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	claimCommit(t, d, claimParams("c", "processed"))
	if add(dlp("processed")) {
		t.Fatal("DeadLetterAdd for a message whose row exists = true, want false")
	}
	if n := count(t, db, `SELECT count(*) FROM "inbox_dead_letters"`); n != 0 {
		t.Fatalf("dead letters after a refused add = %d, want 0", n)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if !add(dlp(id)) {
			t.Fatalf("DeadLetterAdd(%q) = false, want true", id)
		}
	}
	// The inbox row is dead: a redelivery is a duplicate.
	tx, res, err := d.BeginClaim(ctx, claimParams("c", "d1"))
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Rollback(ctx, tx)
	if res.Claimed {
		t.Fatalf("claim of a dead-lettered ID = %+v, want Claimed false", res)
	}

	all, err := d.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: consumer, Limit: 10})
	if err != nil || len(all) != 3 {
		t.Fatalf("DeadLetterList = %d letters, %v; want 3", len(all), err)
	}
	first := all[0]
	want := dlp("d1")
	if string(first.Key.MessageID) != "d1" || !bytes.Equal(first.Key.Consumer, consumer) || first.Type != want.Type ||
		!bytes.Equal(first.Payload, want.Payload) || !bytes.Equal(first.Headers, want.Headers) ||
		first.Error != want.Error || first.Attempts != 10 || time.Since(first.FailedAt).Abs() > time.Minute {
		t.Fatalf("first dead letter = %+v, want the fields of %+v and a recent FailedAt", first, want)
	}
	page, err := d.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: consumer, AfterID: all[0].ID, Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != all[1].ID {
		t.Fatalf("DeadLetterList(after %d, limit 1) = %v, %v; want [%d]", all[0].ID, page, err, all[1].ID)
	}
	if other, err := d.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: []byte("C"), Limit: 10}); err != nil || len(other) != 0 {
		t.Fatalf("DeadLetterList(other consumer) = %v, %v; want none", other, err)
	}

	tx, err = d.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.DeadLetterTake(ctx, tx, consumer, all[1].ID)
	if err != nil || got.ID != all[1].ID || string(got.Key.MessageID) != "d2" {
		t.Fatalf("DeadLetterTake(%d) = %+v, %v; want d2", all[1].ID, got, err)
	}
	if _, err := d.DeadLetterTake(ctx, tx, consumer, all[1].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeadLetterTake = %v, want store.ErrNotFound", err)
	}
	if _, err := d.DeadLetterTake(ctx, tx, []byte("other"), all[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetterTake of another consumer's letter = %v, want store.ErrNotFound", err)
	}
	// The replay processed it: the row is no longer dead.
	if err := d.InboxMarkProcessed(ctx, tx, claimParams("c", "d2")); err != nil {
		t.Fatal(err)
	}
	// And a pruned row comes back.
	if err := d.InboxMarkProcessed(ctx, tx, claimParams("c", "pruned")); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM "inbox" WHERE message_id IN (?, ?) AND dead = 0`, []byte("d2"), []byte("pruned")); n != 2 {
		t.Errorf("rows marked processed = %d, want 2", n)
	}
	left, err := d.DeadLetterList(ctx, &store.DeadLetterListParams{Consumer: consumer, Limit: 10})
	if err != nil || len(left) != 2 {
		t.Fatalf("DeadLetterList after take = %d, %v; want 2", len(left), err)
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	d, db := migrated(t)
	ctx := t.Context()
	for _, id := range []string{"old1", "old2", "old3", "young"} {
		claimCommit(t, d, claimParams("c", id))
		tx, err := d.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.AttemptAdd(ctx, tx, &store.AttemptParams{Key: store.Key{Consumer: []byte("c"), MessageID: []byte(id)}}); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	// Backdate the old ones past the retention; "young" stays just inside it.
	hour := time.Hour.Milliseconds()
	for _, q := range []string{
		`UPDATE "inbox" SET received_at = received_at - ? WHERE message_id <> ?`,
		`UPDATE "inbox_attempts" SET last_failed_at = last_failed_at - ? WHERE message_id <> ?`,
	} {
		if _, err := db.Exec(q, 2*hour, []byte("young")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE "inbox" SET received_at = received_at - ? WHERE message_id = ?`, hour-60_000, []byte("young")); err != nil {
		t.Fatal(err)
	}

	res, err := d.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 2})
	if err != nil || res.Deleted != 4 || res.Busy {
		t.Fatalf("Prune(limit 2) = %+v, %v; want 2 inbox + 2 attempt rows deleted", res, err)
	}
	res, err = d.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 2})
	if err != nil || res.Deleted != 2 {
		t.Fatalf("second Prune = %+v, %v; want the last old inbox and attempt rows", res, err)
	}
	res, err = d.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 2})
	if err != nil || res.Deleted != 0 {
		t.Fatalf("third Prune = %+v, %v; want nothing left to delete", res, err)
	}
	for _, table := range []string{"inbox", "inbox_attempts"} {
		if n := count(t, db, `SELECT count(*) FROM "`+table+`" WHERE message_id = ?`, []byte("young")); n != 1 {
			t.Errorf("%s: the young row was deleted", table)
		}
		if n := count(t, db, `SELECT count(*) FROM "`+table+`"`); n != 1 {
			t.Errorf("%s: %d rows left, want only the young one", table, n)
		}
	}
	if _, err := d.Prune(ctx, &store.PruneParams{Limit: 1}); err == nil {
		t.Error("Prune with zero retention: want an error")
	}
}

func TestBusyIsRetryable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	holder, _ := func() (*sqlstore.Driver, *sql.DB) {
		db := openDB(t, path, nil)
		d := newDriver(t, db, store.Tables{})
		if err := d.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return d, db
	}()
	waiter := newDriver(t, openDB(t, path, &sqlstore.SQLiteOptions{BusyTimeout: 100 * time.Millisecond}), store.Tables{})
	ctx := t.Context()

	tx, res, err := holder.BeginClaim(ctx, claimParams("c", "held"))
	if err != nil || !res.Claimed {
		t.Fatalf("BeginClaim = %+v, %v", res, err)
	}
	defer holder.Rollback(ctx, tx)

	start := time.Now()
	_, _, err = waiter.BeginClaim(ctx, claimParams("c", "other"))
	var re *store.RetryableError
	var se *sqlite.Error
	if !errors.As(err, &re) || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("claim while another writer holds the lock = %v (%T); want a *store.RetryableError wrapping SQLITE_BUSY", err, err)
	}
	if waited := time.Since(start); waited < 80*time.Millisecond {
		t.Errorf("gave up after %v, want about the 100ms busy timeout", waited)
	}

	res2, err := waiter.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
	if err != nil || !res2.Busy {
		t.Fatalf("Prune while another writer holds the lock = %+v, %v; want Busy and no error", res2, err)
	}
}

func TestDurabilityWarnings(t *testing.T) {
	t.Parallel()
	d, _ := migrated(t)
	if w, err := d.DurabilityWarnings(t.Context()); err != nil || len(w) != 0 {
		t.Fatalf("DurabilityWarnings on OpenSQLite = %q, %v; want none", w, err)
	}

	plain, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	if _, err := plain.Exec(`PRAGMA synchronous = NORMAL`); err != nil {
		t.Fatal(err)
	}
	plain.SetMaxOpenConns(1) // the PRAGMA above is per connection
	w, err := newDriver(t, plain, store.Tables{}).DurabilityWarnings(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(w, "\n")
	for _, want := range []string{"journal_mode", "synchronous", "busy_timeout"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings on a plain database:\n%s\nwant one about %s", joined, want)
		}
	}
}

func TestOpenSQLiteOddPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a?b#c%20d.db")
	db := openDB(t, path, nil)
	d := newDriver(t, db, store.Tables{})
	if err := d.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The file has exactly the name asked for.
	if fi, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*.db")); err != nil || len(fi) != 1 || fi[0] != path {
		t.Fatalf("files = %v, %v; want only %q", fi, err, path)
	}
}
