// Package outbox is the producer half of effectively-once: the
// transactional outbox. A service writes the messages it wants published
// in the same database transaction as its business writes, so that they
// commit or roll back together (no event published for a rolled-back
// write, no write whose event a crash lost); a Relay then publishes them,
// at least once, each with its stable ID, and deletes them once the broker
// has them. The consumer's inbox recognizes a re-publish by that ID.
//
//	ob, err := outbox.New(ctx, driver, nil) // the inbox's store driver
//	err = ob.Write(ctx, tx, &outbox.Message{ID: orderID + "/placed", Destination: "orders.placed", Payload: body})
//
//	relay, err := outbox.NewRelay(ctx, driver, &outbox.RelayConfig{Publish: outbox.ToBroker(publisher)})
//	err = relay.Run(ctx)
//
// Inside an inbox handler, write in the handler's transaction (the message
// then commits with the claim, at most once) with an ID from DerivedID, so
// that the incoming message always yields the same ID, which the next inbox
// recognizes should this consumer process the message again (after its
// inbox row was pruned, or a replay):
//
//	ob.Write(ctx, tx, &outbox.Message{ID: outbox.DerivedID("billing", msg.ID, "captured"), Destination: "payments.captured", Payload: p})
//
// The table is the inbox's migrations' (run inbox.Migrate). A relay claims
// due rows with a lease (FOR UPDATE SKIP LOCKED on PostgreSQL and MySQL 8 /
// MariaDB 10.6+; SQLite's single writer), so several relays share the
// work and a dead relay's rows come back after its lease. It wakes on
// PostgreSQL's NOTIFY, which fires at COMMIT, and polls otherwise.
package outbox
