package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

func TestExample(t *testing.T) {
	pgenv.Pool(t, 1)
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	defer conn.Close()
	queue := testenv.Name("example_")
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
		}
	}()
	var out bytes.Buffer
	args := []string{"-amqp", testenv.AMQPURL(), "-postgres", pgenv.DSN(), "-queue", queue, "-publish", "20", "-idle", "1s"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "processed 20, duplicates 0, retries 0, dead-lettered 0") {
		t.Fatalf("output:\n%s", out.String())
	}
}
