// Command outbox-inbox runs two small services end to end, effectively
// once, over NATS JetStream, each with its own PostgreSQL schema:
//
//   - orders places orders: in one transaction it inserts the order and
//     writes an OrderPlaced message to its outbox; its relay publishes it.
//   - billing consumes OrderPlaced through its inbox and, in the same
//     transaction, charges the order and writes PaymentCaptured to its own
//     outbox, with an ID derived from the incoming message's; its relay
//     publishes it.
//   - orders consumes PaymentCaptured through its inbox and marks the order
//     paid.
//
// A crash anywhere (before a COMMIT, between a publication and its
// delete, before an ack) makes a message be published or delivered again
// with its ID, and the inboxes skip it: tests/outboxcrash kills these
// processes at such points and checks the ledgers.
//
//	go run ./examples/outbox-inbox -orders 100
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/store/pgxstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outbox-inbox:", err)
		os.Exit(1)
	}
}

type order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// service is one service's database: its schema's tables, inbox and
// outbox.
type service struct {
	pool   *pgxpool.Pool
	driver *pgxstore.Driver
	schema string
	inbox  *inbox.Inbox[pgx.Tx]
	outbox *outbox.Outbox[pgx.Tx]
	counts *inbox.Counts
}

func newService(ctx context.Context, pool *pgxpool.Pool, schema, consumer, ddl string) (*service, error) {
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema+`; `+ddl); err != nil {
		return nil, err
	}
	d, err := pgxstore.New(pool, &pgxstore.Config{Tables: store.Tables{Schema: schema}})
	if err != nil {
		return nil, err
	}
	if err := inbox.Migrate(ctx, d); err != nil { // the inbox's tables and the outbox's
		return nil, err
	}
	s := &service{pool: pool, driver: d, schema: schema, counts: &inbox.Counts{}}
	if s.inbox, err = inbox.New(ctx, d, &inbox.Config{Consumer: consumer, Hooks: []inbox.Hook{s.counts}}); err != nil {
		return nil, err
	}
	if s.outbox, err = outbox.New(ctx, d, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// relay publishes the service's outbox through pub until ctx ends.
func (s *service) relay(ctx context.Context, pub outbox.PublishFunc) error {
	r, err := outbox.NewRelay(ctx, s.driver, &outbox.RelayConfig{Publish: pub})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("outbox-inbox", flag.ContinueOnError)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server")
	dsn := fs.String("postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL DSN")
	stream := fs.String("stream", "SHOP", "JetStream stream (created if missing; its subjects STREAM.>)")
	n := fs.Int("orders", 50, "orders to place")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	prefix := "shop_" + *stream
	orders, err := newService(ctx, pool, prefix+"_orders", "orders",
		`CREATE TABLE IF NOT EXISTS `+prefix+`_orders.orders (id text PRIMARY KEY, amount bigint NOT NULL, paid boolean NOT NULL DEFAULT false)`)
	if err != nil {
		return err
	}
	billing, err := newService(ctx, pool, prefix+"_billing", "billing",
		`CREATE TABLE IF NOT EXISTS `+prefix+`_billing.charges (order_id text PRIMARY KEY, amount bigint NOT NULL)`)
	if err != nil {
		return err
	}

	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	placed, captured := *stream+".order-placed", *stream+".payment-captured"
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: *stream, Subjects: []string{*stream + ".>"}}); err != nil {
		return err
	}
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		return err
	}
	publish := outbox.ToBroker(pub)

	// orders: place the orders, each with its OrderPlaced in one transaction.
	run := time.Now().UnixNano()
	for i := range *n {
		o := order{ID: fmt.Sprintf("order-%d-%d", run, i), Amount: int64(100 + i)}
		body, _ := json.Marshal(o)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+orders.schema+`.orders (id, amount) VALUES ($1, $2)`, o.ID, o.Amount); err != nil {
				return err
			}
			return orders.outbox.Write(ctx, tx, &outbox.Message{ID: o.ID + "/placed", Destination: placed, Type: "OrderPlaced", Payload: body})
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "orders:  placed %d orders\n", *n)

	// billing: charge each placed order once, and say so through its outbox.
	charge := func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var o order
		if err := json.Unmarshal(msg.Payload, &o); err != nil || o.ID == "" {
			return inbox.Permanent(fmt.Errorf("bad order %q: %v", msg.Payload, err))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+billing.schema+`.charges (order_id, amount) VALUES ($1, $2)`, o.ID, o.Amount); err != nil {
			return err // a second charge of one order would fail here: it never happens
		}
		return billing.outbox.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("billing", msg.ID, "captured"),
			Destination: captured, Type: "PaymentCaptured", Payload: msg.Payload})
	}
	// orders: mark the order paid.
	markPaid := func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var o order
		if err := json.Unmarshal(msg.Payload, &o); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, `UPDATE `+orders.schema+`.orders SET paid = true WHERE id = $1`, o.ID)
		return err
	}

	// Two relays and two consumers, until every order is paid.
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 4)
	goes := func(fn func() error) {
		go func() {
			err := fn()
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	goes(func() error { return orders.relay(gctx, publish) })
	goes(func() error { return billing.relay(gctx, publish) })
	consume := func(s *service, durable, subject string, h inbox.Handler[pgx.Tx]) error {
		src, err := natsjs.NewSource(gctx, js, &natsjs.Config{Stream: *stream, Durable: durable, FilterSubjects: []string{subject}})
		if err != nil {
			return err
		}
		defer src.Close()
		return inbox.Consume(gctx, s.inbox, src, h, nil)
	}
	goes(func() error { return consume(billing, "billing", placed, charge) })
	goes(func() error { return consume(orders, "orders", captured, markPaid) })
	waitErr := func() error {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			var unpaid int
			if err := pool.QueryRow(gctx, `SELECT count(*) FROM `+orders.schema+`.orders WHERE NOT paid`).Scan(&unpaid); err != nil {
				return err
			}
			if unpaid == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d orders still unpaid after a minute", unpaid)
			}
		}
	}()
	cancel()
	for range 4 { // a service's error first: it is why the wait ended
		if err := <-errs; err != nil {
			return err
		}
	}
	if waitErr != nil {
		return waitErr
	}

	var charges, total int64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM `+billing.schema+`.charges`).Scan(&charges, &total); err != nil {
		return err
	}
	fmt.Fprintf(out, "billing: %v\n", billing.counts)
	fmt.Fprintf(out, "orders:  %v\n", orders.counts)
	fmt.Fprintf(out, "every order paid; %d charges for %d orders, %d in all\n", charges, *n, total)
	return nil
}
