package rabbitcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
)

// New starts a Cluster for tb and closes it when tb ends. Without
// rabbitmq-server it skips tb, or fails it when INBOX_REQUIRE_SERVICES=1.
// It fails tb on any other error.
func New(tb testing.TB, opts *Options) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := Start(ctx, opts)
	if errors.Is(err, ErrUnavailable) {
		testenv.Unavailable(tb, "RabbitMQ (rabbitmq-server)", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("rabbitcluster: close: %v", err)
		}
	})
	tb.Logf("rabbitcluster: %d nodes %v, started in %v", len(c.Nodes), c.URLs(), time.Since(begin).Round(time.Millisecond))
	return c
}
