package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// demo runs a small consumer that credits accounts on SQLite, feeding it
// messages the way an at-least-once broker does: redelivered, delivered to
// two workers at once, failing once before they succeed. It then checks
// that every message credited its account exactly once.
func demo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	path := fs.String("db", "", "SQLite file (default: a new temporary file)")
	n := fs.Int("messages", 300, "number of distinct messages")
	workers := fs.Int("workers", 4, "concurrent workers")
	seed := fs.Uint64("seed", 1, "seed of the delivery pattern")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *workers < 1 {
		return errors.New("-messages and -workers must be at least 1")
	}
	if *path == "" {
		dir, err := os.MkdirTemp("", "inbox-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*path = filepath.Join(dir, "demo.db")
	}
	db, err := sqlstore.OpenSQLite(*path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite, Logger: quiet})
	if err != nil {
		return err
	}
	if err := inbox.Migrate(ctx, driver); err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS demo_accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)`,
		`DELETE FROM demo_accounts`, // a new run starts from zero, with a consumer of its own
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{
		Consumer: "demo-" + time.Now().Format("150405.000000"), // a fresh consumer per run
		Backoff:  inbox.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		Logger:   quiet,
	})
	if err != nil {
		return err
	}

	// The deliveries: every message once, a third of them again later, every
	// tenth twice at the same instant (a rebalance race).
	rng := rand.New(rand.NewPCG(*seed, 0))
	type delivery struct {
		msg    inbox.Message
		racing bool
	}
	var deliveries []delivery
	expected := map[int]int{}
	for i := range *n {
		account, amount := i%10, 1+i%7
		expected[account] += amount
		m := inbox.Message{ID: fmt.Sprintf("payment-%d", i), Type: "payment.received",
			Payload: fmt.Appendf(nil, `{"account":%d,"amount":%d}`, account, amount)}
		deliveries = append(deliveries, delivery{msg: m})
		if rng.IntN(3) == 0 {
			deliveries = append(deliveries, delivery{msg: m})
		}
		if i%10 == 0 {
			deliveries = append(deliveries, delivery{msg: m, racing: true})
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	var failedOnce sync.Map // every 25th message fails its first attempt
	credit := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		var account, amount int
		if _, err := fmt.Sscanf(string(msg.Payload), `{"account":%d,"amount":%d}`, &account, &amount); err != nil {
			return inbox.Permanent(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO demo_accounts (id, balance) VALUES (?, ?)
			ON CONFLICT (id) DO UPDATE SET balance = balance + excluded.balance`, account, amount); err != nil {
			return err
		}
		var i int
		fmt.Sscanf(msg.ID, "payment-%d", &i)
		if _, seen := failedOnce.LoadOrStore(msg.ID, true); !seen && i%25 == 0 {
			return errors.New("downstream timeout (simulated)")
		}
		return nil
	}

	var processed, duplicates, retries atomic.Int64
	deliver := func(m inbox.Message) error {
		for {
			outcome, err := ib.Process(ctx, m, credit)
			switch outcome.Status {
			case inbox.Processed:
				processed.Add(1)
				return nil
			case inbox.Duplicate:
				duplicates.Add(1)
				return nil
			case inbox.Retry: // the broker redelivers after the delay
				retries.Add(1)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(outcome.Delay)
			default:
				return fmt.Errorf("message %s: %v: %w", m.ID, outcome.Status, err)
			}
		}
	}
	start := time.Now()
	jobs := make(chan delivery)
	errs := make(chan error, *workers)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for d := range jobs {
				if d.racing { // a second worker receives the same message now
					var race sync.WaitGroup
					race.Go(func() {
						if err := deliver(d.msg); err != nil {
							errs <- err
						}
					})
					if err := deliver(d.msg); err != nil {
						errs <- err
					}
					race.Wait()
					continue
				}
				if err := deliver(d.msg); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, d := range deliveries {
		jobs <- d
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	elapsed := time.Since(start)

	total := 0
	for _, racing := range deliveries {
		total += 1 + btoi(racing.racing)
	}
	fmt.Fprintf(out, "deliveries: %d of %d messages (redeliveries and racing duplicates included), %d workers, SQLite %s\n",
		total, *n, *workers, *path)
	fmt.Fprintf(out, "processed:  %d\nduplicates: %d\nretries:    %d (handler failures and busy database, redelivered)\n",
		processed.Load(), duplicates.Load(), retries.Load())
	rows, err := db.QueryContext(ctx, `SELECT id, balance FROM demo_accounts`)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := map[int]int{}
	for rows.Next() {
		var id, balance int
		if err := rows.Scan(&id, &balance); err != nil {
			return err
		}
		got[id] = balance
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for account, want := range expected {
		if got[account] != want {
			return fmt.Errorf("account %d has balance %d, want %d: a message was lost or applied twice", account, got[account], want)
		}
	}
	if processed.Load() != int64(*n) {
		return fmt.Errorf("%d messages processed, want %d", processed.Load(), *n)
	}
	fmt.Fprintf(out, "balances:   all %d accounts match the messages: every message credited exactly once (%.0f msgs/s)\n",
		len(expected), float64(total)/elapsed.Seconds())
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
