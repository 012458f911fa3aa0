package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/inboxkit/inbox"
)

// A Router gives each message type on one source its own handler, with
// the payload decoded from JSON. A type without a route is dead-lettered,
// and so is a payload that does not decode. Each dead letter keeps its
// payload, and its error says why. With a broker, pass r.Handler() to
// inbox.Consume, or r.BatchHandler() to inbox.ConsumeBatch.
func Example_router() {
	type OrderCreated struct {
		ID    string `json:"id"`
		Cents int64  `json:"cents"`
	}
	type OrderShipped struct {
		ID      string `json:"id"`
		Carrier string `json:"carrier"`
	}
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL, carrier TEXT)`); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "orders"})
	if err != nil {
		log.Fatal(err)
	}

	r := inbox.NewRouter[*sql.Tx](nil)
	err = errors.Join(
		inbox.Route(r, "order.created", func(ctx context.Context, tx *sql.Tx, msg *inbox.Message, ev *OrderCreated) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (id, cents) VALUES (?, ?)", ev.ID, ev.Cents)
			return err
		}),
		inbox.Route(r, "order.shipped", func(ctx context.Context, tx *sql.Tx, msg *inbox.Message, ev *OrderShipped) error {
			_, err := tx.ExecContext(ctx, "UPDATE orders SET carrier = ? WHERE id = ?", ev.Carrier, ev.ID)
			return err
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	h := r.Handler()

	for _, msg := range []inbox.Message{
		{ID: "m1", Type: "order.created", Payload: []byte(`{"id":"o-1","cents":250}`)},
		{ID: "m2", Type: "order.shipped", Payload: []byte(`{"id":"o-1","carrier":"DHL"}`)},
		{ID: "m3", Type: "order.refunded", Payload: []byte(`{"id":"o-1"}`)},
		{ID: "m4", Type: "order.created", Payload: []byte(`{"id":"o-2","cents":"ten"}`)},
	} {
		out, err := ib.Process(ctx, msg, h)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(msg.ID, msg.Type, out.Status)
	}

	var cents int64
	var carrier string
	if err := db.QueryRow(`SELECT cents, carrier FROM orders WHERE id = 'o-1'`).Scan(&cents, &carrier); err != nil {
		log.Fatal(err)
	}
	fmt.Println("o-1:", cents, carrier)
	dead, err := ib.DeadLetters(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range dead {
		fmt.Printf("dead letter %s %s: %s\n", d.Message.ID, d.Message.Payload, d.Error)
	}
	// Output:
	// m1 order.created processed
	// m2 order.shipped processed
	// m3 order.refunded dead-lettered
	// m4 order.created dead-lettered
	// o-1: 250 DHL
	// dead letter m3 {"id":"o-1"}: inbox: no route for message type "order.refunded"; the router knows "order.created", "order.shipped"
	// dead letter m4 {"id":"o-2","cents":"ten"}: inbox: payload of message type "order.created" does not decode into sqlite_test.OrderCreated: json: cannot unmarshal string into Go struct field OrderCreated.cents of type int64
}
