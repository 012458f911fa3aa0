package rabbitcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/tests/internal/rabbitcluster"
)

// envEnable runs the package's tests; without it they skip.
const envEnable = "INBOX_RABBITCLUSTER"

// cluster is the package's cluster, started once by TestMain. It is nil
// when startErr says why not.
var (
	cluster  *rabbitcluster.Cluster
	startErr error
	started  time.Duration
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(envEnable) != "1" {
		return m.Run()
	}
	if err := rabbitcluster.Available(); err != nil {
		startErr = err
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := rabbitcluster.Start(ctx, &rabbitcluster.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		startErr = err
		return m.Run()
	}
	cluster, started = c, time.Since(begin)
	defer func() {
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "rabbitcluster: close:", err)
		}
	}()
	return m.Run()
}

// need skips t unless INBOX_RABBITCLUSTER=1. Then a missing
// rabbitmq-server skips t, or fails it with INBOX_REQUIRE_SERVICES=1, and
// a cluster that would not start fails t.
func need(t testing.TB) *rabbitcluster.Cluster {
	t.Helper()
	switch {
	case os.Getenv(envEnable) != "1":
		t.Skipf("three RabbitMQ nodes take about a minute to start on a 2-core machine: set %s=1 to run (see doc.go)", envEnable)
	case errors.Is(startErr, rabbitcluster.ErrUnavailable):
		testenv.Unavailable(t, "RabbitMQ (rabbitmq-server)", startErr)
	case cluster == nil:
		t.Fatalf("rabbitcluster: the cluster did not start: %v", startErr)
	}
	t.Logf("cluster of %d nodes started in %v", len(cluster.Nodes), started.Round(time.Millisecond))
	return cluster
}

// messages returns the number of messages: INBOX_RABBITCLUSTER_MESSAGES,
// or def.
func messages(t testing.TB, def int) int {
	t.Helper()
	if s := os.Getenv("INBOX_RABBITCLUSTER_MESSAGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("INBOX_RABBITCLUSTER_MESSAGES=%q: want a positive number", s)
		}
		return n
	}
	return def
}
