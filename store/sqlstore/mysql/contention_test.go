package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// contention counts what racing deliveries of messages whose first handler
// fails got from their first Process call.
type contention struct {
	messages, racers int
	// waiting: first calls of the deliveries that did not hold the claim
	// (the holder's handler failed).
	waiting int
	// Of waiting: ended in a deadlock (1213), a lock wait timeout (1205),
	// Processed or Duplicate.
	deadlocks, timeouts, processed, duplicates int
	// calls: Process calls in all, redeliveries included.
	calls int
	wall  time.Duration
}

func (c contention) deadlockShare() float64 { return float64(c.deadlocks) / float64(max(1, c.waiting)) }

func (c contention) String() string {
	return fmt.Sprintf("%d messages x %d racers in %v: of %d waiting deliveries %d deadlocked (%.0f %%), %d timed out, %d processed, %d duplicates; %d redeliveries",
		c.messages, c.racers, c.wall.Round(time.Millisecond), c.waiting, c.deadlocks, 100*c.deadlockShare(),
		c.timeouts, c.processed, c.duplicates, c.calls-c.messages*c.racers)
}

// processFunc is Process, or ProcessTx with its caller's transaction.
type processFunc func(ctx context.Context, m inbox.Message, hd inbox.Handler[*sql.Tx]) (inbox.Outcome, error)

// raceHolderRollsBack delivers each of n messages, one message after the
// other, from racers goroutines at once through process; the first handler
// of each message holds its claim for hold, so that the others wait behind
// it, then fails. Every delivery is redelivered until it may be acked. It
// checks that each message has exactly one effect, and counts.
func raceHolderRollsBack(t *testing.T, db *sql.DB, process processFunc, n, racers int, hold time.Duration) contention {
	t.Helper()
	ctx := context.Background()
	c := contention{messages: n, racers: racers}
	var mu sync.Mutex
	start := time.Now()
	for i := range n {
		m := inbox.Message{ID: fmt.Sprintf("m-%04d", i)}
		var handled atomic.Int32
		holderErr := errors.New("the holder fails")
		hd := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (k) VALUES (?)", m.ID); err != nil {
				return err
			}
			if handled.Add(1) == 1 {
				time.Sleep(hold) // the other racers queue behind the claim
				return holderErr
			}
			return nil
		}
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-gate
				for call := 0; ; call++ {
					out, err := process(ctx, m, hd)
					mu.Lock()
					c.calls++
					if call == 0 && !errors.Is(err, holderErr) {
						c.waiting++
						switch {
						case mysqlErrNumber(err) == 1213:
							c.deadlocks++
						case mysqlErrNumber(err) == 1205:
							c.timeouts++
						case out.Status == inbox.Processed:
							c.processed++
						case out.Status == inbox.Duplicate:
							c.duplicates++
						}
					}
					mu.Unlock()
					if out.Ack() {
						return
					}
					if call == 100 {
						t.Errorf("message %s: not settled after %d calls: %v %v", m.ID, call+1, out.Status, err)
						return
					}
					time.Sleep(out.Delay)
				}
			})
		}
		close(gate)
		wg.Wait()
		var effects int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE k = ?", m.ID).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if effects != 1 {
			t.Fatalf("message %s: %d effects, want exactly 1", m.ID, effects)
		}
	}
	c.wall = time.Since(start)
	return c
}

// Racing deliveries of one message whose holder rolls back: on InnoDB the
// waiters' duplicate-key locks turn into gap locks when the holder's row
// is removed, and their inserts then deadlock each other (see the MySQL
// dialect's claimDeadlock). Process must not hand those deadlocks to the
// broker as redeliveries: before BeginClaim began again, 6 of the 7
// waiters of each message did. ProcessTx claims in the caller's
// transaction, which the deadlock rolled back: it can only return it, and
// must still settle every delivery with exactly one effect.
func TestMySQLContentionHolderRollsBack(t *testing.T) {
	t.Parallel()
	const racers = 8
	messages := 300
	if testing.Short() {
		messages = 100
	}
	tests := []struct {
		name     string
		messages int
		maxShare float64 // of the waiting deliveries that may deadlock
		process  func(db *sql.DB, ib *inbox.Inbox[*sql.Tx]) processFunc
	}{
		{"Process", messages, 0.05, func(_ *sql.DB, ib *inbox.Inbox[*sql.Tx]) processFunc { return ib.Process }},
		{"ProcessTx", messages / 3, 1, func(db *sql.DB, ib *inbox.Inbox[*sql.Tx]) processFunc {
			return func(ctx context.Context, m inbox.Message, hd inbox.Handler[*sql.Tx]) (inbox.Outcome, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return inbox.Outcome{Status: inbox.Retry}, err
				}
				out, err := ib.ProcessTx(ctx, tx, m, hd)
				if !out.Commit() {
					_ = tx.Rollback()
					return out, err
				}
				if err := tx.Commit(); err != nil {
					return inbox.Outcome{Status: inbox.Retry}, err
				}
				return out, err
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openMySQL(t, "")
			db.SetMaxOpenConns(racers)
			ib := mysqlInbox(t, db, sqlstore.Config{}, inbox.Config{Consumer: "contention", MaxAttempts: 1000,
				Backoff: inbox.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}}, true)
			c := raceHolderRollsBack(t, db, tc.process(db, ib), tc.messages, racers, 20*time.Millisecond)
			t.Log(c)
			if c.deadlockShare() > tc.maxShare {
				t.Fatalf("%.0f %% of the waiting deliveries deadlocked, want at most %.0f %%: %v", 100*c.deadlockShare(), 100*tc.maxShare, c)
			}
		})
	}
}
