package outbox_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/natsjs"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/broker/sqs"
	"github.com/inboxkit/inbox/internal/testenv"
	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
	"github.com/inboxkit/inbox/tests/sqsenv"
)

// probeTargets are, per broker, a destination the broker refuses a
// message for while it answers (refused), and a broker that takes
// messages until down is called (outage).
var probeTargets = []struct {
	name    string
	refused func(t *testing.T) (pub broker.Publisher, dest string)
	outage  func(t *testing.T) (pub broker.Publisher, dest string, down func())
}{
	{"nats", natsRefused, natsOutage},
	{"rabbitmq", rabbitRefused, rabbitOutage},
	{"kafka", kafkaRefused, kafkaOutage},
	{"sqs", sqsRefused, sqsOutage},
}

// probeRelay is a relay that parks after 2 counted failures, with the
// default OutageAfter (1 min).
func probeRelay(t *testing.T, d *db, pub broker.Publisher) *outbox.Relay {
	t.Helper()
	return d.relay(t, pub, outbox.RelayConfig{MaxAttempts: 2, PublishTimeout: 500 * time.Millisecond, Lease: 5 * time.Second,
		Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1}})
}

// A row its broker refuses (no stream, no queue, no topic) while the
// broker answers is parked after MaxAttempts, though it is the only
// traffic: the broker's Probe, through ToBroker, tells it from an outage.
func TestRelayParksRefusedRow(t *testing.T) {
	t.Parallel()
	for _, tg := range probeTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			d := openDB(t)
			pub, dest := tg.refused(t)
			d.write(t, dest, "refused", 1)
			r := probeRelay(t, d, pub)
			ctx := context.Background()
			var parked []*outbox.Parked
			rounds := 0
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && len(parked) == 0; time.Sleep(5 * time.Millisecond) {
				res, err := r.RelayOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rounds += res.Claimed
				if parked, err = r.Parked(ctx, 0, 10); err != nil {
					t.Fatal(err)
				}
			}
			if len(parked) != 1 || parked[0].Attempts != 2 {
				t.Fatalf("after %d rounds, parked %+v; want the refused row parked after 2 attempts though nothing else was published", rounds, parked)
			}
			t.Logf("parked after %d rounds: %s", rounds, parked[0].Error)
		})
	}
}

// While the broker is down, its Probe fails: failures are not counted,
// even just after a success (within OutageAfter), and nothing is parked.
func TestRelayOutageParksNothing(t *testing.T) {
	t.Parallel()
	for _, tg := range probeTargets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			d := openDB(t)
			pub, dest, down := tg.outage(t)
			r := probeRelay(t, d, pub)
			ctx := context.Background()
			d.write(t, dest, "before", 1)
			if res, err := r.RelayOnce(ctx); err != nil || res.Published != 1 {
				t.Fatalf("before the outage: %+v %v, want 1 published", res, err)
			}
			down()
			d.write(t, dest, "during", 1)
			rounds := 0
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && rounds < 4; time.Sleep(5 * time.Millisecond) {
				res, err := r.RelayOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if res.Published > 0 {
					t.Fatalf("published %+v with the broker down", res)
				}
				rounds += res.Claimed
			}
			parked, err := r.Parked(ctx, 0, 10)
			if err != nil || len(parked) != 0 || rounds < 4 {
				t.Fatalf("after %d rounds with the broker down: parked %+v (%v); want 4 rounds, none parked", rounds, parked, err)
			}
			recs, err := d.driver.OutboxClaim(ctx, &store.OutboxClaimParams{Limit: 10, Lease: time.Minute, Token: []byte("peek")})
			if err != nil || len(recs) != 1 || recs[0].Attempts != 0 || recs[0].LastError == "" {
				t.Fatalf("the row after the outage: %+v (%v), want 0 attempts counted and its last error kept", recs, err)
			}
			t.Logf("%d rounds down, not counted: %s", rounds, recs[0].LastError)
		})
	}
}

func natsRefused(t *testing.T) (broker.Publisher, string) {
	tg := natsTarget(t)
	return tg.pub, testenv.Name("NOSTREAM_") + ".events" // no stream takes it: no responders
}

func natsOutage(t *testing.T) (broker.Publisher, string, func()) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the embedded NATS server did not start")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}}); err != nil {
		t.Fatal(err)
	}
	pub, err := natsjs.NewPublisher(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, "probe.events", ns.Shutdown
}

func rabbitRefused(t *testing.T) (broker.Publisher, string) {
	tg := rabbitTarget(t)
	return tg.pub, testenv.Name("noqueue_") // no queue is bound to it: unroutable
}

func rabbitOutage(t *testing.T) (broker.Publisher, string, func()) {
	t.Helper()
	tg := rabbitTarget(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.addr()
	pub, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{URL: u.String()})
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ through a proxy", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub, tg.subject, p.close
}

func kafkaRefused(t *testing.T) (broker.Publisher, string) {
	tg := kafkaTarget(t)
	return tg.pub, "no-such-topic"
}

func kafkaOutage(t *testing.T) (broker.Publisher, string, func()) {
	t.Helper()
	c, pub := kafkaCluster(t, "probe", 1)
	return pub, "probe", c.Close
}

func sqsRefused(t *testing.T) (broker.Publisher, string) {
	pub, err := sqs.NewPublisher(sqsenv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, testenv.Name("noqueue_")
}

func sqsOutage(t *testing.T) (broker.Publisher, string, func()) {
	t.Helper()
	var isDown atomic.Bool
	endpoint := sqsenv.Intercepted(t, func(w http.ResponseWriter, r *http.Request, action string) bool {
		if !isDown.Load() {
			return false
		}
		sqsenv.WriteError(w, http.StatusServiceUnavailable, "ServiceUnavailable")
		return true
	})
	pub, err := sqs.NewPublisher(sqsenv.ClientOn(endpoint), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, sqsenv.Queue(t, false), func() { isDown.Store(true) }
}

// proxy forwards TCP connections to a target until close, which closes
// them all: a broker that goes down under its clients.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// The Kafka publisher's probe answers while the cluster does, and fails
// once it is gone.
func TestKafkaProbeDown(t *testing.T) {
	t.Parallel()
	pub, _, down := kafkaOutage(t)
	pr, ok := pub.(broker.Prober)
	if !ok {
		t.Fatalf("%T is not a broker.Prober", pub)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pr.Probe(ctx); err != nil {
		t.Fatalf("Probe of a live cluster: %v", err)
	}
	down()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pr.Probe(ctx); err == nil {
		t.Fatal("Probe of a closed cluster: nil, want an error")
	}
}
