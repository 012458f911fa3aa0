package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/broker/rabbitmq"
)

// A refused configuration is refused before connecting (the URL leads
// nowhere).
func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	const nowhere = "amqp://guest:guest@127.0.0.1:1/"
	recovery := amqp.Config{Recovery: &amqp.Recovery{}}
	tests := []struct {
		name string
		call func() error
	}{
		{"nil config", func() error { _, err := rabbitmq.NewSource(context.Background(), nil); return err }},
		{"no queue", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URL: nowhere})
			return err
		}},
		{"unknown queue type", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URL: nowhere, Queue: "q", QueueType: "stream"})
			return err
		}},
		{"delay bucket under 1 ms", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URL: nowhere, Queue: "q", DelayBuckets: []time.Duration{time.Microsecond}})
			return err
		}},
		{"source with AMQP recovery", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URL: nowhere, Queue: "q", AMQP: recovery})
			return err
		}},
		{"source with URL and URLs", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URL: nowhere, URLs: []string{nowhere}, Queue: "q"})
			return err
		}},
		{"source with an empty URLs entry", func() error {
			_, err := rabbitmq.NewSource(context.Background(), &rabbitmq.Config{URLs: []string{nowhere, ""}, Queue: "q"})
			return err
		}},
		{"declare with URL and URLs", func() error {
			return rabbitmq.Declare(context.Background(), &rabbitmq.Config{URL: nowhere, URLs: []string{nowhere}, Queue: "q"})
		}},
		{"publisher with URL and URLs", func() error {
			_, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{URL: nowhere, URLs: []string{nowhere}})
			return err
		}},
		{"publisher with an empty URLs entry", func() error {
			_, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{URLs: []string{""}})
			return err
		}},
		{"publisher with AMQP recovery", func() error {
			_, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{URL: nowhere, AMQP: recovery})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.call(); !errors.Is(err, rabbitmq.ErrInvalidConfig) {
				t.Fatalf("err = %v, want rabbitmq.ErrInvalidConfig", err)
			}
		})
	}
}
