package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
)

// The example on an in-process Kafka (kfake) and the real PostgreSQL; the
// topic is created by the example.
func TestExample(t *testing.T) {
	pgenv.Pool(t, 1)
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	args := []string{"-brokers", strings.Join(c.ListenAddrs(), ","), "-postgres", pgenv.DSN(),
		"-topic", testenv.Name("example_"), "-publish", "20", "-idle", "1s"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "processed 20, duplicates 0, retries 0, dead-lettered 0") {
		t.Fatalf("output:\n%s", out.String())
	}
}
