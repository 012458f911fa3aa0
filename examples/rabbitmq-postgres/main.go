// Command rabbitmq-postgres is a small consumer that credits accounts from
// payment messages on RabbitMQ, effectively once, with the inbox on
// PostgreSQL. It publishes sample payments first when asked to:
//
//	go run ./examples/rabbitmq-postgres -publish 100
//
// It stops after -idle without a message (default 2 s; 0: at Ctrl-C).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/store/pgxstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends the drain at once
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq-postgres:", err)
		os.Exit(1)
	}
}

// payment is the message's payload.
type payment struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// createAccounts creates the table that credit writes to.
const createAccounts = `CREATE TABLE IF NOT EXISTS example_accounts (id text PRIMARY KEY, balance bigint NOT NULL)`

// credit is the handler: it credits the payment's account in tx, the
// inbox's transaction, so that the credit commits once per message.
func credit(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
	var p payment
	if err := json.Unmarshal(msg.Payload, &p); err != nil || p.Account == "" {
		return inbox.Permanent(fmt.Errorf("bad payment %q: %v", msg.Payload, err)) // dead-lettered, payload kept
	}
	_, err := tx.Exec(ctx, `INSERT INTO example_accounts (id, balance) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET balance = example_accounts.balance + EXCLUDED.balance`, p.Account, p.Amount)
	return err
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rabbitmq-postgres", flag.ContinueOnError)
	amqpURL := fs.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	dsn := fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	queue := fs.String("queue", "payments", "queue (declared if missing)")
	publish := fs.Int("publish", 0, "publish this many sample payments first")
	idle := fs.Duration("idle", 2*time.Second, "stop after this long without a message (0: run until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, createAccounts); err != nil {
		return err
	}
	driver, err := pgxstore.New(pool, nil)
	if err != nil {
		return err
	}
	if err := inbox.Migrate(ctx, driver); err != nil {
		return err
	}
	counts := &inbox.Counts{}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "example-billing", Hooks: []inbox.Hook{counts}})
	if err != nil {
		return err
	}

	srcCfg := &rabbitmq.Config{URL: *amqpURL, Queue: *queue, Prefetch: 8}
	if err := rabbitmq.Declare(ctx, srcCfg); err != nil {
		return err
	}
	if *publish > 0 {
		pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: *amqpURL})
		if err != nil {
			return err
		}
		run := time.Now().UnixNano() // new payment IDs on every run
		for i := range *publish {
			body, _ := json.Marshal(payment{Account: fmt.Sprintf("acct-%d", i%5), Amount: 10})
			id := fmt.Sprintf("payment-%d-%d", run, i)
			if err := pub.Publish(ctx, &broker.Message{ID: id, Subject: *queue, Type: "payment.received", Payload: body}); err != nil {
				pub.Close()
				return err
			}
		}
		pub.Close()
		fmt.Fprintf(out, "published %d payments\n", *publish)
	}

	src, err := rabbitmq.NewSource(ctx, srcCfg)
	if err != nil {
		return err
	}
	defer src.Close()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *idle > 0 {
		go stopWhenIdle(cctx, cancel, *idle, counts.Outcomes)
	}
	if err := inbox.Consume(cctx, ib, src, credit, nil); err != nil {
		return err
	}
	var total int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(balance), 0) FROM example_accounts`).Scan(&total); err != nil {
		return err
	}
	fmt.Fprintf(out, "%v; all accounts hold %d\n", counts, total)
	return nil
}

// stopWhenIdle cancels when count has not moved for idle.
func stopWhenIdle(ctx context.Context, cancel func(), idle time.Duration, count func() int64) {
	last, since := count(), time.Now()
	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if c := count(); c != last {
			last, since = c, time.Now()
		} else if time.Since(since) > idle {
			cancel()
		}
	}
}
