// Package rabbitmq connects the inbox's consumer runtime to RabbitMQ.
//
// It speaks AMQP 0-9-1, on github.com/rabbitmq/amqp091-go.
//
//	src, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: url, Queue: "billing", Prefetch: 16})
//	defer src.Close()
//	err = inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: 8})
//
// A producer publishes with [Publisher]. Its messages are persistent and
// mandatory, and it waits for the publisher confirm. Declare the queue
// first with [Declare], or let a Source declare it.
//
// # Messages
//
// A message's ID is its AMQP message_id property, which Publisher sets and
// requires. Its type is the AMQP type property. Its headers are the
// producer's AMQP headers rendered as strings. RabbitMQ's own headers and
// the adapter's are left out, as [OwnHeader] tells, such as x-death and
// x-delivery-count. Publisher never sends them either.
//
// RabbitMQ does not count deliveries. It only flags a redelivery. On a
// quorum queue, Message.Deliveries is the x-delivery-count header plus one
// when the header is present, on a redelivery. It is 0 otherwise, for
// unknown. The inbox counts attempts itself and does not depend on it.
//
// A message's Subject is the routing key it was published with. A delayed
// retry keeps it in the x-inbox-routing-key header, which a producer
// cannot forge. The Source publishes each delayed copy with its own login's
// user name as user_id. RabbitMQ refuses a user_id other than the
// publisher's login, unless that user has the impersonator tag. The header
// counts only when user_id is the Source's user and x-death names one of
// its delay queues. So give producers users of their own. A producer logged
// in as the consumer's user can fake a retry's routing key.
//
// A Source whose user name is unknown trusts no such header. Its retries
// arrive with the queue's name as Subject, and NewSource logs a warning.
// That happens with SASL EXTERNAL, a certificate, and with an auth backend
// that renames the login, such as OAuth 2. The Source checks its user_id
// once per connection. Copies that an older version left in the delay
// queues, without user_id, also arrive with the queue's name as Subject.
//
// # Acknowledgements
//
// Consumption uses manual acks with a QoS prefetch of [Config.Prefetch].
// Set it to at least the consumer runtime's Workers, or workers wait idle.
// The broker does not confirm an AMQP ack. A lost ack means a redelivery,
// which the inbox skips as a duplicate.
//
// Deliveries belong to the channel that delivered them. After a reconnect,
// an Ack or Nack of a delivery from the old channel returns
// [ErrChannelClosed]. RabbitMQ redelivers the message on the new channel.
// [Source.Close] cancels the consumer and waits for the broker's reply
// before it closes the connection. A quorum queue's channel drops the acks
// it still holds back when it closes. Those messages would come back.
//
// # Retries with a delay
//
// AMQP cannot redeliver a message later. Nack(ctx, delay) therefore
// publishes a copy of the message to a delay queue. The copy has the same
// message_id, body, type, headers and properties. Nack waits for the
// publisher confirm, and only then acks the original. A crash in between
// leaves a duplicate, which the inbox skips, and never a loss.
//
// A delay queue is named "<queue>.retry.<bucket>", such as
// "billing.retry.2s", as [DelayQueue] tells. It has no consumer. Its
// queue-wide message TTL dead-letters each message when it expires. The
// message goes through the default exchange back to the main queue. A
// waiting retry never blocks the main queue.
//
// Delays are rounded up to the next of [Config.DelayBuckets]. There is one
// delay queue per bucket, declared when first used. A retry thus never
// comes early. With the default 1-2-5 ladder, it is at most 2.5 times late.
// Each bucket has a queue of its own with a queue-wide TTL. RabbitMQ
// expires messages only at the head of a queue. In one queue with
// per-message expiration, a 5-minute retry would hold back a 1-second
// retry behind it. Delays longer than the largest bucket wait the largest
// bucket.
//
// Nack(ctx, 0) requeues the message at once, with basic.nack and requeue.
// The delayed copy may fail to publish, as with a missing delay queue or a
// negative confirm. Nack then tries again with backoff, holding the
// delivery. A quorum delay queue that another Source is still declaring
// refuses publishes for a few milliseconds. When the delay is over, or
// ctx ends, Nack requeues the message instead and logs why. It holds it a
// minute at most. The retry then comes early, but never at once. The inbox
// still counts it, and dead-letters it at MaxAttempts.
//
// Term(ctx, reason) rejects the message without requeue. RabbitMQ routes
// it to the queue's dead-letter exchange, [Config.DeadLetterExchange], or
// drops it. AMQP's reject carries no reason, so the Source logs it.
//
// # Queues
//
// NewSource declares the queue as durable. It is a quorum queue by
// default, as [Config.QueueType] tells. The Source declares the delay
// queues as it needs them, of the same type.
//
// Quorum delay queues dead-letter at least once. They use
// x-dead-letter-strategy at-least-once, which needs x-overflow
// reject-publish. A message expiring from a delay queue is thus not lost on
// the way back. Classic queues dead-letter at most once. A node failure at
// that moment can lose the retry. With [Config.NoDeclare], the queues must
// exist. A missing delay queue then makes Nack hold and requeue, as told
// above.
//
// Quorum queues on RabbitMQ 4.0 and later drop or dead-letter a message
// after 20 returned deliveries, its x-delivery-limit. RabbitMQ 3.x has no
// default limit. Delayed retries do not count, since each is a new
// message. Requeues do count. They are Nack(ctx, 0), and deliveries
// returned when a consumer's channel closed before its ack. Set
// [Config.DeadLetterExchange] so that such a message is kept rather than
// dropped, or raise [Config.DeliveryLimit].
//
// # consumer_timeout
//
// RabbitMQ closes a channel whose delivery stays unacked longer than its
// consumer_timeout, 30 minutes by default. It requeues the channel's
// unacked deliveries. The Source then reconnects, but the slow message is
// redelivered. A handler that always takes that long never finishes. Keep
// handlers well below it, plus the time a delivery waits in the prefetch
// buffer. Or raise consumer_timeout in rabbitmq.conf. On RabbitMQ 3.12 and
// later, the x-consumer-timeout queue argument or policy also sets it.
// AMQP has no InProgress. Delivery.InProgress does nothing and returns nil,
// and Source is not a broker.LeaseSource.
//
// # Reconnecting
//
// The Source owns its connection. It may lose the connection or the
// consuming channel, as in a broker restart, rabbitmqctl close_connection,
// consumer_timeout or a network failure. It then reconnects with
// exponential backoff, from [Config.ReconnectDelay] up to
// [Config.ReconnectMaxDelay], and resumes consuming. Next keeps blocking
// meanwhile. Next returns a terminal error only in three cases.
//   - After Close, it returns broker.ErrSourceClosed.
//   - When the queue is gone, it returns [ErrQueueNotFound]. RabbitMQ
//     cancels the consumer, and the Source checks the queue before
//     consuming again. It never re-creates a deleted queue.
//   - After [Config.MaxReconnects] failed attempts in a row, it returns
//     [ErrReconnectFailed]. By default it never gives up.
//
// # Clusters
//
// Give every node of a cluster in [Config.URLs] and [PublisherConfig.URLs].
// A Source or a Publisher connects to the first URL that answers. After
// losing its connection, it tries the next URL first and the lost node's
// last. So a consumer whose node died moves to a live node by itself.
// Give each process the URLs in another order to spread the connections.
//
// Declare quorum queues, the default, so that a queue outlives a node. A
// node that dies holding a consumer's unacked deliveries returns them to
// the queue. Another consumer receives them, and the inbox skips those
// whose processing committed. The delay queues are quorum queues too.
//
// A channel's first publish to a quorum queue binds it to the leader that
// the queue's record names. A channel opened just after the leader's node
// died is refused, with negative confirms, until that node returns. After
// a negative confirm, Publisher and Nack therefore publish on a new
// channel, which finds the new leader.
//
// amqp091-go's own automatic recovery, amqp.Config.Recovery, is not used.
// It would re-declare a deleted queue.
//
// The connection carries [Config.ConnectionName] as its client-provided
// name, connection_name. The management UI and rabbitmqctl
// list_connections show it.
package rabbitmq
