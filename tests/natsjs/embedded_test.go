// Package natsjs_test holds the tests of package natsjs that need a database
// (broker/brokertest's fixture, on SQLite; its benchmarks, on PostgreSQL).
// They live apart from the adapter so that go mod tidy in a program that
// imports the adapter does not load them, and so downloads no database
// driver for them.
package natsjs_test

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/inboxkit/inbox/broker/brokertest"
)

// embedded is a JetStream server in the test process, which the suite can
// restart (same port, same store directory).
type embedded struct {
	opts *server.Options
	srv  *server.Server
}

func startEmbedded(tb testing.TB) *embedded {
	tb.Helper()
	e := &embedded{opts: &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
	}}
	e.start(tb)
	e.opts.Port = e.srv.Addr().(*net.TCPAddr).Port // the same port after a restart
	tb.Cleanup(func() { e.srv.Shutdown(); e.srv.WaitForShutdown() })
	return e
}

func (e *embedded) start(tb testing.TB) {
	tb.Helper()
	srv, err := server.NewServer(e.opts)
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		tb.Fatal("embedded NATS server not ready")
	}
	e.srv = srv
}

func (e *embedded) restart(tb testing.TB) {
	tb.Helper()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	time.Sleep(200 * time.Millisecond)
	e.start(tb)
}

// The suite again on an embedded server, with the restart case.
func TestBrokerEmbedded(t *testing.T) {
	f := features
	f.Restart = true
	brokertest.Run(t, brokertest.Harness{
		Features: f,
		Open: func(tb testing.TB, ackWait time.Duration) *brokertest.Env {
			e := startEmbedded(tb)
			_, js := connect(tb, e.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
			env := openOn(tb, js, ackWait)
			env.Restart = e.restart
			return env
		},
	})
}
