// Command sqs-postgres is a small consumer that credits accounts from
// payment messages on an Amazon SQS queue, effectively once, with the
// inbox on PostgreSQL. It publishes sample payments first when asked to.
// Against AWS (credentials and region from the environment, as the AWS
// CLI finds them):
//
//	go run ./examples/sqs-postgres -publish 100
//
// or against an emulator such as goaws (github.com/Admiral-Piett/goaws):
//
//	AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x \
//	    go run ./examples/sqs-postgres -endpoint http://127.0.0.1:4100 -publish 100
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/store/pgxstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends the drain at once
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sqs-postgres:", err)
		os.Exit(1)
	}
}

// payment is the message's payload.
type payment struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sqs-postgres", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "SQS endpoint URL (default: AWS's, for the region)")
	dsn := fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	queue := fs.String("queue", "payments", "SQS queue (created if missing)")
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

	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	cl := awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) {
		if *endpoint != "" {
			o.BaseEndpoint = aws.String(*endpoint)
		}
	})
	// Always give a queue its visibility timeout: the Source asks for its
	// own on every receive, but other consumers may not.
	if _, err := cl.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: queue,
		Attributes: map[string]string{"VisibilityTimeout": "30"}}); err != nil {
		return err
	}
	if *publish > 0 {
		pub, err := sqs.NewPublisher(cl, nil)
		if err != nil {
			return err
		}
		run := time.Now().UnixNano() // new payment IDs on every run
		for i := range *publish {
			body, _ := json.Marshal(payment{Account: fmt.Sprintf("acct-%d", i%5), Amount: 10})
			id := fmt.Sprintf("payment-%d-%d", run, i)
			if err := pub.Publish(ctx, &broker.Message{ID: id, Subject: *queue, Type: "payment.received", Payload: body}); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "published %d payments\n", *publish)
	}

	src, err := sqs.NewSource(ctx, &sqs.Config{Client: cl, Queue: *queue, WaitTime: time.Second})
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
