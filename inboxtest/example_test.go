package inboxtest_test

import (
	"context"
	"fmt"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
)

// A Broker that loses the first ack of every message, as a consumer that
// crashes between its COMMIT and its ack would: the message comes back,
// and the test sees what was acked and lost. In a test, run inbox.Consume
// on b.Source() instead of the loop below, and assert on the Broker and
// the database after b.WaitSettled.
func ExampleBroker() {
	ctx := context.Background()
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{
		LoseAck: func(m *broker.Message) bool { return m.Deliveries == 1 },
	})
	_ = b.Publish(ctx, &broker.Message{ID: "order-1", Payload: []byte(`{"amount":10}`)})

	src := b.Source()
	defer src.Close()
	for len(b.Unsettled()) > 0 {
		d, err := src.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("delivery %d of %s\n", d.Message().Deliveries, d.Message().ID)
		_ = d.Ack(ctx)
	}
	fmt.Println("acked:", b.Acked(), "lost:", b.LostAcks())
	// Output:
	// delivery 1 of order-1
	// delivery 2 of order-1
	// acked: [order-1] lost: [order-1]
}
