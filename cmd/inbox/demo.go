package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/otelinbox"
	"github.com/inboxkit/inbox/store/sqlstore"
	"github.com/inboxkit/inbox/store/sqlstore/sqlite"
)

var demoCommand = command{
	name:     "demo",
	synopsis: "inbox demo [-messages N] [-workers N] [-lost-acks F] [-seed N] [-db FILE] [-metrics ADDR]",
	description: `Runs the whole path with nothing to install: an embedded NATS JetStream
server, two consumers' worth of workers on one durable consumer (as two
processes would run), the inbox on SQLite, and a handler that credits
accounts in the transaction of the message's claim. It publishes -messages
payments and injects the faults of an at-least-once world: acks lost after
the commit (the broker redelivers those), handlers slower than the ack wait
(the other consumer receives the message while the first still holds it),
handlers that fail once before they succeed (every 25th payment). Then it
checks that every payment credited its account exactly once, prints what
happened, and exits 1 if a balance is wrong.

Without -db the SQLite file is a temporary one, removed at the end; with
-db the file keeps the inbox's tables and the demo's accounts, which each
run resets.`,
	examples: `inbox demo
inbox demo -messages 1000 -workers 8 -lost-acks 0.5 -seed 7
inbox demo -metrics 127.0.0.1:9464`,
}

