package sqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/latch"
)

// Source is a broker.LeaseSource on an SQS queue.
type Source struct {
	cfg   Config
	url   string // the queue's URL
	name  string // the queue's name: Message.Subject
	fifo  bool
	ready chan *delivery // received messages, for Next
	del   deleter

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
	failed *latch.Error // the terminal error
}

var _ broker.LeaseSource = (*Source)(nil)

// NewSource resolves the queue and starts receiving. A name is resolved
// with GetQueueUrl, which fails for a queue that does not exist.
func NewSource(ctx context.Context, cfg *Config) (*Source, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	queueURL := c.Queue
	if !isURL(queueURL) {
		out, err := c.Client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(c.Queue)})
		if err != nil {
			return nil, fmt.Errorf("sqs: queue %q: %w", c.Queue, classify(err))
		}
		queueURL = aws.ToString(out.QueueUrl)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Source{
		cfg: c, url: queueURL, name: queueName(queueURL), fifo: fifo(queueURL),
		ready: make(chan *delivery), ctx: sctx, cancel: cancel, failed: latch.New(),
	}
	s.del.s = s
	s.wg.Add(1)
	go s.receive()
	return s, nil
}

// receive receives messages and hands them to Next one at a time, so that
// at most one receive's worth waits in the Source, until Close or a
// terminal error.
func (s *Source) receive() {
	defer s.wg.Done()
	in := &awssqs.ReceiveMessageInput{
		QueueUrl:              aws.String(s.url),
		MaxNumberOfMessages:   int32(s.cfg.MaxMessages),
		WaitTimeSeconds:       int32(s.cfg.WaitTime / time.Second),
		VisibilityTimeout:     int32(s.cfg.VisibilityTimeout / time.Second),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameMessageGroupId,
		},
	}
	delay, idle := s.cfg.RetryDelay, s.cfg.EmptyDelay
	for s.ctx.Err() == nil {
		started := time.Now()
		out, closed, err := s.receiveOnce(in)
		if closed {
			return
		}
		if err != nil {
			err = classify(err)
			if terminal(err) {
				s.failed.Set(fmt.Errorf("sqs: receiving from %s: %w", s.name, err))
				return
			}
			s.cfg.Logger.Warn("sqs: receive failed; retrying", "queue", s.name, "delay", delay, "error", err)
			if !s.sleep(jitter(delay)) {
				return
			}
			delay = min(2*delay, s.cfg.RetryMaxDelay)
			continue
		}
		delay = s.cfg.RetryDelay
		received := time.Now()
		if len(out.Messages) == 0 {
			// An empty long poll that waited its time needs no pause;
			// an earlier empty answer (short polling) does, or the loop
			// spins on billed requests.
			if s.cfg.WaitTime > 0 && received.Sub(started) >= s.cfg.WaitTime {
				continue
			}
			if !s.sleep(jitter(min(idle, s.cfg.EmptyMaxDelay))) {
				return
			}
			idle = min(2*idle, s.cfg.EmptyMaxDelay)
			continue
		}
		idle = s.cfg.EmptyDelay
		for i, m := range out.Messages {
			select {
			case s.ready <- s.delivery(m, received):
			case <-s.ctx.Done():
				s.release(out.Messages[i:])
				return
			case <-s.failed.Done():
				return
			}
		}
	}
}

// receiveGrace bounds a receive beyond its long poll: the client may have
// no timeout of its own.
const receiveGrace = 30 * time.Second

// receiveOnce receives once; closed reports that the Source closed meanwhile.
// Close does not cancel the receive: SQS (and the emulator) may already
// have made its messages invisible, and a canceled request loses them
// until their visibility timeout. The receive finishes on its own, and
// what it brings is released.
func (s *Source) receiveOnce(in *awssqs.ReceiveMessageInput) (out *awssqs.ReceiveMessageOutput, closed bool, err error) {
	type result struct {
		out *awssqs.ReceiveMessageOutput
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.WaitTime+receiveGrace)
		defer cancel()
		out, err := s.cfg.Client.ReceiveMessage(ctx, in)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if s.ctx.Err() == nil {
			return r.out, false, r.err
		}
		if r.err == nil {
			s.release(r.out.Messages)
		}
		return nil, true, nil
	case <-s.ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				s.release(r.out.Messages)
			}
		}()
		return nil, true, nil
	}
}

