package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/bench/internal/ledger"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/broker/natsjs"
)

// errUnavailable is wrapped by the error of a service that does not
// answer: the smoke test skips on it unless INBOX_REQUIRE_SERVICES=1.
var errUnavailable = errors.New("service unavailable")

// dest is one measurement's topic or stream.
type dest interface {
	// publish publishes w's messages, all of them confirmed on return.
	publish(ctx context.Context, w *ledger.Workload) error
	// fill sets what a child needs to consume the destination.
	fill(s *spec)
	// left counts what the group or durable has not acked. Call it once
	// every child has stopped.
	left(ctx context.Context) (int64, error)
	close()
}

// kafkaDest is a kfake cluster of its own, in this process, with one
// topic of o.partitions partitions.
type kafkaDest struct {
	cluster *kfake.Cluster
	cl      *kgo.Client
	pub     *kafka.Publisher
	topic   string
}

func newKafka(o *options) (*kafkaDest, error) {
	topic := ledger.RandomName("scaleout")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), topic),
		kfake.GroupMinSessionTimeout(kafkaHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		c.Close()
		return nil, err
	}
	pub, err := kafka.NewPublisher(cl, nil)
	if err != nil {
		cl.Close()
		c.Close()
		return nil, err
	}
	return &kafkaDest{cluster: c, cl: cl, pub: pub, topic: topic}, nil
}

// publish keys each record by its ID: the default partitioner spreads
// them over the partitions.
func (k *kafkaDest) publish(ctx context.Context, w *ledger.Workload) error {
	return w.Publish(ctx, func(ctx context.Context, i int) error {
		return k.pub.Publish(ctx, &broker.Message{ID: w.IDs[i], Key: w.IDs[i], Subject: k.topic, Payload: w.Payload(i)})
	})
}

func (k *kafkaDest) fill(s *spec) {
	s.Kafka = k.cluster.ListenAddrs()
	s.Topic = k.topic
}

// left is the group's lag: the records after its committed offsets.
func (k *kafkaDest) left(ctx context.Context) (int64, error) {
	lags, err := kadm.NewClient(k.cl).Lag(ctx, kafkaGroup)
	if err != nil {
		return 0, fmt.Errorf("kafka: lag: %w", err)
	}
	l, ok := lags[kafkaGroup]
	if !ok {
		return 0, fmt.Errorf("kafka: no lag for group %s", kafkaGroup)
	}
	if l.Error() != nil {
		return 0, fmt.Errorf("kafka: lag: %w", l.Error())
	}
	return l.Lag.Total(), nil
}

func (k *kafkaDest) close() {
	k.cl.Close()
	k.cluster.Close()
}

// natsConn is the run's connection to NATS, shared by its streams.
type natsConn struct {
	o   *options
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *natsjs.Publisher
}

func openNATS(o *options) (*natsConn, error) {
	nc, err := nats.Connect(o.natsURL, nats.Timeout(2*time.Second), nats.Name("scaleout"))
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
	return &natsConn{o: o, nc: nc, js: js, pub: pub}, nil
}

// natsDest is a file stream of its own, consumed by one durable that
// every process shares.
type natsDest struct {
	c       *natsConn
	stream  string
	subject string
}

func (c *natsConn) newStream(ctx context.Context) (*natsDest, error) {
	name := ledger.RandomName("SCALEOUT")
	subject := name + ".msgs"
	if _, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage}); err != nil {
		return nil, fmt.Errorf("nats: create stream %s: %w", name, err)
	}
	return &natsDest{c: c, stream: name, subject: subject}, nil
}

func (d *natsDest) publish(ctx context.Context, w *ledger.Workload) error {
	return w.Publish(ctx, func(ctx context.Context, i int) error {
		return d.c.pub.Publish(ctx, &broker.Message{ID: w.IDs[i], Subject: d.subject, Payload: w.Payload(i)})
	})
}

// fill gives every process the same MaxAckPending, room for the largest
// N's prefetch, since each one's NewSource updates the shared durable.
func (d *natsDest) fill(s *spec) {
	s.NATS = d.c.o.natsURL
	s.Stream = d.stream
	s.MaxAckPending = max(1000, (d.c.o.maxProcs()+1)*d.c.o.prefetchFor("batch"))
}

// left is the durable's NumPending (not yet delivered) plus NumAckPending
// (delivered, not acked).
func (d *natsDest) left(ctx context.Context) (int64, error) {
	c, err := d.c.js.Consumer(ctx, d.stream, durable)
	if err != nil {
		return 0, fmt.Errorf("nats: consumer %s: %w", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("nats: consumer %s: %w", durable, err)
	}
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

func (d *natsDest) close() { _ = d.c.js.DeleteStream(context.Background(), d.stream) }
