package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// slotFree fails the test unless a write transaction of db begins within
// a second: the pool's write slot was given back.
func slotFree(t *testing.T, db *sql.DB, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("a write transaction after %s: %v; want the write slot given back", after, err)
	}
	_ = tx.Rollback()
}

// Every way a write transaction of the pool ends gives its slot back.
func TestSQLiteWriteSlotGivenBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, d *sqlstore.Driver, db *sql.DB)
	}{
		{"tx.Commit of the caller's", func(t *testing.T, _ *sqlstore.Driver, db *sql.DB) {
			tx, err := db.BeginTx(t.Context(), nil)
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"tx.Rollback of Driver.Begin's", func(t *testing.T, d *sqlstore.Driver, _ *sql.DB) {
			tx, err := d.Begin(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = tx.Rollback()
		}},
		{"its context canceled (database/sql rolls back)", func(t *testing.T, _ *sqlstore.Driver, db *sql.DB) {
			ctx, cancel := context.WithCancel(t.Context())
			if _, err := db.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
			cancel()
		}},
		{"a duplicate's BeginClaim", func(t *testing.T, d *sqlstore.Driver, _ *sql.DB) {
			ctx := t.Context()
			for range 2 {
				tx, res, err := d.BeginClaim(ctx, claimParams("dup", nil))
				if err != nil {
					t.Fatal(err)
				}
				if res.Claimed {
					if err := d.Commit(ctx, tx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}},
		{"a failed statement and Driver.Rollback", func(t *testing.T, d *sqlstore.Driver, _ *sql.DB) {
			ctx := t.Context()
			tx, err := d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO missing VALUES (1)"); err == nil {
				t.Fatal("insert into a missing table: want an error")
			}
			if err := d.Rollback(ctx, tx); err != nil {
				t.Fatal(err)
			}
		}},
		{"Prune", func(t *testing.T, d *sqlstore.Driver, _ *sql.DB) {
			if _, err := d.Prune(t.Context(), &store.PruneParams{Retention: time.Hour, Limit: 10}); err != nil {
				t.Fatal(err)
			}
		}},
		{"Migrate", func(t *testing.T, d *sqlstore.Driver, _ *sql.DB) {
			if err := d.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, db := migrated(t, filepath.Join(t.TempDir(), "inbox.db"))
			tc.end(t, d, db)
			slotFree(t, db, tc.name)
		})
	}
}

// A writer waiting for the pool's slot gives up when its context is done,
// or after the busy timeout with a retryable error; a read-only
// transaction does not wait.
func TestSQLiteWriteSlotWait(t *testing.T) {
	t.Parallel()
	const busy = 200 * time.Millisecond
	db := openSQLite(t, filepath.Join(t.TempDir(), "inbox.db"), &sqlite.Options{BusyTimeout: busy})
	d := newDriver(t, db)
	ctx := t.Context()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()

	start := time.Now()
	_, err = d.Begin(ctx, nil)
	waited := time.Since(start)
	var re *store.RetryableError
	if !errors.Is(err, sqlite.ErrBusy) || !errors.As(err, &re) || !d.Retryable(err) {
		t.Errorf("Begin while the pool's slot is held: %v; want a retryable error wrapping ErrSQLiteBusy", err)
	}
	if waited < busy*9/10 || waited > busy+time.Second {
		t.Errorf("Begin gave up after %v; want about the busy timeout %v", waited, busy)
	}
	if err := d.Migrate(ctx); !errors.Is(err, sqlite.ErrBusy) {
		t.Errorf("Migrate while the pool's slot is held: %v; want it to queue and give up with ErrSQLiteBusy", err)
	}
	res, err := d.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
	if err != nil || !res.Busy {
		t.Errorf("Prune while the pool's slot is held = %+v, %v; want Busy", res, err)
	}

	short, cancel := context.WithTimeout(ctx, busy/4)
	defer cancel()
	start = time.Now()
	_, err = db.BeginTx(short, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > busy*3/4 {
		t.Errorf("BeginTx with a context shorter than the busy timeout: %v after %v; want its deadline after %v", err, time.Since(start), busy/4)
	}

	ro, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only BeginTx while the slot is held: %v; want no wait", err)
	}
	_ = ro.Rollback()
	if n := db.Stats().InUse; n != 1 {
		t.Errorf("%d connections in use, want 1 (the holder's)", n)
	}
}
