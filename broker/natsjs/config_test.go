package natsjs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/inboxkit/inbox/broker/natsjs"
)

func TestNewSourceRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  *natsjs.Config
	}{
		{"nil config", nil},
		{"no stream", &natsjs.Config{Durable: "d"}},
		{"no durable", &natsjs.Config{Stream: "s"}},
		{"nil JetStream", &natsjs.Config{Stream: "s", Durable: "d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := natsjs.NewSource(context.Background(), nil, tc.cfg); !errors.Is(err, natsjs.ErrInvalidConfig) {
				t.Fatalf("NewSource(nil, %+v): %v, want natsjs.ErrInvalidConfig", tc.cfg, err)
			}
		})
	}
}

func TestNewPublisherRejectsNilJetStream(t *testing.T) {
	t.Parallel()
	if _, err := natsjs.NewPublisher(nil, nil); !errors.Is(err, natsjs.ErrInvalidConfig) {
		t.Fatalf("NewPublisher(nil, nil): %v, want natsjs.ErrInvalidConfig", err)
	}
}
