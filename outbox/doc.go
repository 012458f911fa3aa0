// Package outbox writes the messages a service publishes in the same
// transaction as its business writes.
//
// The messages and the writes commit or roll back together. No event goes
// out for a rolled-back write, and a crash loses no event of a committed
// one. A [Relay] then publishes the messages, at least once, each with its
// stable ID. It deletes them once the broker has them. The consumer's inbox
// recognizes a re-publish by that ID.
//
//	ob, err := outbox.New(ctx, driver, nil) // the inbox's store driver
//	err = ob.Write(ctx, tx, &outbox.Message{ID: orderID + "/placed", Destination: "orders.placed", Payload: body})
//
//	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(publisher)})
//	err = relay.Run(ctx)
//
// # Writing from an inbox handler
//
// Inside an inbox handler, write in the handler's transaction. The message
// then commits with the claim, at most once. Give it an ID from [DerivedID],
// so that the incoming message always yields the same ID. The next inbox
// recognizes that ID should this consumer process the message again. That
// happens after its inbox row was pruned, or in a replay.
//
//	ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("billing", msg.ID, "captured"), Destination: "payments.captured", Payload: p})
//
// # Tables and relays
//
// The outbox table comes with the inbox's migrations: run [inbox.Migrate].
// A relay claims due rows with a lease, so several relays share the work.
// A dead relay's rows come back after its lease. PostgreSQL, MySQL 8 and
// MariaDB 10.6+ claim with FOR UPDATE SKIP LOCKED. SQLite has a single
// writer. A relay wakes on PostgreSQL's NOTIFY, which fires at COMMIT, and
// polls otherwise.
//
// A relay that dies between a publication and the delete leaves its rows
// claimed. After the lease they are published again, with the same ID. A
// message thus goes out at least once and is never lost.
//
// On PostgreSQL, [Relay.Run] holds one connection of the driver's pool for
// LISTEN while it runs. Size the pool for it. On a pool of one connection,
// Run polls instead and logs that at WARN. Neither the relay nor the
// application then waits for ever for the only connection.
// [RelayConfig.NoListen] makes the relay always poll.
//
// # Failures, outages and parked rows
//
// A failed publication counts one attempt. The row is published again after
// a backoff. After [RelayConfig.MaxAttempts] counted failures it is parked.
// A parked row is kept but no longer published. [Relay.Parked] lists it, and
// [Relay.Unpark] or [Relay.Discard] ends it. An error marked with
// [inbox.Permanent] parks the row at once. So does an error that wraps
// [broker.ErrInvalidMessage]. Examples are a header or ID the broker cannot
// carry, or a payload over its limit.
//
// A broker outage should park nothing. When a round's publications fail and
// none succeeds, the relay calls [RelayConfig.Probe] once. An error from it
// means an outage, such as a lost connection or refused credentials. The
// failures are then not counted. The rows are retried with a backoff that
// grows with the outage. A nil error means the receiver answers. The
// failures then count, so a row it refuses is parked even when it is the
// only traffic. The probe runs within [RelayConfig.PublishTimeout], and
// within the rows' lease.
//
// Without a probe, [RelayConfig.OutageAfter] decides. A failure then counts
// only while the receiver takes other messages. When none of the relay's
// publications succeeded for OutageAfter, or ever, the receiver is taken
// for down. The failure is then not counted. A bad row that is the only
// traffic is therefore retried for ever, logged at WARN, rather than parked.
// Give a Probe to avoid that.
//
// A destination that is missing while the broker answers is a bad row, not
// an outage. Examples are a NATS subject without a stream, an unroutable
// AMQP message, an unknown Kafka topic and a missing SQS queue. Such rows
// count and are parked at MaxAttempts. A stream deleted and recreated
// during a deploy may therefore park rows. Unpark them once it is back.
//
// # Order
//
// Rows are published oldest first. Without [RelayConfig.Ordered], a failed
// row is retried after younger ones. With Ordered, each key's messages go
// out one at a time, in the order of their sequence numbers. Write takes
// the sequence number when it inserts. A key's next message waits until
// the previous one is published, and while it is parked. Rows without a
// key are not held back.
//
// Two transactions writing one key at once may commit in the other order
// than they wrote. A service that needs its order locks the key's aggregate
// before it writes, with SELECT ... FOR UPDATE.
//
// Within a batch, the rows are in sequence order. With Ordered, they also
// have distinct keys. Publishing them in parallel, up to
// [RelayConfig.Parallel], thus breaks no order the relay promises.
package outbox
