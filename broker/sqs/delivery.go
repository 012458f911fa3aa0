package sqs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/inboxkit/inbox/broker"
)

type delivery struct {
	s        *Source
	handle   string    // the receipt handle of this receive
	received time.Time // when it was received: SQS caps visibility 12 h from then
	msg      *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack deletes the message, in a batch with other acks due at the same
// time. A receipt handle whose visibility ran out (the message may have
// been received again) is an error, or is accepted by SQS without deleting
// anything: either way the message comes back, and the inbox skips it as a
// duplicate.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.s.del.delete(ctx, d.handle); err != nil {
		return fmt.Errorf("sqs: delete %q from %s: %w", d.msg.ID, d.s.name, err)
	}
	return nil
}

// Nack makes the message visible again after delay, rounded up to whole
// seconds (0: at once). SQS counts a visibility timeout from the receive
// and caps it at 12 h: a longer delay is cut to what is left of that.
func (d *delivery) Nack(ctx context.Context, delay time.Duration) error {
	if err := d.visibility(ctx, delay); err != nil {
		return fmt.Errorf("sqs: nack %q on %s: %w", d.msg.ID, d.s.name, err)
	}
	return nil
}

// InProgress starts the visibility timeout again.
func (d *delivery) InProgress(ctx context.Context) error {
	if err := d.visibility(ctx, d.s.cfg.VisibilityTimeout); err != nil {
		return fmt.Errorf("sqs: extend the visibility of %q on %s: %w", d.msg.ID, d.s.name, err)
	}
	return nil
}

// Term deletes the message: SQS has no way to reject one for good other
// than a queue's redrive policy, which counts receives. reason is logged.
func (d *delivery) Term(ctx context.Context, reason string) error {
	d.s.cfg.Logger.Warn("sqs: message terminated (deleted)", "queue", d.s.name, "id", d.msg.ID, "reason", reason)
	return d.Ack(ctx)
}

func (d *delivery) visibility(ctx context.Context, after time.Duration) error {
	after = min(ceilSeconds(max(after, 0)), maxVisibility-ceilSeconds(time.Since(d.received)))
	_, err := d.s.cfg.Client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(d.s.url), ReceiptHandle: aws.String(d.handle), VisibilityTimeout: int32(max(after, 0) / time.Second),
	})
	return err
}

// deleter batches deletes: an Ack queues its receipt handle, and up to
// flushers goroutines, started on demand, send what is queued, up to 10 a
// request. Under load acks gather while a request is in flight; alone,
// an ack goes out at once.
type deleter struct {
	s       *Source
	mu      sync.Mutex
	queue   []*deleteReq
	running int
}

// flushers bounds the delete requests in flight at once.
const flushers = 2

// flushTimeout bounds one delete request, which serves several Acks with
// contexts of their own.
const flushTimeout = 30 * time.Second

type deleteReq struct {
	handle string
	done   chan error
}

func (dl *deleter) delete(ctx context.Context, handle string) error {
	r := &deleteReq{handle: handle, done: make(chan error, 1)}
	dl.mu.Lock()
	dl.queue = append(dl.queue, r)
	if dl.running < flushers {
		dl.running++
		go dl.run()
	}
	dl.mu.Unlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends queued deletes until none is left.
func (dl *deleter) run() {
	for {
		dl.mu.Lock()
		if len(dl.queue) == 0 {
			dl.running--
			dl.mu.Unlock()
			return
		}
		n := min(len(dl.queue), maxMessages)
		batch := make([]*deleteReq, n)
		copy(batch, dl.queue)
		dl.queue = append(dl.queue[:0], dl.queue[n:]...)
		dl.mu.Unlock()
		dl.send(batch)
	}
}

// send deletes batch, one request, and answers each Ack.
func (dl *deleter) send(batch []*deleteReq) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	cl, queue := dl.s.cfg.Client, aws.String(dl.s.url)
	if len(batch) == 1 {
		_, err := cl.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: queue, ReceiptHandle: aws.String(batch[0].handle)})
		batch[0].done <- classify(err)
		return
	}
	in := &awssqs.DeleteMessageBatchInput{QueueUrl: queue, Entries: make([]types.DeleteMessageBatchRequestEntry, len(batch))}
	for i, r := range batch {
		in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.handle)}
	}
	out, err := cl.DeleteMessageBatch(ctx, in)
	if err != nil {
		err = classify(err)
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	failed := make(map[string]error, len(out.Failed))
	for _, f := range out.Failed {
		failed[aws.ToString(f.Id)] = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
	}
	// An entry that SQS reports in neither list did not fail.
	for i, r := range batch {
		r.done <- failed[strconv.Itoa(i)]
	}
}
