// Package sqs connects the inbox's consumer runtime to Amazon SQS, on the
// AWS SDK for Go v2 (github.com/aws/aws-sdk-go-v2/service/sqs). The caller
// configures the client (region, credentials, endpoint) and owns it:
//
//	cl := sqs.NewFromConfig(awsCfg) // the SDK's package, not this one
//	src, err := inboxsqs.NewSource(ctx, &inboxsqs.Config{Client: cl, Queue: "payments"})
//	defer src.Close()
//	err = inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: 8})
//
// # Receiving
//
// The Source long-polls (Config.WaitTime, 20 s by default) for up to ten
// messages a receive, asking for its own visibility timeout
// (Config.VisibilityTimeout, 30 s by default) and handing the messages to
// the workers one at a time; the next receive waits until they are taken.
// It is a broker.LeaseSource: the consumer runtime extends the visibility
// of a message still being handled every third of the timeout
// (ChangeMessageVisibility). SQS caps a visibility timeout at 12 hours
// from the receive, so a handler may not take longer.
//
// A message is deleted only when Ack is called, after its outcome
// committed; deletes due at the same time go out together
// (DeleteMessageBatch, ten at most). A delete with a receipt handle whose
// visibility ran out (a handler longer than the timeout without a lease)
// fails, or SQS accepts it without deleting: either way the commit stands,
// the consumer runtime logs the failed ack, and the message comes back as
// a duplicate. Nack makes the message visible again after its delay
// (ChangeMessageVisibility, whole seconds; 0: at once). Close makes the
// messages received but not handed out visible again at once.
//
// A receive that fails is retried with a backoff (Config.RetryDelay
// doubling to Config.RetryMaxDelay), except for a queue that does not
// exist (ErrQueueNotFound) and credentials or permissions SQS refuses
// (ErrAccessDenied): those end Next, and so Consume, with the error.
//
// # Messages
//
// SQS gives a message a new MessageId on every send, so it cannot
// recognise a message sent twice. The message's ID is therefore a message
// attribute (Config.IDAttribute, "Inbox-Id" by default), which Publisher
// sets; its type another (Config.TypeAttribute, "Inbox-Type"). A message
// without the ID attribute is dead-lettered with its body and attributes,
// then deleted, unless Config.IDFromMessageID is set: it then takes SQS's
// MessageId, which identifies the redeliveries of one send only.
//
// Message.Headers holds every message attribute as a string (Binary ones
// as their bytes), the ID and type attributes included; Message.Deliveries
// is SQS's ApproximateReceiveCount; Message.Subject is the queue's name;
// Message.Key is the message group of a FIFO queue's message, empty on a
// standard queue.
//
// SQS carries only text in a body and in String attributes, none of them
// empty, and ten attributes at most: see Publisher.Publish for how the
// Publisher carries any payload and header, and BodyEncodingAttribute for
// what consumers in other languages must decode.
//
// # FIFO queues
//
// On a FIFO queue (a name ending in ".fifo") the Publisher sets the message
// group from Message.Key (or PublisherConfig.MessageGroup) and the
// deduplication ID from the message ID. SQS hands out the messages of one
// group one at a time, in order: a message waiting for its retry (a Nack
// with a delay) holds back the rest of its group until then.
package sqs
