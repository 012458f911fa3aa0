package inbox_test

import (
	"fmt"

	"github.com/inboxkit/inbox"
)

// A handler that charges a card through a payment service sends it a key.
// The key is the same on every delivery of the message, so the service
// charges once however often the handler runs. Another purpose, such as
// a receipt email, gets another key.
func ExampleIdempotencyKey() {
	msg := inbox.Message{ID: "payment-42"}
	k1 := inbox.IdempotencyKey(msg, "charge")
	k2 := inbox.IdempotencyKey(msg, "charge")
	k3 := inbox.IdempotencyKey(msg, "receipt-email")
	fmt.Println(len(k1), k1 == k2, k1 == k3)
	// Output: 64 true false
}
