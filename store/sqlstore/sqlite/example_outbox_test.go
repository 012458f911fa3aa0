package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/inboxtest"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store/sqlstore"
)

// openOutboxDB is openExampleDB with the outbox examples' own table,
// orders.
func openOutboxDB() (db *sql.DB, driver *sqlstore.Driver, done func()) {
	db, driver, done = openExampleDB()
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	return db, driver, done
}

// placeOrder inserts an order and writes its event in one transaction,
// which commits, or rolls back when rollback is true.
func placeOrder(ctx context.Context, db *sql.DB, ob *outbox.Outbox[*sql.Tx], id string, rollback bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after a Commit, a no-op
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
		return err
	}
	err = ob.Write(ctx, tx, &outbox.Message{
		ID:          id + "/placed",
		Destination: "orders.placed",
		Type:        "order.placed",
		Payload:     []byte(`{"order":"` + id + `"}`),
	})
	if err != nil || rollback {
		return err
	}
	return tx.Commit()
}

// The order and its event commit together. The order that rolls back
// leaves no event. A relay then publishes what committed to a broker,
// here inboxtest's in memory, and deletes it from the outbox.
func Example_outboxWrite() {
	ctx := context.Background()
	db, driver, done := openOutboxDB()
	defer done()
	ob, err := outbox.New(ctx, driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := placeOrder(ctx, db, ob, "order-1", false); err != nil {
		log.Fatal(err)
	}
	if err := placeOrder(ctx, db, ob, "order-2", true); err != nil {
		log.Fatal(err)
	}

	b := inboxtest.NewBroker(nil)
	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(b)})
	if err != nil {
		log.Fatal(err)
	}
	res, err := relay.RelayOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("claimed %d, published %d\n", res.Claimed, res.Published)

	src := b.Source()
	defer src.Close()
	d, err := src.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := d.Message()
	fmt.Println("delivered:", m.ID, m.Subject, m.Type, string(m.Payload))
	res, err = relay.RelayOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("then claimed %d\n", res.Claimed)
	// Output:
	// claimed 1, published 1
	// delivered: order-1/placed orders.placed order.placed {"order":"order-1"}
	// then claimed 0
}

// An inbox handler writes its outgoing message in the inbox's
// transaction, with an ID that DerivedID makes from the incoming one. The
// message commits with the claim: a redelivery, a duplicate, writes
// nothing. Should the consumer process the message again (a replay), the
// same ID lets the next inbox tell it is a copy.
func Example_derivedID() {
	ctx := context.Background()
	_, driver, done := openOutboxDB()
	defer done()
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(ctx, driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	capture := func(ctx context.Context, tx *sql.Tx, msg *inbox.Message) error {
		return ob.Write(ctx, tx, &outbox.Message{
			ID:          outbox.DerivedID("billing", msg.ID, "payment-captured"),
			Destination: "payments.captured",
			Payload:     msg.Payload,
		})
	}
	msg := inbox.Message{ID: "order-1/placed", Payload: []byte(`{"order":"order-1"}`)}
	for range 2 {
		out, err := ib.Process(ctx, msg, capture)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("incoming:", out.Status)
	}

	b := inboxtest.NewBroker(nil)
	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(b)})
	if err != nil {
		log.Fatal(err)
	}
	res, err := relay.RelayOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published:", res.Published)
	d, err := b.Source().Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ID derived:", d.Message().ID == outbox.DerivedID("billing", "order-1/placed", "payment-captured"))
	// Output:
	// incoming: processed
	// incoming: duplicate
	// published: 1
	// ID derived: true
}

// Run relays until its context is done. On SQLite it polls every
// PollInterval; on PostgreSQL a NOTIFY at COMMIT wakes it at once.
func Example_relayRun() {
	ctx := context.Background()
	db, driver, done := openOutboxDB()
	defer done()
	ob, err := outbox.New(ctx, driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	b := inboxtest.NewBroker(nil)
	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{
		Publish:      outbox.ToBroker(b),
		PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- relay.Run(rctx) }()

	for _, id := range []string{"order-1", "order-2"} {
		if err := placeOrder(ctx, db, ob, id, false); err != nil {
			log.Fatal(err)
		}
	}
	src := b.Source()
	defer src.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ids []string
	for range 2 {
		d, err := src.Next(wctx)
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, d.Message().ID)
		_ = d.Ack(wctx)
	}
	stop()
	slices.Sort(ids) // a batch's rows are published in parallel (RelayConfig.Parallel)
	fmt.Println("delivered:", ids)
	fmt.Println("run:", <-stopped)
	// Output:
	// delivered: [order-1/placed order-2/placed]
	// run: <nil>
}

// A publication that no retry fixes parks its message: the relay keeps
// it and stops publishing it. Once the cause is fixed, Unpark makes it
// due again, and it is published as it was written.
func Example_relayUnpark() {
	ctx := context.Background()
	db, driver, done := openOutboxDB()
	defer done()
	ob, err := outbox.New(ctx, driver, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := placeOrder(ctx, db, ob, "order-1", false); err != nil {
		log.Fatal(err)
	}
	b := inboxtest.NewBroker(nil)
	refused := true
	publish := func(ctx context.Context, m *outbox.Message) error {
		if refused {
			return inbox.Permanent(errors.New("webhook: 410 Gone"))
		}
		return outbox.ToBroker(b)(ctx, m)
	}
	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: publish})
	if err != nil {
		log.Fatal(err)
	}
	res, err := relay.RelayOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("claimed %d, parked %d\n", res.Claimed, res.Parked)
	parked, err := relay.Parked(ctx, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range parked {
		fmt.Println("parked:", p.Message.ID, "attempts:", p.Attempts, "error:", p.Error)
	}

	refused = false // the receiver is fixed
	if err := relay.Unpark(ctx, parked[0].Seq); err != nil {
		log.Fatal(err)
	}
	res, err = relay.RelayOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("claimed %d, published %d, unsettled at the broker: %v\n", res.Claimed, res.Published, b.Unsettled())
	// Output:
	// claimed 1, parked 1
	// parked: order-1/placed attempts: 1 error: webhook: 410 Gone
	// claimed 1, published 1, unsettled at the broker: [order-1/placed]
}
