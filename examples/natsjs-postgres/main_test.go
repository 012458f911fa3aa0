package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

func TestExample(t *testing.T) {
	pgenv.Pool(t, 1)
	nc, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	defer nc.Close()
	stream := testenv.Name("EXAMPLE_")
	defer func() {
		if js, err := nc.JetStream(); err == nil {
			_ = js.DeleteStream(stream)
		}
	}()
	var out bytes.Buffer
	args := []string{"-nats", testenv.NATSURL(), "-postgres", pgenv.DSN(), "-stream", stream, "-publish", "20", "-idle", "1s"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "processed 20, duplicates 0, retries 0, dead-lettered 0") {
		t.Fatalf("output:\n%s", out.String())
	}
}
