// Package rabbitmq connects the inbox's consumer runtime to RabbitMQ
// (AMQP 0-9-1, on github.com/rabbitmq/amqp091-go).
//
//	src, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: url, Queue: "billing", Prefetch: 16})
//	defer src.Close()
//	err = inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: 8})
//
// A producer publishes with Publisher (persistent, mandatory, waiting for
// the publisher confirm) after declaring the queue with Declare, or once a
// Source has declared it.
//
// # Messages
//
// A message's ID is its AMQP message_id property, which Publisher sets
// (and requires); its type is the AMQP type property; its headers are the
// producer's AMQP headers rendered as strings, without RabbitMQ's own or
// the adapter's ([OwnHeader]: x-death, x-delivery-count...), which
// Publisher never sends either. RabbitMQ does not count deliveries, it
// only flags a redelivery: Message.Deliveries is the quorum queue's
// x-delivery-count header plus one when the header is present (a
// redelivery), else 0 (unknown). The inbox counts attempts itself and
// does not depend on it.
//
// A message's Subject is the routing key it was published with. A delayed
// retry keeps it in the x-inbox-routing-key header, which a producer
// cannot forge. The Source publishes each delayed copy with its own
// login's user name as user_id. RabbitMQ refuses a user_id other than the
// publisher's login, unless that user has the impersonator tag. The
// header counts only when user_id is the Source's user and x-death names
// one of its delay queues. So give producers users of their own: a
// producer logged in as the consumer's user can fake a retry's routing
// key.
//
// A Source whose user name is unknown trusts no such header: its retries
// arrive with the queue's name as Subject, and NewSource logs a warning.
// That happens with SASL EXTERNAL (a certificate), and with an auth
// backend that renames the login (OAuth 2). The Source checks its
// user_id once per connection. Copies that an older version left in the
// delay queues, without user_id, also arrive with the queue's name as
// Subject.
//
// # Acknowledgements
//
// Consumption uses manual acks with a prefetch (QoS) of Config.Prefetch:
// set it to at least the consumer runtime's Workers, or workers wait
// idle. An AMQP ack is not confirmed by the broker: a lost ack means a
// redelivery, which the inbox skips as a duplicate. Deliveries belong to
// the channel that delivered them: after a reconnect, an Ack or Nack of a
// delivery from the old channel returns an error (ErrChannelClosed), and
// RabbitMQ redelivers the message on the new channel. [Source.Close]
// cancels the consumer and waits for the broker's reply before it closes
// the connection: a quorum queue's channel drops the acks it still holds
// back when it closes, and those messages would come back.
//
// # Retries with a delay
//
// AMQP cannot redeliver a message later. Nack(ctx, delay) therefore
// publishes a copy of the message (same message_id, body, type, headers
// and properties) to a delay queue, waits for the publisher confirm, and
// only then acks the original: a crash in between leaves a duplicate
// (skipped by the inbox), never a loss. A delay queue, named
// "<queue>.retry.<bucket>" (for example "billing.retry.2s"), has no
// consumer; its queue-wide message TTL dead-letters each message, when it
// expires, through the default exchange back to the main queue. The main
// queue is never blocked by a waiting retry.
//
// Delays are rounded up to the next of Config.DelayBuckets, one delay
// queue per bucket, declared when first used: a retry never comes early,
// and with the default 1-2-5 ladder at most 2.5 times late. One queue per
// bucket, with a queue-wide TTL, rather than one queue with per-message
// expiration, because RabbitMQ expires messages only at the head of a
// queue: a 5-minute retry would hold back a 1-second retry behind it.
// Delays longer than the largest bucket wait the largest bucket.
//
// Nack(ctx, 0) requeues the message at once (basic.nack with requeue).
// If the delayed copy cannot be published (a missing delay queue, a
// negative confirm), Nack tries again with backoff, holding the delivery.
// A quorum delay queue that another Source is still declaring refuses
// publishes for a few milliseconds. When the delay is over (at most a
// minute), or ctx ends, Nack requeues the message instead and logs why.
// The retry then comes early, but never at once, and the inbox still
// counts it (it dead-letters at MaxAttempts).
//
// Term(ctx, reason) rejects the message without requeue: RabbitMQ routes
// it to the queue's dead-letter exchange (Config.DeadLetterExchange) or
// drops it. AMQP's reject carries no reason; the Source logs it.
//
// # Queues
//
// NewSource declares the queue, durable, as a quorum queue by default
// (Config.QueueType), and the delay queues as it needs them, of the same
// type. Quorum delay queues dead-letter at-least-once
// (x-dead-letter-strategy at-least-once, which needs x-overflow
// reject-publish): a message expiring from a delay queue is not lost on
// the way back. Classic queues dead-letter at-most-once: a node failure at
// that moment can lose the retry. With Config.NoDeclare the queues must
// exist (a missing delay queue makes Nack hold and requeue, see above).
//
// Quorum queues (RabbitMQ 4.0 and later) drop or dead-letter a message
// after 20 returned deliveries (x-delivery-limit; in 3.x there is no
// default limit). Delayed retries do not count, since each is a new
// message, but requeues do: Nack(ctx, 0), and deliveries returned when a
// consumer's channel closed before its ack. Set Config.DeadLetterExchange
// so that such a message is kept rather than dropped, or raise
// Config.DeliveryLimit.
//
// # consumer_timeout
//
// RabbitMQ closes a channel whose delivery stays unacked longer than its
// consumer_timeout (30 minutes by default), and requeues its unacked
// deliveries. The Source then reconnects, but the slow message is
// redelivered and a handler that always takes that long never finishes.
// Keep handlers, plus the time a delivery waits in the prefetch buffer,
// well below it, or raise consumer_timeout in rabbitmq.conf (or with the
// x-consumer-timeout queue argument or policy, RabbitMQ 3.12 and later).
// AMQP has no InProgress: Delivery.InProgress does nothing and returns
// nil, and Source is not a broker.LeaseSource.
//
// # Reconnecting
//
// The Source owns its connection. When the connection or the consuming
// channel is lost (a broker restart, rabbitmqctl close_connection,
// consumer_timeout, a network failure), it reconnects with exponential
// backoff (Config.ReconnectDelay up to Config.ReconnectMaxDelay) and
// resumes consuming; Next keeps blocking meanwhile. Next returns a
// terminal error only after Close (broker.ErrSourceClosed), when the queue
// is gone (ErrQueueNotFound: RabbitMQ cancels the consumer, and the Source
// checks the queue before consuming again; it never re-creates a deleted
// queue), or after Config.MaxReconnects failed attempts in a row
// (ErrReconnectFailed; default never). amqp091-go's own automatic
// recovery (amqp.Config.Recovery) is not used: it would re-declare a
// deleted queue.
//
// The connection carries Config.ConnectionName as its client-provided name
// (connection_name), which the management UI and rabbitmqctl
// list_connections show.
package rabbitmq
