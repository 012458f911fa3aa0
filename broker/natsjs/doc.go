// Package natsjs connects the inbox's consumer runtime to NATS JetStream,
// with a durable pull consumer of nats.go's jetstream package.
//
//	src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: "PAYMENTS", Durable: "billing"})
//	err = inbox.Consume(ctx, ib, src, handler, nil)
//
// A message's ID is its Nats-Msg-Id header, which [Publisher] sets.
// JetStream also uses it to drop duplicate publishes within the stream's
// duplicate window. Retries use NakWithDelay. Acks are double acks, which
// wait for the server's confirmation. Message.Headers holds the producer's
// headers only. NATS's own are left out, such as Nats-Rollup, as
// [OwnHeader] tells. A dead letter replayed thus does not act on the
// stream.
package natsjs
