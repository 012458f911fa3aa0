package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
)

type delivery struct {
	s    *Source
	r    *kgo.Record
	part *partition
	msg  *broker.Message
	held bool // under s.mu: in a batch of NextBatch, its partition held until it is settled
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack marks the record done; its offset is committed in the background
// (see Config.CommitInterval).
func (d *delivery) Ack(context.Context) error {
	d.s.done(d)
	return nil
}

// Nack hands the record out again after delay; its partition's committed
// offset stays before it meanwhile.
func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	d.s.retry(d, delay)
	return nil
}

// Term marks the record done: Kafka cannot skip one record otherwise.
func (d *delivery) Term(ctx context.Context, _ string) error { return d.Ack(ctx) }

// InProgress does nothing: a Kafka record has no lease (the group's
// session is kept by the client's heartbeats).
func (d *delivery) InProgress(context.Context) error { return nil }
