package rabbitmq_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
)

// fakeNodes stand for a cluster's nodes: hosts node-a, node-b… whose
// connections all reach the test broker. A killed node refuses new
// connections and loses its open ones, as a node killed with SIGKILL.
type fakeNodes struct {
	broker string // the test broker's host:port
	mu     sync.Mutex
	dead   map[string]bool
	dials  map[string]int
	conns  map[string][]net.Conn
}

func newFakeNodes(t *testing.T) *fakeNodes {
	t.Helper()
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	return &fakeNodes{broker: u.Host, dead: map[string]bool{}, dials: map[string]int{}, conns: map[string][]net.Conn{}}
}

// url returns node's AMQP URL, with the test broker's user and vhost.
func (f *fakeNodes) url(t *testing.T, node string) string {
	t.Helper()
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = node + ":5672"
	return u.String()
}

// dial is an amqp.Config.Dial that connects a node's address to the
// broker, unless the node is dead.
func (f *fakeNodes) dial(network, addr string) (net.Conn, error) {
	node, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.dials[node]++
	dead := f.dead[node]
	f.mu.Unlock()
	if dead {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (test: node " + node + " is dead)")}
	}
	c, err := net.DialTimeout(network, f.broker, 2*time.Second)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns[node] = append(f.conns[node], c)
	f.mu.Unlock()
	return c, nil
}

// kill makes node refuse connections and closes its open ones.
func (f *fakeNodes) kill(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead[node] = true
	for _, c := range f.conns[node] {
		_ = c.Close()
	}
	f.conns[node] = nil
}

func (f *fakeNodes) dialed(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials[node]
}

// A Source and a Publisher given several URLs move on to another node
// when theirs dies, by themselves: the dead node is not restarted. With
// one URL they would retry the dead node until it came back.
func TestFailoverToAnotherURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Quorum)
	nodes := newFakeNodes(t)
	urls := []string{nodes.url(t, "node-a"), nodes.url(t, "node-b"), nodes.url(t, "node-c")}
	cfg := e.cfg
	cfg.URL, cfg.URLs = "", urls
	cfg.AMQP.Dial = nodes.dial
	cfg.ReconnectDelay = 10 * time.Millisecond
	src, err := rabbitmq.NewSource(ctx, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	pcfg := &rabbitmq.PublisherConfig{URLs: urls, ConnectionName: "inbox test failover " + e.queue}
	pcfg.AMQP.Dial = nodes.dial
	pub, err := rabbitmq.NewPublisher(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	if a := nodes.dialed("node-a"); a != 2 { // the Source's and the Publisher's
		t.Fatalf("%d connections to node-a, want 2: the first URL comes first", a)
	}

	publish := func(id string) (tries int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for tries = 1; ; tries++ {
			err := pub.Publish(ctx, &broker.Message{ID: id, Subject: e.queue, Payload: []byte(id)})
			if err == nil {
				return tries
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %s: still failing after %d tries: %v", id, tries, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	receive := func(want string) {
		t.Helper()
		d := next(t, src, 15*time.Second)
		if got := d.Message().ID; got != want {
			t.Fatalf("received %q, want %q", got, want)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish("before")
	receive("before")

	nodes.kill("node-a")
	tries := publish("after")
	receive("after")
	if b := nodes.dialed("node-b"); b < 2 {
		t.Fatalf("%d connections to node-b, want the Source's and the Publisher's", b)
	}
	t.Logf("after node-a died: published in %d tries; dials a=%d b=%d c=%d", tries,
		nodes.dialed("node-a"), nodes.dialed("node-b"), nodes.dialed("node-c"))
}
