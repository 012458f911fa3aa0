package natscluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/tests/internal/natscluster"
)

// A publish that finds the stream without a leader, while the cluster
// elects one, fails with an error that says so. It must not tell the
// user to create a stream that exists: a relay logs that text with
// every failed publication of an election.
func TestPublishWithoutLeader(t *testing.T) {
	t.Parallel()
	r := &run{c: natscluster.Start(t, nil)}
	js := r.connect(t, "test")
	ctx := context.Background()
	stream := testenv.Name("ELECTION_")
	subject := stream + ".msgs"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Replicas: 3,
		Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := &broker.Message{ID: "m1", Subject: subject, Payload: []byte("x")}
	if err := pub.Publish(ctx, msg); err != nil {
		t.Fatalf("publish before the kill: %v", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := r.c.StreamLeader(lctx, js, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// An election takes seconds; the first publishes after the kill meet
	// no leader.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := pub.Publish(pctx, msg)
		cancel()
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			text := err.Error()
			if strings.Contains(text, "no stream captures the subject") || !strings.Contains(text, "leader") {
				t.Fatalf("the publish after the SIGKILL of the stream's leader (%s) failed with\n%s\nwant an error that says the stream may have no leader, not that no stream captures the subject", leader.Name, text)
			}
			t.Logf("publish %d after the SIGKILL of %s: %v", i+1, leader.Name, err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no publish failed with no stream response within 20 s of the kill; last error %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
