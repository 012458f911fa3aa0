// Command kafka-postgres is a small consumer that credits accounts from
// payment messages on a Kafka topic, effectively once, with the inbox on
// PostgreSQL. It publishes sample payments first when asked to:
//
//	go run ./examples/kafka-postgres -brokers localhost:9092 -publish 100
//
// It stops after -idle without a message (default 2 s; 0: at Ctrl-C).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/store/pgxstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends the drain at once
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-postgres:", err)
		os.Exit(1)
	}
}

// payment is the message's payload.
type payment struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kafka-postgres", flag.ContinueOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
	dsn := fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	topic := fs.String("topic", "payments", "topic (created with 3 partitions if missing)")
	publish := fs.Int("publish", 0, "publish this many sample payments first")
	idle := fs.Duration("idle", 2*time.Second, "stop after this long without a message (0: run until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	seeds := strings.Split(*brokers, ",")

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_accounts (id text PRIMARY KEY, balance bigint NOT NULL)`); err != nil {
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

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, *topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", *topic, err)
	}
	if *publish > 0 {
		pub, err := kafka.NewPublisher(cl, nil)
		if err != nil {
			return err
		}
		run := time.Now().UnixNano() // new payment IDs on every run
		for i := range *publish {
			body, _ := json.Marshal(payment{Account: fmt.Sprintf("acct-%d", i%5), Amount: 10})
			id := fmt.Sprintf("payment-%d-%d", run, i)
			if err := pub.Publish(ctx, &broker.Message{ID: id, Subject: *topic, Type: "payment.received", Payload: body}); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "published %d payments\n", *publish)
	}

	src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: seeds, Topic: *topic, Group: "example-billing"})
	if err != nil {
		return err
	}
	defer src.Close()
	credit := func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var p payment
		if err := json.Unmarshal(msg.Payload, &p); err != nil || p.Account == "" {
			return inbox.Permanent(fmt.Errorf("bad payment %q: %v", msg.Payload, err)) // dead-lettered, payload kept
		}
		_, err := tx.Exec(ctx, `INSERT INTO example_accounts (id, balance) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET balance = example_accounts.balance + EXCLUDED.balance`, p.Account, p.Amount)
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *idle > 0 {
		go stopWhenIdle(cctx, cancel, *idle, counts.Outcomes)
	}
	if err := inbox.Consume(cctx, ib, src, credit, nil); err != nil {
		return err
	}
	fmt.Fprintln(out, counts)
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
