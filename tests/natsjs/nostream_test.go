package natsjs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
)

// A stream that does not exist is named, with the news that natsjs does
// not create streams and how to create one, and the error still wraps
// jetstream's.
func TestMissingStreamSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	_, js := connect(t, testenv.NATSURL())
	ctx := context.Background()
	stream := testenv.Name("INBOXTEST_NONE_")
	subject := stream + ".orders"
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want string
		is   error
	}{
		{"NewSource", func() error {
			src, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: stream, Durable: "d"})
			if src != nil {
				_ = src.Close()
			}
			return err
		}, "natsjs: stream " + stream + " not found: natsjs does not create streams; create it first with " +
			"jetstream.JetStream.CreateStream or `nats stream add " + stream + " --subjects ...`: ", jetstream.ErrStreamNotFound},
		{"RedeliveryWindow", func() error {
			_, err := natsjs.RedeliveryWindow(ctx, js, stream)
			return err
		}, "natsjs: stream " + stream + " not found: natsjs does not create streams; create it first with " +
			"jetstream.JetStream.CreateStream or `nats stream add " + stream + " --subjects ...`: ", jetstream.ErrStreamNotFound},
		{"Publish", func() error {
			return pub.Publish(ctx, &broker.Message{ID: "m-1", Subject: subject, Payload: []byte("p")})
		}, `natsjs: publish "m-1" to "` + subject + `": no stream captures the subject, and natsjs does not create streams; ` +
			`create one whose subjects include "` + subject + `" with jetstream.JetStream.CreateStream or ` +
			"`nats stream add NAME --subjects \"" + subject + "\"`: ", jetstream.ErrNoStreamResponse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, tc.is) {
				t.Fatalf("error %v\nwant  %s… wrapping %v", err, tc.want, tc.is)
			}
		})
	}
}
