package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/internal/testenv/pgenv"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// TestExample runs the example on the in-process goaws emulator (or on
// INBOX_SQS_ENDPOINT), with a queue of its own that the example creates.
func TestExample(t *testing.T) {
	pgenv.Pool(t, 1)
	endpoint := sqsenv.Endpoint()
	if sqsenv.Emulated() {
		t.Setenv("AWS_ACCESS_KEY_ID", "test")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		t.Setenv("AWS_REGION", "us-east-1")
	}
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none") // no profile of this machine
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	var out bytes.Buffer
	args := []string{"-endpoint", endpoint, "-postgres", pgenv.DSN(), "-queue", testenv.Name("example_"), "-publish", "20", "-idle", "1s"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "processed 20, duplicates 0, retries 0, dead-lettered 0") {
		t.Fatalf("output:\n%s", out.String())
	}
}