// sleep waits d unless the Source closes first.
func (s *Source) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// jitter spreads d by ±20 %.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// release makes messages received but never handed out visible again at
// once, instead of after their visibility timeout.
func (s *Source) release(msgs []types.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range msgs {
		_, err := s.cfg.Client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(s.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
		})
		if err != nil {
			s.cfg.Logger.Info("sqs: releasing a message at Close failed; it comes back after its visibility timeout",
				"queue", s.name, "message_id", aws.ToString(m.MessageId), "error", err)
		}
	}
}

// delivery makes the delivery of m, received at received.
func (s *Source) delivery(m types.Message, received time.Time) *delivery {
	msg := &broker.Message{Subject: s.name, System: broker.SystemSQS}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		msg.Time = time.UnixMilli(ms)
	}
	var encoding string
	if len(m.MessageAttributes) > 0 {
		msg.Headers = make(map[string]string, len(m.MessageAttributes))
		for k, a := range m.MessageAttributes {
			v := attributeString(a)
			switch k {
			case BodyEncodingAttribute:
				encoding = v
				continue // ours: not the producer's header
			case s.cfg.IDAttribute:
				msg.ID = v
			case s.cfg.TypeAttribute:
				msg.Type = v
			}
			msg.Headers[k] = v
		}
	}
	if msg.ID == "" && s.cfg.IDFromMessageID {
		msg.ID = aws.ToString(m.MessageId)
	}
	payload, err := decodeBody(aws.ToString(m.Body), encoding)
	if err != nil {
		// Dead-lettered as having no ID, with the body as it came and
		// the encoding among its headers, rather than handled as garbage.
		payload, msg.ID = []byte(aws.ToString(m.Body)), ""
		if msg.Headers == nil {
			msg.Headers = map[string]string{}
		}
		msg.Headers[BodyEncodingAttribute] = encoding
		s.cfg.Logger.Warn("sqs: undecodable body; the message will be dead-lettered", "queue", s.name,
			"message_id", aws.ToString(m.MessageId), "error", err)
	}
	msg.Payload = payload
	if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
		msg.Deliveries = n
	}
	if s.fifo {
		msg.Key = m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
	}
	return &delivery{s: s, handle: aws.ToString(m.ReceiptHandle), received: received, msg: msg}
}

// Next returns the next delivery.
func (s *Source) Next(ctx context.Context) (broker.Delivery, error) {
	select {
	case d := <-s.ready:
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, broker.ErrSourceClosed
	case <-s.failed.Done():
		return nil, s.failed.Err()
	}
}

// LeaseInterval is a third of the visibility timeout.
func (s *Source) LeaseInterval() time.Duration { return s.cfg.VisibilityTimeout / 3 }

// Close stops receiving. It makes the messages received but not yet handed
// out visible again. So it does with those of a receive in flight once that
// ends, in the background. Close does not wait for it.
//
// Deliveries handed out and not acked come back after their visibility
// timeout. They can still be acked or nacked after Close, since the client
// is the caller's. SQS then honours that.
func (s *Source) Close() error {
	s.closed.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

var (
	_ broker.RedeliveryWindower = (*Source)(nil)
	_ broker.Prefetcher         = (*Source)(nil)
)

// Prefetch returns [Config.MaxMessages]. One receive's worth waits in the
// Source.
func (s *Source) Prefetch() int { return s.cfg.MaxMessages }

// RedeliveryWindow returns the queue's MessageRetentionPeriod. SQS keeps a
// message 4 days by default, and 14 at most.
func (s *Source) RedeliveryWindow(ctx context.Context) (time.Duration, error) {
	out, err := s.cfg.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(s.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMessageRetentionPeriod}})
	if err != nil {
		return 0, fmt.Errorf("sqs: queue %s: %w", s.name, classify(err))
	}
	v, ok := out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]
	secs, err := strconv.Atoi(v)
	if !ok || err != nil || secs <= 0 {
		return 0, fmt.Errorf("sqs: queue %s: MessageRetentionPeriod %q", s.name, v)
	}
	return time.Duration(secs) * time.Second, nil
}
