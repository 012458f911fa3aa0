package inboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/inboxtest"
)

// features: the in-memory Broker redelivers after AckWait, which
// InProgress starts again, counts deliveries, carries keys and refuses a
// payload over BrokerConfig.MaxPayload. It keeps every re-publish (no
// dedup), carries any header, and has no restart.
var features = brokertest.Features{Deliveries: true, AckWait: true, Lease: true, Keys: true, PayloadLimit: true, PublishTime: true}

const maxPayload = 1 << 20

func open(tb testing.TB, ackWait time.Duration) *brokertest.Env {
	const subject = "inboxtest.msgs"
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{Subjects: []string{subject}, AckWait: ackWait, MaxPayload: maxPayload})
	return &brokertest.Env{
		Source: func(tb testing.TB) broker.Source {
			src := b.Source()
			tb.Cleanup(func() { src.Close() })
			return src
		},
		Publisher: b,
		Subject:   subject,
		PublishNoID: func(ctx context.Context, payload []byte) error {
			b.Enqueue(&broker.Message{Subject: subject, Payload: payload})
			return nil
		},
		Nowhere:    "inboxtest.nowhere",
		MaxPayload: maxPayload,
	}
}

func TestBroker(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{Features: features, Open: open})
}

// Without an AckWait the Broker behaves as RabbitMQ does: an unsettled
// delivery comes back only once its Source closes, and there is no lease.
func TestBrokerWithoutAckWait(t *testing.T) {
	f := features
	f.AckWait, f.Lease = false, false
	brokertest.Run(t, brokertest.Harness{Features: f, Open: func(tb testing.TB, _ time.Duration) *brokertest.Env {
		return open(tb, -1)
	}})
}
