package natscluster

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// built is the nats-server that Start builds, once per test binary.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Start starts a Cluster for tb and closes it when tb ends. It fails tb on
// any error, with the nodes' logs. Unless opts names a binary, or
// INBOX_NATS_SERVER does, it builds nats-server once per test binary,
// into a directory removed by [Cleanup].
func Start(tb testing.TB, opts *Options) *Cluster {
	tb.Helper()
	o := Options{}
	if opts != nil {
		o = *opts
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if o.Binary == "" && os.Getenv(EnvServer) == "" {
		bin, err := builtServer(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		o.Binary = bin
	}
	begin := time.Now()
	c, err := Launch(ctx, &o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("natscluster: close: %v", err)
		}
	})
	tb.Logf("natscluster: %d nodes at %s, healthy in %v", len(c.Nodes), c.URLs(), time.Since(begin).Round(time.Millisecond))
	return c
}

func builtServer(ctx context.Context) (string, error) {
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "inbox-nats-server-"); built.err != nil {
			return
		}
		built.bin, built.err = Build(ctx, built.dir)
	})
	return built.bin, built.err
}

// Cleanup removes the nats-server that Start built. Call it from TestMain
// after m.Run.
func Cleanup() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
