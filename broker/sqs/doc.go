// Package sqs connects the inbox's consumer runtime to Amazon SQS, on the
// AWS SDK for Go v2.
//
// The SDK's package is github.com/aws/aws-sdk-go-v2/service/sqs. The
// caller configures its client, with region, credentials and endpoint, and
// owns it.
//
//	cl := sqs.NewFromConfig(awsCfg) // the SDK's package, not this one
//	src, err := inboxsqs.NewSource(ctx, &inboxsqs.Config{Client: cl, Queue: "payments"})
//	defer src.Close()
//	err = inbox.Consume(ctx, ib, src, handler, &inbox.ConsumerConfig{Workers: 8})
//
// # Receiving
//
// The [Source] long-polls for up to ten messages a receive, for
// [Config.WaitTime]. It asks for its own visibility timeout,
// [Config.VisibilityTimeout]. It hands the messages to the workers one at a
// time, and the next receive waits until they are taken. It is a
// broker.LeaseSource. The consumer runtime extends the visibility of a
// message still being handled every third of the timeout, with
// ChangeMessageVisibility. SQS caps a visibility timeout at 12 hours from
// the receive, so a handler may not take longer.
//
// A message is deleted only by Ack, after its outcome committed. Deletes
// due at the same time go out together, in a DeleteMessageBatch of ten at
// most. A handler may run longer than the timeout without a lease. Its
// receipt handle's visibility then runs out. The delete fails, or SQS
// accepts it without deleting. Either way the commit stands, the consumer
// runtime logs the failed ack, and the message comes back as a duplicate.
// Nack makes the message visible again after its delay, in whole seconds.
// A delay of 0 makes it visible at once.
// [Source.Close] makes the messages received but not handed out visible
// again at once.
//
// A receive that fails is retried with a backoff, from [Config.RetryDelay]
// doubling to [Config.RetryMaxDelay]. Two errors are not retried. A queue
// that does not exist ends Next, and so Consume, with [ErrQueueNotFound].
// Credentials or permissions that SQS refuses end it with
// [ErrAccessDenied].
//
// # Messages
//
// SQS gives a message a new MessageId on every send. It thus cannot
// recognise a message sent twice. The message's ID is therefore a message
// attribute, [Config.IDAttribute], which [Publisher] sets. Its type is
// another, [Config.TypeAttribute]. A message without the ID attribute is
// dead-lettered with its body and attributes, then deleted.
// [Config.IDFromMessageID] gives it SQS's MessageId instead.
//
// Message.Headers holds every message attribute as a string, the ID and
// type attributes included. Binary attributes are given as their bytes.
// Message.Deliveries is SQS's ApproximateReceiveCount. Message.Subject is
// the queue's name. Message.Key is the message group of a FIFO queue's
// message, and empty on a standard queue.
//
// SQS carries only text in a body and in String attributes, none of them
// empty. It takes ten attributes at most. [Publisher.Publish] tells how the
// Publisher carries any payload and header. [BodyEncodingAttribute] tells
// what consumers in other languages must decode.
//
// # FIFO queues
//
// A FIFO queue has a name ending in ".fifo". On one, the Publisher sets the
// message group from Message.Key, or [PublisherConfig.MessageGroup]. It
// sets the deduplication ID from the message ID. SQS hands out the
// messages of one group one at a time, in order. A message waiting for its
// retry after a Nack with a delay holds back the rest of its group until
// then.
package sqs
