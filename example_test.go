package inbox_test

import (
	"fmt"

	"github.com/inboxkit/inbox"
)

// delivery of the message.
func ExampleIdempotencyKey() {
	msg := inbox.Message{ID: "payment-42"}
	k1 := inbox.IdempotencyKey(msg, "charge")
	k2 := inbox.IdempotencyKey(msg, "charge")
	k3 := inbox.IdempotencyKey(msg, "receipt-email")
	fmt.Println(len(k1), k1 == k2, k1 == k3)
	// Output: 64 true false
}
