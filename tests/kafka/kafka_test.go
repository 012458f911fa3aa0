// Package kafka_test holds the tests of package kafka that need a database
// (broker/brokertest's fixture, on SQLite; its benchmarks, on PostgreSQL).
// They live apart from the adapter so that go mod tidy in a program that
// imports the adapter does not load them, and so downloads no database
// driver for them.
package kafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
	"github.com/inboxkit/inbox/broker/kafka"
	"github.com/inboxkit/inbox/internal/testenv"
)

// cluster starts an in-process Kafka (franz-go's kfake) with topic of
// partitions partitions, closed when tb ends.
func cluster(tb testing.TB, topic string, partitions int32) []string {
	return fakeCluster(tb, topic, partitions).ListenAddrs()
}

func fakeCluster(tb testing.TB, topic string, partitions int32) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// producer is a client that produces to addrs, closed when tb ends. It
// spreads records over the partitions round-robin, so that every
// partition gets its share of a test's few records (and the suite's ack
// check knows that n markers land in n partitions).
func producer(tb testing.TB, addrs []string) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchMaxBytes(maxRecordBytes))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// maxRecordBytes bounds a record's size in the producer: franz-go's
// default, below the broker's default message.max.bytes.
const maxRecordBytes = 1_000_012

// open makes a fresh cluster and topic; every Source joins one group.
func open(tb testing.TB, partitions int32) *brokertest.Env {
	env, _ := openWithAddrs(tb, partitions)
	return env
}

// openWithAddrs is open that also returns the cluster's addresses.
func openWithAddrs(tb testing.TB, partitions int32) (*brokertest.Env, []string) {
	tb.Helper()
	topic := testenv.Name("inboxtest_")
	addrs := cluster(tb, topic, partitions)
	cl := producer(tb, addrs)
	pub, err := kafka.NewPublisher(cl, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &brokertest.Env{
		Source: func(tb testing.TB) broker.Source {
			src, err := kafka.NewSource(context.Background(), &kafka.Config{Brokers: addrs, Topic: topic, Group: "consumer",
				CommitInterval: 100 * time.Millisecond})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { src.Close() })
			return src
		},
		Publisher:  pub,
		Subject:    topic,
		Partitions: int(partitions),
		PublishNoID: func(ctx context.Context, payload []byte) error {
			return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: payload}).FirstErr()
		},
		Nowhere:    topic + "_nowhere", // kfake creates no topic on a produce
		MaxPayload: maxRecordBytes,
	}, addrs
}

// features: the Source counts the deliveries it hands out. A record has
// no AckWait and no lease: the group reads it again from the committed
// offset once its Source is closed (or its partition moves), however long
// it is worked on. A record has a key; the producer refuses a record over
// its max batch size. Kafka does not deduplicate a re-publish (an
// idempotent producer only drops its own retries), and carries any
// header: string names, byte values. No OwnHeaders: a broker adds no
// record header, every one is the producer's.
var features = brokertest.Features{Deliveries: true, Keys: true, PayloadLimit: true, PublishTime: true}

func TestBroker(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, _ time.Duration) *brokertest.Env { return open(tb, 1) }})
}

func TestBrokerPartitions(t *testing.T) {
	brokertest.Run(t, brokertest.Harness{Features: features, Open: func(tb testing.TB, _ time.Duration) *brokertest.Env { return open(tb, 3) }})
}

func BenchmarkEndToEnd(b *testing.B) {
	brokertest.Bench(b, brokertest.Harness{Open: func(tb testing.TB, _ time.Duration) *brokertest.Env { return open(tb, 4) }})
}

func BenchmarkPublish(b *testing.B) {
	brokertest.BenchPublish(b, brokertest.Harness{Open: func(tb testing.TB, _ time.Duration) *brokertest.Env { return open(tb, 4) }})
}

