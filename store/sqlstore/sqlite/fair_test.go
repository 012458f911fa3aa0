package sqlite_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

// A writer of the pool that asked for the write lock first gets it first:
// a Prune that queued behind a held transaction runs before writers that
// came later and commit back to back (SQLite's busy handler, sleeping and
// retrying, let them overtake it again and again until its busy timeout).
func TestSQLiteWritersTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := openSQLite(t, filepath.Join(t.TempDir(), "inbox.db"), &sqlite.Options{BusyTimeout: 2 * time.Second})
	d := newDriver(t, db)
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const writers = 4
	// Open the connections first: opening one takes long enough to
	// reorder the queue.
	var conns []interface{ Close() error }
	for range writers + 2 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		_ = c.Close()
	}

	// Expired rows for the Prune to delete: a writer that still sees them
	// in its own transaction holds the write lock before the Prune
	// committed (SQLite runs one writer at a time), so it overtook it.
	for i := range 10 {
		if _, err := db.ExecContext(ctx, `INSERT INTO inbox (consumer, message_id, received_at) VALUES (?, ?, 0)`,
			[]byte("old"), fmt.Appendf(nil, "old-%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pruned := make(chan error, 1)
	go func() {
		res, err := d.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10})
		if err == nil && res.Busy {
			err = fmt.Errorf("Prune reported Busy")
		}
		pruned <- err
	}()
	time.Sleep(200 * time.Millisecond) // the Prune waits for the write lock by now

	var commits, overtook atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tx, res, err := d.BeginClaim(ctx, claimParams(fmt.Sprintf("w%d-%d", w, i), nil))
				if err != nil || !res.Claimed {
					t.Errorf("writer %d: claim %d = %+v, %v", w, i, res, err)
					return
				}
				var expired int
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM inbox WHERE consumer = ?`, []byte("old")).Scan(&expired); err != nil {
					t.Errorf("writer %d: %v", w, err)
					_ = d.Rollback(ctx, tx)
					return
				}
				if expired > 0 {
					overtook.Add(1)
				}
				if err := d.Commit(ctx, tx); err != nil {
					t.Errorf("writer %d: commit %d: %v", w, i, err)
					return
				}
				commits.Add(1)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the writers queue behind the Prune
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pruned:
		if err != nil {
			t.Errorf("Prune behind a held transaction: %v; want it done once the transaction ended", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Prune still waits 5 s after the transaction ahead of it ended")
	}
	close(stop)
	wg.Wait()
	if n := overtook.Load(); n != 0 {
		t.Errorf("%d writers that queued after the Prune got the write lock before it (of %d commits); want none", n, commits.Load())
	}
}
