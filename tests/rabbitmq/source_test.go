package rabbitmq_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/rabbitmq"
	"github.com/inboxkit/inbox/internal/testenv"
)

func next(t *testing.T, src broker.Source, within time.Duration) broker.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d, err := src.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return d
}

// The AMQP properties and headers become the message's fields; a delayed
// retry keeps them all, and its original routing key, and comes back after
// its delay; the quorum queue's x-delivery-count gives Deliveries.
func TestMessageFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Quorum)
	ch, rk := e.bindDirect(t, e.conn)
	err := ch.PublishWithContext(ctx, "amq.direct", rk, false, false, amqp.Publishing{
		MessageId: "id-1", Type: "order.created", Body: []byte("body"), DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{"s": "text", "n": int32(7), "b": true, "bytes": []byte("raw")},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := e.Source(t)
	want := func(d broker.Delivery, extraHeaders string, deliveries int) {
		t.Helper()
		m := d.Message()
		got := fmt.Sprintf("%s %s %s %s %v %d", m.ID, m.Type, m.Subject, m.Payload, m.Headers, m.Deliveries)
		w := fmt.Sprintf("id-1 order.created %s body map[b:true bytes:raw n:7 s:text%s] %d", rk, extraHeaders, deliveries)
		if got != w {
			t.Fatalf("message\n%s\nwant\n%s", got, w)
		}
	}
	d := next(t, src, 5*time.Second)
	want(d, "", 0) // the first delivery: no x-delivery-count
	if err := d.Nack(ctx, 0); err != nil {
		t.Fatal(err)
	}
	d = next(t, src, 5*time.Second)
	want(d, "", 2) // x-delivery-count gives Deliveries; it is RabbitMQ's, not a header of the message
	start := time.Now()
	if err := d.Nack(ctx, 150*time.Millisecond); err != nil { // the 200 ms bucket
		t.Fatal(err)
	}
	d = next(t, src, 5*time.Second)
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("the retry came back after %v, want the 200 ms bucket's delay", waited)
	}
	want(d, "", 0) // a new message in the queue
	if err := d.Term(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("after Term: %d messages in the queue (%v), want 0", q.Messages, err)
	}
	if d.InProgress(ctx) != nil {
		t.Fatal("InProgress failed")
	}
	if _, ok := src.(broker.LeaseSource); ok {
		t.Fatal("Source is a LeaseSource, but AMQP deliveries have no lease")
	}
}

func TestPublisher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := open(t, rabbitmq.Quorum)
	err := e.Publisher.Publish(ctx, &broker.Message{ID: "x", Subject: "no-such-queue-" + e.queue})
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("publish to no queue: %v, want ErrUnroutable", err)
	}
	if err := e.Publisher.Publish(ctx, &broker.Message{Subject: e.queue}); err == nil {
		t.Fatal("publish without ID succeeded")
	}
	// Concurrent publishes, one of them unroutable, share the confirm
	// channel: each gets its own outcome.
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			subject := e.queue
			if i == 25 {
				subject = "no-such-queue-" + e.queue
			}
			if err := e.Publisher.Publish(ctx, &broker.Message{ID: fmt.Sprint("c-", i), Subject: subject}); err != nil {
				if i != 25 || !errors.Is(err, rabbitmq.ErrUnroutable) {
					t.Errorf("publish %d: %v", i, err)
				}
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	q, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil || st.Messages != 49 || failed.Load() != 1 {
		t.Fatalf("%d messages in the queue (%v), %d publishes failed; want 49 and 1", st.Messages, err, failed.Load())
	}
	if err := e.Publisher.(*rabbitmq.Publisher).Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Publisher.Publish(ctx, &broker.Message{ID: "y", Subject: e.queue}); !errors.Is(err, rabbitmq.ErrPublisherClosed) {
		t.Fatalf("publish after Close: %v, want ErrPublisherClosed", err)
	}
}

