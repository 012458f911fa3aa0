package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

func TestExample(t *testing.T) {
	pool := pgenv.Pool(t, 1)
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
		for _, s := range []string{"orders", "billing"} {
			_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA shop_%s_%s CASCADE", stream, s))
		}
	}()
	var out bytes.Buffer
	args := []string{"-nats", testenv.NATSURL(), "-postgres", pgenv.DSN(), "-stream", stream, "-orders", "30"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"billing: processed 30, duplicates 0, retries 0, dead-lettered 0",
		"orders:  processed 30, duplicates 0, retries 0, dead-lettered 0",
		"every order paid; 30 charges for 30 orders",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
