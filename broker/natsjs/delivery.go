package natsjs

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
)

func (s *Source) delivery(m jetstream.Msg) *delivery {
	msg := &broker.Message{Subject: m.Subject(), Payload: m.Data(), System: broker.SystemNATS}
	if h := m.Headers(); len(h) > 0 {
		msg.ID = h.Get(jetstream.MsgIDHeader)
		msg.Type = h.Get(s.cfg.TypeHeader)
		msg.Headers = make(map[string]string, len(h))
		for k, v := range h {
			if len(v) > 0 && !OwnHeader(k) {
				msg.Headers[k] = v[0]
			}
		}
	}
	if md, err := m.Metadata(); err == nil {
		msg.Deliveries = int(md.NumDelivered)
		msg.Time = md.Timestamp // when the stream stored it
	}
	return &delivery{m: m, msg: msg}
}

type delivery struct {
	m   jetstream.Msg
	msg *broker.Message
}

func (d *delivery) Message() *broker.Message { return d.msg }

// Ack acks and waits for the server's confirmation.
func (d *delivery) Ack(ctx context.Context) error { return d.m.DoubleAck(ctx) }

func (d *delivery) Nack(_ context.Context, delay time.Duration) error {
	if delay <= 0 {
		return d.m.Nak()
	}
	return d.m.NakWithDelay(delay)
}

func (d *delivery) Term(_ context.Context, reason string) error { return d.m.TermWithReason(reason) }

func (d *delivery) InProgress(context.Context) error { return d.m.InProgress() }

// OwnHeader tells whether a header is NATS's own rather than the
// producer's. Such a name begins with "Nats-", in that case exactly.
//   - JetStream's controls, such as Nats-Rollup, Nats-Expected-Last-Sequence
//     and Nats-TTL.
//   - What the server adds, such as Nats-Stream and Nats-Sequence.
//   - Nats-Msg-Id, which Publisher sets from Message.ID.
//
// Source leaves them out of Message.Headers. Publisher never sends them
// from Message.Headers. Published again, in a replay or by a relay, they
// would act again, as a rollup purging the stream. NATS matches header
// names case-sensitively. So nats-rollup or NATS-TTL are a producer's own
// headers. JetStream ignores them, and they round-trip.
func OwnHeader(name string) bool { return strings.HasPrefix(name, "Nats-") }
