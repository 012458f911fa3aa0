package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
)

// Consume reads a broker's deliveries and acks each one after its outcome
// committed. Here the broker is inboxtest's, in memory. It loses the first
// ack of every message, as a crash between COMMIT and ack would: each
// message comes back, and its second delivery is a duplicate.
func Example_consume() {
	ctx := context.Background()
	db, driver, done := openExampleDB()
	defer done()
	var counts inbox.Counts
	ib, err := inbox.New(ctx, driver, &inbox.Config{Consumer: "billing", Hooks: []inbox.Hook{&counts}})
	if err != nil {
		log.Fatal(err)
	}
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{
		LoseAck: func(m *broker.Message) bool { return m.Deliveries == 1 },
	})
	for _, id := range []string{"payment-1", "payment-2", "payment-3"} {
		if err := b.Publish(ctx, &broker.Message{ID: id, Subject: "payments", Payload: []byte(`{"cents":10}`)}); err != nil {
			log.Fatal(err)
		}
	}

	src := b.Source()
	defer src.Close()
	cctx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- inbox.Consume(cctx, ib, src, demoCredit, nil) }()

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.WaitSettled(wctx); err != nil { // every message acked
		log.Fatal(err)
	}
	stop()
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	fmt.Println(counts.String())
	fmt.Println("acks lost:", len(b.LostAcks()), "acked:", len(b.Acked()), "unsettled:", len(b.Unsettled()))
	fmt.Println("balance:", exampleBalance(db))
	// Output:
	// processed 3, duplicates 3, retries 0, dead-lettered 0
	// acks lost: 3 acked: 3 unsettled: 0
	// balance: 30
}