// A record waiting for a retry holds its partition's committed offset back
// while the records after it are processed and acked: a crash before the
// retry loses nothing, and the records after it come back as duplicates.
func TestRetryHoldsTheOffset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, addrs := openWithAddrs(t, 1)
	admin := kadm.NewClient(producer(t, addrs))
	committed := func() int64 {
		offs, err := admin.FetchOffsets(ctx, "consumer")
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := offs.Lookup(env.Subject, 0); ok {
			return o.At
		}
		return -1
	}
	hooks := &inbox.Counts{}
	f := brokertest.NewFixture(t, inbox.Config{Hooks: []inbox.Hook{hooks}})
	var failedOnce atomic.Bool
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		if m.ID == "first" && failedOnce.CompareAndSwap(false, true) {
			return inbox.RetryAfter(time.Hour, errors.New("later"))
		}
		return f.Write(ctx, tx, m)
	}
	for _, id := range []string{"first", "second", "third"} {
		if err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	stop := f.Consume(t, env.Source(t), handler, &inbox.ConsumerConfig{Workers: 2})
	brokertest.Eventually(t, 10*time.Second, "second and third were not processed", func() bool {
		return f.Effects(t, "second") == 1 && f.Effects(t, "third") == 1
	})
	time.Sleep(300 * time.Millisecond) // past the commit interval: a wrong offset would be committed now
	if at := committed(); at > 0 {
		t.Fatalf("committed offset %d while the record at 0 waits for its retry", at)
	}
	if err := stop(); err != nil { // the process dies an hour before the retry
		t.Fatal(err)
	}
	if at := committed(); at > 0 {
		t.Fatalf("committed offset %d after Close, with the record at 0 not done", at)
	}
	stop = f.Consume(t, env.Source(t), handler, nil)
	brokertest.Eventually(t, 15*time.Second, "the record waiting for its retry was lost", func() bool { return f.Effects(t, "first") == 1 })
	brokertest.Eventually(t, 5*time.Second, "second and third did not come back", func() bool { return hooks.Duplicates.Load() == 2 })
	brokertest.Eventually(t, 5*time.Second, "the offset was not committed past the three records", func() bool { return committed() == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"first", "second", "third"} {
		if n := f.Effects(t, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", id, n)
		}
	}
}

// Consumers join and leave the group while it consumes several partitions:
// every message's effect is there exactly once, none is lost.
func TestRebalance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := open(t, 4)
	f := brokertest.NewFixture(t, inbox.Config{})
	const n = 400
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("m-%d", i)
			if err := env.Publisher.Publish(ctx, &broker.Message{ID: id, Subject: env.Subject, Payload: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var handled atomic.Int64
	handler := func(ctx context.Context, tx *sql.Tx, m *inbox.Message) error {
		handled.Add(1)
		time.Sleep(2 * time.Millisecond)
		return f.Write(ctx, tx, m)
	}
	processed := func() int {
		var k int
		if err := f.DB.QueryRow(`SELECT count(DISTINCT id) FROM ledger`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	publish(0, n/2)
	stopA := f.Consume(t, env.Source(t), handler, nil)
	brokertest.Eventually(t, 10*time.Second, "A processed nothing", func() bool { return handled.Load() > 20 })
	stopB := f.Consume(t, env.Source(t), handler, nil) // joins: the partitions are shared out again
	publish(n/2, n)
	brokertest.Eventually(t, 10*time.Second, "little progress after B joined", func() bool { return processed() > n/2+20 })
	if err := stopA(); err != nil { // A leaves with records in flight
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, "messages were lost", func() bool { return processed() == n })
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	var total int
	if err := f.DB.QueryRow(`SELECT count(*) FROM ledger`).Scan(&total); err != nil || total != n {
		t.Fatalf("%d effects for %d messages (%v): some twice", total, n, err)
	}
	t.Logf("%d messages, %d handler runs across the rebalances", n, handled.Load())
}

// What a record carries reaches the Message: the ID and type headers, the
// other headers, the topic; without the ID header the ID is empty, or
// topic/partition/offset with IDFromOffset.
func TestMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, addrs := openWithAddrs(t, 1)
	if err := env.Publisher.Publish(ctx, &broker.Message{ID: "m-1", Subject: env.Subject, Type: "credit",
		Payload: []byte("p"), Headers: map[string]string{"trace": "t-1", "bin": "\x00\xff"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.PublishNoID(ctx, []byte("no id")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		idFromOffset bool
		wantSecond   string
	}{
		{"no ID", false, ""},
		{"ID from offset", true, env.Subject + "/0/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := kafka.NewSource(ctx, &kafka.Config{Brokers: addrs, Topic: env.Subject, Group: testenv.Name("g_"), IDFromOffset: tc.idFromOffset})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			first, err := src.Next(nctx)
			if err != nil {
				t.Fatal(err)
			}
			m := first.Message()
			if m.ID != "m-1" || m.Type != "credit" || string(m.Payload) != "p" || m.Subject != env.Subject ||
				m.Headers["trace"] != "t-1" || m.Headers["bin"] != "\x00\xff" {
				t.Fatalf("first message %+v", m)
			}
			second, err := src.Next(nctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := second.Message().ID; got != tc.wantSecond {
				t.Fatalf("ID of a record without the header: %q, want %q", got, tc.wantSecond)
			}
		})
	}
}

func TestNewSourceRejects(t *testing.T) {
	t.Parallel()
	brokers := []string{"127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  *kafka.Config
	}{
		{"nil", nil},
		{"no brokers", &kafka.Config{Topic: "t", Group: "g"}},
		{"no topic", &kafka.Config{Brokers: brokers, Group: "g"}},
		{"no group", &kafka.Config{Brokers: brokers, Topic: "t"}},
		{"option franz-go refuses", &kafka.Config{Brokers: brokers, Topic: "t", Group: "g",
			Options: []kgo.Opt{kgo.BrokerMaxWriteBytes(10)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if src, err := kafka.NewSource(context.Background(), tc.cfg); !errors.Is(err, kafka.ErrInvalidConfig) {
				if src != nil {
					_ = src.Close()
				}
				t.Fatalf("NewSource(%+v): %v, want kafka.ErrInvalidConfig", tc.cfg, err)
			}
		})
	}
}

// A fetch error that franz-go does not retry (here the broker answers every
// fetch with TOPIC_AUTHORIZATION_FAILED) ends Consume with that error
// instead of being logged for ever.
func TestTerminalFetchError(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("inboxtest_")
	c := fakeCluster(t, topic, 1)
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = fr.Version
		for _, ft := range fr.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = ft.Topic, ft.TopicID
			for _, fp := range ft.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = fp.Partition
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	consumeUntilTerminal(t, c, topic, kerr.TopicAuthorizationFailed)
}

// consumeUntilTerminal runs Consume on topic and checks that it returns
// want, a terminal error, within 15 s.
func consumeUntilTerminal(t *testing.T, c *kfake.Cluster, topic string, want error) {
	t.Helper()
	src, err := kafka.NewSource(context.Background(), &kafka.Config{Brokers: c.ListenAddrs(), Topic: topic, Group: "denied"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f := brokertest.NewFixture(t, inbox.Config{})
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(context.Background(), f.Inbox, src, f.Write, nil) }()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("Consume returned %v, want %v", err, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Consume did not return %v within 15 s", want)
	}
}

// A member kicked out of its group (UNKNOWN_MEMBER_ID, as a coordinator
// says after a session timeout under load) rejoins: franz-go does that by
// itself and reports the lost session in a poll; it is not terminal.
// Before, Consume stopped with "unable to join group session".
func TestGroupSessionLostRejoins(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("inboxtest_")
	c := fakeCluster(t, topic, 1)
	cl := producer(t, c.ListenAddrs())
	src, err := kafka.NewSource(context.Background(), &kafka.Config{Brokers: c.ListenAddrs(), Topic: topic, Group: "kicked"})
	if err != nil {
		t.Fatal(err)
	}
	f := brokertest.NewFixture(t, inbox.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inbox.Consume(ctx, f.Inbox, src, f.Write, nil) }()
	defer src.Close()
	pub, err := kafka.NewPublisher(cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	publish := func(id string) {
		if err := pub.Publish(ctx, &broker.Message{ID: id, Subject: topic, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	processed := func(id string) {
		brokertest.Eventually(t, 20*time.Second, id+" processed", func() bool {
			select {
			case err := <-done:
				t.Fatalf("Consume returned %v while the member rejoins", err)
			default:
			}
			return f.Effects(t, id) == 1
		})
	}
	publish("before")
	processed("before")
	var kicked atomic.Bool
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		hr := req.(*kmsg.HeartbeatRequest)
		resp := hr.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = hr.Version
		resp.ErrorCode = kerr.UnknownMemberID.Code
		kicked.Store(true)
		return resp, nil, true
	})
	brokertest.Eventually(t, 20*time.Second, "a heartbeat answered UNKNOWN_MEMBER_ID", kicked.Load)
	publish("after")
	processed("after")
}

// A group session lost for a reason no rejoin fixes (an invalid session
// timeout) stops Consume with that error.
func TestGroupSessionRefusedIsTerminal(t *testing.T) {
	t.Parallel()
	topic := testenv.Name("inboxtest_")
	c := fakeCluster(t, topic, 1)
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		jr := req.(*kmsg.JoinGroupRequest)
		resp := jr.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = jr.Version
		resp.ErrorCode = kerr.InvalidSessionTimeout.Code
		return resp, nil, true
	})
	consumeUntilTerminal(t, c, topic, kerr.InvalidSessionTimeout)
}