// A publish to an exchange that does not exist fails at once with the
// broker's reason (it closes the channel: the confirm is negative), and
// the Publisher's next publish works on a new channel.
func TestPublisherNoExchange(t *testing.T) {
	t.Parallel()
	e := open(t, rabbitmq.Quorum)
	exchange := "no-such-exchange-" + e.queue
	pub, err := rabbitmq.NewPublisher(context.Background(), &rabbitmq.PublisherConfig{URL: testenv.AMQPURL(), Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 2 { // the second on a new channel
		err := pub.Publish(ctx, &broker.Message{ID: fmt.Sprint("x-", i), Subject: e.queue})
		if !errors.Is(err, rabbitmq.ErrNotConfirmed) || !strings.Contains(err.Error(), "NOT_FOUND - no exchange '"+exchange+"'") {
			t.Fatalf("publish %d to a missing exchange: %v; want ErrNotConfirmed with the broker's NOT_FOUND reason", i, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the publishes to a missing exchange took until the deadline")
	}
}

// Deleting the queue is terminal for Next; the Source does not re-create
// the queue.
func TestQueueDeleted(t *testing.T) {
	t.Parallel()
	e := open(t, rabbitmq.Quorum)
	src := e.Source(t)
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(e.queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := src.Next(ctx); !errors.Is(err, rabbitmq.ErrQueueNotFound) {
		t.Fatalf("Next after the queue's deletion: %v, want ErrQueueNotFound", err)
	}
	if _, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil); err == nil {
		t.Fatal("the deleted queue exists again")
	}
	if _, err := src.Next(ctx); !errors.Is(err, rabbitmq.ErrQueueNotFound) {
		t.Fatalf("Next again: %v, want ErrQueueNotFound", err)
	}
	if _, err := rabbitmq.NewSource(ctx, &rabbitmq.Config{URL: testenv.AMQPURL(), Queue: e.queue, NoDeclare: true}); !errors.Is(err, rabbitmq.ErrQueueNotFound) {
		t.Fatalf("NewSource with NoDeclare on a missing queue: %v, want ErrQueueNotFound", err)
	}
}

// After a dropped TCP connection the Source reconnects; when reconnecting
// fails MaxReconnects times in a row, Next returns ErrReconnectFailed.
func TestReconnectLimit(t *testing.T) {
	t.Parallel()
	e := open(t, rabbitmq.Quorum)
	var mu sync.Mutex
	var conns []net.Conn
	dials := 0
	cfg := e.cfg
	cfg.ReconnectDelay = 10 * time.Millisecond
	cfg.MaxReconnects = 3
	cfg.AMQP.Dial = func(network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		dials++
		if dials > 2 {
			return nil, errors.New("test: no more connections")
		}
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	src, err := rabbitmq.NewSource(context.Background(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })

	publish := func(id string) {
		if err := e.Publisher.Publish(context.Background(), &broker.Message{ID: id, Subject: e.queue}); err != nil {
			t.Fatal(err)
		}
	}
	drop := func() {
		mu.Lock()
		defer mu.Unlock()
		_ = conns[len(conns)-1].Close()
	}
	publish("a")
	d := next(t, src, 5*time.Second)
	drop()
	// Reconnected: "a", unacked, comes again on the new connection, and the
	// old delivery can no longer be acked.
	d2 := next(t, src, 10*time.Second)
	if d2.Message().ID != "a" {
		t.Fatalf("after the reconnect got %q, want a again", d2.Message().ID)
	}
	if err := d.Ack(context.Background()); !errors.Is(err, rabbitmq.ErrChannelClosed) {
		t.Fatalf("ack of a delivery from the lost connection: %v, want ErrChannelClosed", err)
	}
	if err := d2.Ack(context.Background()); err != nil {
		t.Fatal(err)
	}
	drop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := src.Next(ctx); !errors.Is(err, rabbitmq.ErrReconnectFailed) {
		t.Fatalf("Next after failed reconnects: %v, want ErrReconnectFailed", err)
	}
}

// The broker closes the consumer's connection (rabbitmqctl
// close_connection) while messages are processed, some in flight: the
// Source reconnects, consumption resumes, and every message has exactly
// one effect.
func TestConnectionClosedByBroker(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		testenv.Unavailable(t, "rabbitmqctl", err)
	}
	e := open(t, rabbitmq.Quorum)
	f := brokertest.NewFixture(t, inbox.Config{Consumer: "rabbitmqtest"})
	const n = 40
	for i := range n / 2 {
		publishID(t, e, fmt.Sprintf("k-%d", i))
	}
	var retried atomic.Bool
	var started atomic.Int32
	gate := make(chan struct{}) // holds handlers in flight until the connection is closed
	slow := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if started.Add(1) > 6 {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		time.Sleep(20 * time.Millisecond)
		if m.ID == "k-3" && !retried.Swap(true) {
			return inbox.RetryAfter(100*time.Millisecond, errors.New("once")) // a delayed retry in the mix
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id) VALUES (?)`, m.ID)
		return err
	}
	src := e.Source(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(ctx, f.Inbox, src, slow, &inbox.ConsumerConfig{Workers: 2}) }()
	var closeGate sync.Once
	defer func() {
		closeGate.Do(func() { close(gate) })
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	brokertest.Eventually(t, 15*time.Second, "the first messages were not processed", func() bool { return f.Count(t) >= 4 })
	closeConnection(t, e.cfg.ConnectionName)
	closeGate.Do(func() { close(gate) })
	if c := f.Count(t); c >= n/2 {
		t.Fatalf("all %d messages were processed before the connection closed: the test closes too late", c)
	}
	for i := n / 2; i < n; i++ {
		publishID(t, e, fmt.Sprintf("k-%d", i))
	}
	brokertest.Eventually(t, 60*time.Second, "not every message was processed after the connection closed", func() bool { return f.Count(t) == n })
	time.Sleep(500 * time.Millisecond) // a message processed twice would show now
	for i := range n {
		var c int
		if err := f.DB.QueryRow(`SELECT count(*) FROM ledger WHERE id = ?`, fmt.Sprintf("k-%d", i)).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c != 1 {
			t.Fatalf("message k-%d has %d effects, want 1", i, c)
		}
	}
}

// closeConnection closes the connection whose client-provided name is
// name through rabbitmqctl, which lists it as
// <pid>\t[{"connection_name","<name>"},...].
func closeConnection(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "--no-table-headers", "pid", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v: %s", err, out)
	}
	closed := 0
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || !strings.Contains(props, `{"connection_name","`+name+`"}`) {
			continue
		}
		if out, err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "test").CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl close_connection %s: %v: %s", pid, err, out)
		}
		closed++
	}
	if closed != 1 {
		t.Fatalf("closed %d connections named %q, want 1; connections:\n%s", closed, name, out)
	}
}

func publishID(t *testing.T, e *env, id string) {
	t.Helper()
	if err := e.Publisher.Publish(context.Background(), &broker.Message{ID: id, Subject: e.queue, Payload: []byte(id)}); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

// Close right after a burst of acks keeps every one of them: the queue is
// empty once the Source is closed. A quorum queue's channel holds back
// settlements while many are in flight, and drops them if it closes
// meanwhile (rabbitmq-server issue 10327), so Close cancels the consumer
// and waits for the broker first. Several rounds, since the loss needs
// the close to come while settlements are held back.
func TestCloseKeepsAcks(t *testing.T) {
	t.Parallel()
	const rounds, n = 5, 200
	for _, qt := range []rabbitmq.QueueType{rabbitmq.Quorum, rabbitmq.Classic} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := open(t, qt)
			ch, err := e.conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			for round := range rounds {
				for i := range n {
					if err := ch.PublishWithContext(ctx, "", e.queue, false, false, amqp.Publishing{
						MessageId: fmt.Sprintf("r%d-%d", round, i), DeliveryMode: amqp.Persistent}); err != nil {
						t.Fatal(err)
					}
				}
				src := e.PrefetchSource(t, n)
				ds := make([]broker.Delivery, n)
				for i := range ds {
					ds[i] = next(t, src, 10*time.Second)
				}
				var wg sync.WaitGroup
				for _, d := range ds {
					wg.Go(func() {
						if err := d.Ack(ctx); err != nil {
							t.Errorf("ack: %v", err)
						}
					})
				}
				wg.Wait()
				if err := src.Close(); err != nil {
					t.Fatal(err)
				}
				q, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				if q.Messages != 0 {
					t.Fatalf("round %d: %d of %d acked messages back in the queue after Close, want 0", round+1, q.Messages, n)
				}
			}
		})
	}
}