// demo runs the whole path on embedded defaults: an embedded NATS
// JetStream server, two consumer processes' worth of workers on one
// durable consumer, the inbox on SQLite, and a handler that credits
// accounts. It injects the faults of an at-least-once world: acks lost
// after the commit (the broker redelivers), two consumers receiving one
// message at once, handlers failing before they succeed. Then it checks
// that every payment credited its account exactly once.
func demo(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := demoCommand.flagSet()
	path := fs.String("db", "", "SQLite file (default: a new temporary file)")
	n := fs.Int("messages", 300, "number of payments published")
	workers := fs.Int("workers", 4, "workers of each of the two consumers")
	lostAcks := fs.Float64("lost-acks", 0.3, "fraction of acks lost after the commit (the broker redelivers those)")
	seed := fs.Uint64("seed", 1, "seed of the faults")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://ADDR/metrics while the demo runs, e.g. 127.0.0.1:9464 (default off)")
	if err := parse(fs, args, out, stderr); err != nil {
		return err
	}
	if *n < 1 || *workers < 1 {
		return usageError(fs, stderr, "-messages and -workers must be at least 1")
	}
	dir, err := os.MkdirTemp("", "inbox-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *path == "" {
		*path = filepath.Join(dir, "demo.db")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The broker: an embedded NATS server with JetStream.
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: filepath.Join(dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("the embedded NATS server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}}); err != nil {
		return err
	}

	// The database: SQLite with the inbox's tables and the accounts.
	db, err := sqlite.Open(*path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	driver, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlite.Dialect, Logger: quiet})
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
	counts := &inbox.Counts{}
	hooks := []inbox.Hook{counts}
	if *metricsAddr != "" {
		shutdown, err := serveMetrics(ctx, *metricsAddr)
		if err != nil {
			return err
		}
		defer shutdown(context.WithoutCancel(ctx))
		oh, err := otelinbox.New(nil)
		if err != nil {
			return err
		}
		hooks = append(hooks, oh)
		fmt.Fprintf(out, "metrics:    http://%s/metrics\n", *metricsAddr)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{
		Consumer: "demo-" + time.Now().Format("150405.000000"),
		Backoff:  inbox.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		Hooks:    hooks,
		Logger:   quiet,
	})
	if err != nil {
		return err
	}

	// Publish the payments, each with its ID.
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		return err
	}
	expected := map[int]int{}
	for i := range *n {
		account, amount := i%10, 1+i%7
		expected[account] += amount
		err := pub.Publish(ctx, &broker.Message{ID: fmt.Sprintf("payment-%d", i), Subject: "payments.received",
			Type: "payment.received", Payload: fmt.Appendf(nil, `{"account":%d,"amount":%d}`, account, amount)})
		if err != nil {
			return err
		}
	}

	var failedOnce, sleptOnce sync.Map
	var slow atomic.Int64
	credit := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		var account, amount, i int
		if _, err := fmt.Sscanf(string(msg.Payload), `{"account":%d,"amount":%d}`, &account, &amount); err != nil {
			return inbox.Permanent(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO demo_accounts (id, balance) VALUES (?, ?)
			ON CONFLICT (id) DO UPDATE SET balance = balance + excluded.balance`, account, amount); err != nil {
			return err
		}
		fmt.Sscanf(msg.ID, "payment-%d", &i)
		if _, seen := failedOnce.LoadOrStore(msg.ID, true); !seen && i%25 == 0 {
			return errors.New("downstream timeout (simulated)") // every 25th payment fails once
		}
		if _, seen := sleptOnce.LoadOrStore(msg.ID, true); !seen && i%100 == 7 {
			// Every 100th is slow, past AckWait: the broker hands it to the
			// other consumer while this one still holds its claim.
			slow.Add(1)
			time.Sleep(700 * time.Millisecond)
		}
		return nil
	}

	// Two consumers on one durable consumer, as two processes would run;
	// some of their acks are lost after the commit.
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var lost atomic.Int64
	errs := make(chan error, 2)
	for c := range 2 {
		src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: "PAYMENTS", Durable: "billing", AckWait: 500 * time.Millisecond, Logger: quiet})
		if err != nil {
			return err
		}
		defer src.Close()
		lossy := &lossySource{Source: src, rng: rand.New(rand.NewPCG(*seed, uint64(c))), p: *lostAcks, lost: &lost}
		go func() {
			errs <- inbox.Consume(runCtx, ib, lossy, credit, &inbox.ConsumerConfig{Workers: *workers, Logger: quiet,
				LeaseInterval: -1}) // no InProgress: let slow messages be redelivered
		}()
	}
	deadline := time.After(2*time.Minute + time.Duration(*n)*10*time.Millisecond)
	for counts.Processed.Load() < int64(*n) {
		select {
		case err := <-errs:
			return fmt.Errorf("a consumer stopped: %w", err)
		case <-deadline:
			return fmt.Errorf("only %d of %d payments processed", counts.Processed.Load(), *n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // the last lost acks come back as duplicates
	stop()
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	elapsed := time.Since(start)

	fmt.Fprintf(out, "published:  %s to an embedded NATS JetStream server\n", plural(*n, "payment"))
	fmt.Fprintf(out, "consumed:   by 2 consumers x %s, inbox on SQLite %s\n", plural(*workers, "worker"), *path)
	fmt.Fprintf(out, "faults:     %s lost after the commit, %s, %s slower than AckWait (redelivered while running)\n",
		plural(lost.Load(), "ack"), plural((*n+24)/25, "handler failure"), plural(slow.Load(), "handler"))
	fmt.Fprintf(out, "processed:  %d\nduplicates: %d (redeliveries skipped)\nretries:    %d (redelivered after a failure)\n",
		counts.Processed.Load(), counts.Duplicates.Load(), counts.Retries.Load())
	got := map[int]int{}
	rows, err := db.QueryContext(ctx, `SELECT id, balance FROM demo_accounts`)
	if err != nil {
		return err
	}
	defer rows.Close()
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
			return fmt.Errorf("account %d has balance %d, want %d: a payment was lost or applied twice", account, got[account], want)
		}
	}
	if counts.Processed.Load() != int64(*n) {
		return fmt.Errorf("%d payments processed, want %d", counts.Processed.Load(), *n)
	}
	fmt.Fprintf(out, "balances:   %s checked: every payment credited exactly once (%v)\n",
		plural(len(expected), "account"), elapsed.Round(time.Millisecond))
	return nil
}

// lossySource loses a fraction p of acks: the message committed, the ack
// never reaches the broker, which redelivers it after AckWait.
type lossySource struct {
	broker.Source
	mu   sync.Mutex
	rng  *rand.Rand
	p    float64
	lost *atomic.Int64
}

func (s *lossySource) Next(ctx context.Context) (broker.Delivery, error) {
	d, err := s.Source.Next(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	lose := s.rng.Float64() < s.p
	s.mu.Unlock()
	if lose {
		return &lostAck{Delivery: d, lost: s.lost}, nil
	}
	return d, nil
}

type lostAck struct {
	broker.Delivery
	lost *atomic.Int64
}

func (d *lostAck) Ack(context.Context) error { d.lost.Add(1); return nil }
