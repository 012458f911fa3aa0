package kafka

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
)

// publishBound bounds a Publish with a 2 s context in an outage, with
// room for -race on two shared cores.
const publishBound = 4 * time.Second

// In an outage Publish returns its context's error by its deadline, the
// publication after it too, whatever the client's idempotence. Probe
// fails, and the client's Close returns. A partition that heals leaves
// the client working: the next publication succeeds (after the abandoned
// records, which an idempotent client still sends).
func TestPublishReturnsInAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		// closed closes the cluster; otherwise a partition cuts it off
		// (the client's writes succeed, no answer comes), then heals.
		closed bool
	}{
		{name: "cluster closed", closed: true},
		{name: "partition"},
		{name: "partition, cancellation allowed", opts: []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}},
		{name: "partition, not idempotent", opts: []kgo.Opt{kgo.DisableIdempotentWrite()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newOutageFake(t, !tc.closed, tc.opts...)
			c, px, cl, pub := f.c, f.px, f.cl, f.pub
			if tc.closed {
				c.Close()
			} else {
				px.partition()
			}
			for _, id := range []string{"during-1", "during-2"} {
				err, took := publishWithin(pub, id, 2*time.Second, publishBound)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Publish %s in the outage: %v after %v; want an error wrapping context.DeadlineExceeded within %v",
						id, err, took, publishBound)
				}
				t.Logf("Publish %s returned after %v: %v", id, took, err)
			}
			pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			start := time.Now()
			err := pub.Probe(pctx)
			cancel()
			if took := time.Since(start); err == nil || took > publishBound {
				t.Fatalf("Probe in the outage: %v after %v; want an error within %v", err, took, publishBound)
			}
			if tc.closed {
				// The client still holds the abandoned records: Close
				// fails them, and returns.
				closed := make(chan struct{})
				go func() { cl.Close(); close(closed) }()
				select {
				case <-closed:
				case <-time.After(publishBound):
					t.Fatalf("the client's Close with abandoned records did not return within %v", publishBound)
				}
				return
			}
			px.heal()
			if err, took := publishWithin(pub, "after", 30*time.Second, 35*time.Second); err != nil {
				t.Fatalf("Publish after the partition healed: %v after %v, want nil", err, took)
			}
			got := readIDs(t, c.ListenAddrs(), "outage", "after")
			if got["before"] != 1 || got["after"] != 1 {
				t.Fatalf("the topic holds %v; want before and after once each", got)
			}
			t.Logf("the topic holds %v", got)
		})
	}
}

// A record that franz-go fails with its batch, because the batch's first
// record's context ended, is tried again within its own context.
func TestPublishOutlivesItsBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{name: "idempotent"},
		{name: "cancellation allowed", opts: []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}},
		{name: "not idempotent", opts: []kgo.Opt{kgo.DisableIdempotentWrite()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newOutageFake(t, true, tc.opts...)
			c, px, pub := f.c, f.px, f.pub
			px.down()
			short := make(chan error, 1)
			go func() { e, _ := publishWithin(pub, "short", time.Second, publishBound); short <- e }()
			time.Sleep(200 * time.Millisecond) // joins short's batch
			long := make(chan error, 1)
			go func() { e, _ := publishWithin(pub, "long", 20*time.Second, 25*time.Second); long <- e }()
			if err := <-short; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Publish short: %v, want an error wrapping context.DeadlineExceeded", err)
			}
			time.Sleep(500 * time.Millisecond)
			px.heal()
			if err := <-long; err != nil {
				t.Fatalf("Publish long, whose context did not end: %v, want nil", err)
			}
			if got := readIDs(t, c.ListenAddrs(), "outage", "long"); got["long"] != 1 {
				t.Fatalf("the topic holds %v; want long once", got)
			}
		})
	}
}

// outageFake is a cluster with the topic "outage", reached through px
// when there is one, and a publisher on a client of its own that has
// published the message "before".
type outageFake struct {
	c   *kfake.Cluster
	px  *partitionProxy
	cl  *kgo.Client
	pub *Publisher
}

func newOutageFake(t *testing.T, proxied bool, opts ...kgo.Opt) *outageFake {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outage"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &outageFake{c: c}
	seeds := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	if proxied {
		f.px = newPartitionProxy(t, c.ListenAddrs()[0])
		seeds = []kgo.Opt{kgo.SeedBrokers(f.px.addr()), kgo.Dialer(f.px.dial)}
	}
	if f.cl, err = kgo.NewClient(append(seeds, opts...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cl.Close)
	if f.pub, err = NewPublisher(f.cl, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.pub.Publish(context.Background(), &broker.Message{ID: "before", Subject: "outage"}); err != nil {
		t.Fatalf("before the outage: %v", err)
	}
	return f
}

// publishWithin publishes a message id with a context of timeout, and
// waits for Publish at most bound; a Publish still running then is
// reported as an error.
func publishWithin(pub *Publisher, id string, timeout, bound time.Duration) (error, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- pub.Publish(ctx, &broker.Message{ID: id, Subject: "outage"}) }()
	select {
	case err := <-done:
		return err, time.Since(start).Round(time.Millisecond)
	case <-time.After(bound):
		return errors.New("Publish did not return"), bound
	}
}

// readIDs reads topic from the start until a record with the ID last,
// and counts the records of each ID.
func readIDs(t *testing.T, addrs []string, topic, last string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[string]int{}
	for got[last] == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record %q within 10 s; read %v", last, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == broker.DefaultIDHeader {
					got[string(h.Value)]++
				}
			}
		})
	}
	return got
}

// partitionProxy forwards TCP connections to one broker until partition,
// from when it drops what either side sends, on its connections and on
// new ones: the client's writes succeed, no answer comes. heal closes
// those connections and forwards again.
type partitionProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	refuse bool // close new connections at once (refuse)
	conns  []*proxied
}

// proxied is one forwarded connection: the client's and the broker's.
type proxied struct {
	client, broker net.Conn
	cut            bool // under the proxy's mu
}

func (pc *proxied) close() { _ = pc.client.Close(); _ = pc.broker.Close() }

func newPartitionProxy(t *testing.T, target string) *partitionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{ln: ln, target: target}
	t.Cleanup(p.close)
	go p.accept()
	return p
}

func (p *partitionProxy) addr() string { return p.ln.Addr().String() }

// dial connects to the proxy whatever the host, so that the brokers the
// cluster advertises are reached through it.
func (p *partitionProxy) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, p.addr())
}

func (p *partitionProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &proxied{client: c, broker: b}
		p.mu.Lock()
		if p.refuse {
			p.mu.Unlock()
			_ = c.Close()
			_ = b.Close()
			continue
		}
		pc.cut = p.cut
		p.conns = append(p.conns, pc)
		p.mu.Unlock()
		go p.copy(pc, b, c)
		go p.copy(pc, c, b)
	}
}

// copy forwards src to dst while pc is not cut, and drops what src sends
// once it is.
func (p *partitionProxy) copy(pc *proxied, dst, src net.Conn) {
	defer pc.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := pc.cut
			p.mu.Unlock()
			if !cut {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *partitionProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, pc := range p.conns {
		pc.cut = true
	}
}

// down closes every connection, and each new one at once: the client
// sends nothing.
func (p *partitionProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for _, pc := range p.conns {
		pc.cut = true
		pc.close()
	}
}

func (p *partitionProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.refuse = false, false
	live := p.conns[:0]
	for _, pc := range p.conns {
		if pc.cut {
			pc.close()
		} else {
			live = append(live, pc)
		}
	}
	p.conns = live
}

func (p *partitionProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.close()
	}
}
