package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
)

// errUnavailable is wrapped by the error of a broker or database that
// does not answer: the smoke test skips on it.
var errUnavailable = errors.New("service unavailable")

// brokerKind makes fresh queues (streams) on one broker.
type brokerKind interface {
	name() string
	newQueue(ctx context.Context) (queue, error)
	close()
}

// queue is one measurement's queue or stream.
type queue interface {
	// publish publishes w's messages, all of them confirmed on return.
	publish(ctx context.Context, w *ledger.Workload) error
	// source opens a consumer on the queue, with -prefetch.
	source(ctx context.Context) (broker.Source, error)
	// left counts the messages neither acked nor dead: ready, unacked,
	// or waiting in a delay queue. Call it after the source closed.
	left(ctx context.Context) (int64, error)
	drop(ctx context.Context)
}

// watermillUUIDHeader is the header in which Watermill's AMQP marshaler
// looks for a message's UUID. Every RabbitMQ message carries it, so that
// every mode consumes the same messages.
const watermillUUIDHeader = "_watermill_message_uuid"

// rabbitKind opens quorum queues on RabbitMQ.
type rabbitKind struct {
	o     *options
	admin *amqp.Connection // passive declares and deletes
	pub   *rabbitmq.Publisher
}

func openRabbit(ctx context.Context, o *options) (*rabbitKind, error) {
	admin, err := amqp.DialConfig(o.amqpURL, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second),
		Properties: amqp.Table{"connection_name": "consumebench admin"}})
	if err != nil {
		return nil, fmt.Errorf("%w: RabbitMQ at %s: %w", errUnavailable, o.amqpURL, err)
	}
	pub, err := rabbitmq.NewPublisher(ctx, &rabbitmq.PublisherConfig{URL: o.amqpURL, ConnectionName: "consumebench publisher"})
	if err != nil {
		_ = admin.Close()
		return nil, err
	}
	return &rabbitKind{o: o, admin: admin, pub: pub}, nil
}

func (k *rabbitKind) name() string { return "rabbitmq" }

func (k *rabbitKind) close() {
	_ = k.pub.Close()
	_ = k.admin.Close()
}

func (k *rabbitKind) newQueue(ctx context.Context) (queue, error) {
	name := ledger.RandomName("consumebench")
	cfg := rabbitmq.Config{URL: k.o.amqpURL, Queue: name, QueueType: rabbitmq.Quorum, Prefetch: k.o.prefetch,
		ConnectionName: "consumebench " + name, Logger: k.o.logger}
	if err := rabbitmq.Declare(ctx, &cfg); err != nil {
		return nil, err
	}
	return &rabbitQueue{k: k, cfg: cfg}, nil
}

type rabbitQueue struct {
	k   *rabbitKind
	cfg rabbitmq.Config
}

func (q *rabbitQueue) publish(ctx context.Context, w *ledger.Workload) error {
	return w.Publish(ctx, func(ctx context.Context, i int) error {
		return q.k.pub.Publish(ctx, &broker.Message{ID: w.IDs[i], Subject: q.cfg.Queue, Payload: w.Payload(i),
			Headers: map[string]string{watermillUUIDHeader: w.IDs[i]}})
	})
}

func (q *rabbitQueue) source(ctx context.Context) (broker.Source, error) {
	cfg := q.cfg
	return rabbitmq.NewSource(ctx, &cfg)
}

// queues are the queue and its delay queues, where a retry waits.
func (q *rabbitQueue) queues() []string {
	names := []string{q.cfg.Queue}
	for _, b := range rabbitmq.DefaultDelayBuckets {
		names = append(names, rabbitmq.DelayQueue(q.cfg.Queue, b))
	}
	return names
}

// left sums the messages of the queue and its delay queues. A closed
// consumer's unacked deliveries return to the queue as ready ones
// (queue.declare counts only those), so it reads until two counts 300 ms
// apart agree.
func (q *rabbitQueue) left(ctx context.Context) (int64, error) {
	prev := int64(-1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := q.count()
		if err != nil {
			return 0, err
		}
		if n == prev || time.Now().After(deadline) {
			return n, nil
		}
		prev = n
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

func (q *rabbitQueue) count() (int64, error) {
	var n int64
	for _, name := range q.queues() {
		ch, err := q.k.admin.Channel()
		if err != nil {
			return 0, err
		}
		info, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case errors.As(err, &ae) && ae.Code == amqp.NotFound: // a delay queue never used; the channel is closed
			continue
		case err != nil:
			return 0, fmt.Errorf("rabbitmq: inspect %s: %w", name, err)
		}
		n += int64(info.Messages)
		_ = ch.Close()
	}
	return n, nil
}

func (q *rabbitQueue) drop(context.Context) {
	for _, name := range q.queues() {
		if ch, err := q.k.admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			_ = ch.Close()
		}
	}
}

// natsKind opens file-backed streams on NATS JetStream.
type natsKind struct {
	o   *options
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *natsjs.Publisher
}

func openNATS(o *options) (*natsKind, error) {
	nc, err := nats.Connect(o.natsURL, nats.Timeout(2*time.Second), nats.Name("consumebench"))
	if err != nil {
		return nil, fmt.Errorf("%w: NATS at %s: %w", errUnavailable, o.natsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsKind{o: o, nc: nc, js: js, pub: pub}, nil
}

func (k *natsKind) name() string { return "nats" }
func (k *natsKind) close()       { k.nc.Close() }

// durable is the name of the measurement's consumer on its stream.
const durable = "consumebench"

func (k *natsKind) newQueue(ctx context.Context) (queue, error) {
	name := ledger.RandomName("CONSUMEBENCH")
	subject := name + ".msgs"
	if _, err := k.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("nats: create stream %s: %w", name, err)
	}
	return &natsQueue{k: k, stream: name, subject: subject}, nil
}

type natsQueue struct {
	k       *natsKind
	stream  string
	subject string
}

func (q *natsQueue) publish(ctx context.Context, w *ledger.Workload) error {
	return w.Publish(ctx, func(ctx context.Context, i int) error {
		return q.k.pub.Publish(ctx, &broker.Message{ID: w.IDs[i], Subject: q.subject, Payload: w.Payload(i)})
	})
}

func (q *natsQueue) source(ctx context.Context) (broker.Source, error) {
	return natsjs.NewSource(ctx, q.k.js, &natsjs.Config{Stream: q.stream, Durable: durable, PullBatch: q.k.o.prefetch,
		Logger: q.k.o.logger})
}

// left is the consumer's NumPending (not yet delivered) plus
// NumAckPending (delivered, not acked).
func (q *natsQueue) left(ctx context.Context) (int64, error) {
	c, err := q.k.js.Consumer(ctx, q.stream, durable)
	if err != nil {
		return 0, fmt.Errorf("nats: consumer %s: %w", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("nats: consumer %s: %w", durable, err)
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

func (q *natsQueue) drop(ctx context.Context) { _ = q.k.js.DeleteStream(ctx, q.stream) }
