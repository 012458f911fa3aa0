package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inboxkit/inbox/broker"
)

// The tests here revoke a partition and give it back to the same member
// with the eager range balancer: a second member joins, then leaves.

// fake is an in-process cluster with a one-partition topic.
type fake struct {
	c     *kfake.Cluster
	addrs []string
	topic string
	pub   *Publisher
}

func newFake(t *testing.T, topic string) *fake {
	t.Helper()
	return newFakeParts(t, topic, 1)
}

// newFakeParts is newFake with a topic of n partitions, which the
// publisher fills round-robin.
func newFakeParts(t *testing.T, topic string, n int32) *fake {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(n, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	pub, err := NewPublisher(prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fake{c: c, addrs: c.ListenAddrs(), topic: topic, pub: pub}
}

// publish publishes records with the IDs from..to-1.
func (f *fake) publish(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := f.pub.Publish(context.Background(), &broker.Message{ID: fmt.Sprint(i), Subject: f.topic}); err != nil {
			t.Fatal(err)
		}
	}
}

// source joins group with the range balancer; hook, if set, is the
// Source's afterPoll.
func (f *fake) source(t *testing.T, group string, hook func(int)) *Source {
	t.Helper()
	src, err := newSource(context.Background(), &Config{Brokers: f.addrs, Topic: f.topic, Group: group, CommitInterval: 50 * time.Millisecond,
		Options: []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}}, hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// partitionState returns the Source's state of partition p, nil when it
// is not assigned.
func (s *Source) partitionState(p int32) *partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[p]
}

// waitFor polls cond until it holds or within has passed.
func waitFor(within time.Duration, cond func() bool) {
	for deadline := time.Now().Add(within); !cond() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// next returns src's next delivery, or nil after within.
func next(src *Source, within time.Duration) broker.Delivery {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d, err := src.Next(ctx)
	if err != nil {
		return nil
	}
	return d
}

// ackAllBut takes n deliveries from src (fewer if none comes for 2 s) and
// acks all but those of IDs in flight, whose handlers never finish.
func ackAllBut(src *Source, n int, inFlight ...string) {
	for range n {
		d := next(src, 2*time.Second)
		if d == nil {
			return
		}
		stuck := false
		for _, id := range inFlight {
			stuck = stuck || d.Message().ID == id
		}
		if !stuck {
			_ = d.Ack(context.Background())
		}
	}
}

// resumesAt fails t unless a new member of group, after the others left,
// is handed record want first.
func (f *fake) resumesAt(t *testing.T, group, want string) {
	t.Helper()
	d := next(f.source(t, group, nil), 10*time.Second)
	switch {
	case d == nil:
		t.Fatalf("after a restart no record came back: the offset was committed past record %s, never done", want)
	case d.Message().ID != want:
		t.Fatalf("after a restart the group resumed at record %s: record %s, never done, was lost", d.Message().ID, want)
	}
}

// Records fetched under one assignment of a partition and still waiting
// to be handed out when the partition is revoked and given back are not
// counted in the new assignment: acking them must not commit past the
// records that were in flight (records 0 and 1 here, never done).
func TestStaleRecordsOfAnEarlierAssignment(t *testing.T) {
	t.Parallel()
	f := newFake(t, "stale")
	f.publish(t, 0, 100)
	a := f.source(t, "g", nil)
	if next(a, 10*time.Second) == nil { // record 0: in flight
		t.Fatal("no first record")
	}
	time.Sleep(200 * time.Millisecond) // the rest of the batch waits to be handed out
	b := f.source(t, "g", nil)         // joins: A's partition is revoked
	time.Sleep(2 * time.Second)
	_ = b.Close() // leaves: the partition goes back to A
	time.Sleep(2 * time.Second)
	ackAllBut(a, 60, "0", "1")
	time.Sleep(300 * time.Millisecond) // past the commit interval
	_ = a.Close()
	f.resumesAt(t, "g", "0")
}

// A rebalance that revokes a partition and gives it back while a polled
// batch is not yet registered must wait for the registration
// (BlockRebalanceOnPoll): otherwise the batch, fetched under the earlier
// assignment, would count in the new one, and acking it would commit past
// record 0, in flight since before the rebalance and never done.
func TestRebalanceWaitsForThePolledBatch(t *testing.T) {
	t.Parallel()
	f := newFake(t, "paused")
	paused, resume := make(chan struct{}), make(chan struct{})
	var polls int
	f.publish(t, 0, 1)
	a := f.source(t, "g", func(int) {
		if polls++; polls == 2 { // the batch after record 0
			close(paused)
			<-resume
		}
	})
	if d := next(a, 10*time.Second); d == nil || d.Message().ID != "0" { // in flight, never done
		t.Fatalf("first delivery %v, want record 0", d)
	}
	f.publish(t, 1, 30)
	<-paused // A has polled records 1..29 and not registered them
	before := a.partitionState(0)
	// B joins, and leaves. Without BlockRebalanceOnPoll the partition is
	// revoked meanwhile and A has it again, in a new state, before the
	// batch is registered; with it, the rebalance waits for the
	// registration, and the first wait times out.
	b := f.source(t, "g", nil)
	waitFor(3*time.Second, func() bool { return a.partitionState(0) != before })
	if a.partitionState(0) == nil { // B has it: give it back to A
		_ = b.Close()
		waitFor(3*time.Second, func() bool { return a.partitionState(0) != nil })
	}
	close(resume) // A registers the batch; the rebalance may go on
	time.Sleep(2 * time.Second)
	_ = b.Close() // (if not yet) the partition goes back to A
	time.Sleep(2 * time.Second)
	ackAllBut(a, 40, "0")
	time.Sleep(300 * time.Millisecond) // past the commit interval
	_ = a.Close()
	f.resumesAt(t, "g", "0")
}

func TestNewPublisherRejectsNilClient(t *testing.T) {
	t.Parallel()
	if _, err := NewPublisher(nil, &PublisherConfig{IDHeader: "X-Id"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("NewPublisher(nil): %v, want ErrInvalidConfig", err)
	}
}

// RedeliveryWindow reads the topic's retention.ms: the broker's default,
// a topic's own, and -1 (no limit) as 0.
func TestRedeliveryWindow(t *testing.T) {
	t.Parallel()
	f := newFake(t, "window")
	src := f.source(t, "window-group", nil)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		set  string // "" keeps the default
		want time.Duration
	}{
		{"", 7 * 24 * time.Hour},
		{"2592000000", 30 * 24 * time.Hour},
		{"-1", 0},
	} {
		if tc.set != "" {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			res := kmsg.NewIncrementalAlterConfigsRequestResource()
			res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, f.topic
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			c.Name, c.Value = "retention.ms", &tc.set
			res.Configs = append(res.Configs, c)
			req.Resources = append(req.Resources, res)
			if _, err := req.RequestWith(ctx, cl); err != nil {
				t.Fatal(err)
			}
		}
		got, err := src.RedeliveryWindow(ctx)
		if err != nil || got != tc.want {
			t.Fatalf("retention.ms %q: window %v, %v; want %v", tc.set, got, err, tc.want)
		}
	}
}

// The Source's fetches wait at most fetchMaxWait on partitions with no new
// record, unless Config.Options says otherwise. franz-go's default is 5 s,
// and a partition assigned to a member whose fetch already waits is not
// fetched before that fetch ends: after a rebalance, the scale-out
// benchmark stood still for 3 to 4 s with its last records on the moved
// partitions.
func TestFetchMaxWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want int32
	}{
		{"default", nil, int32(fetchMaxWait / time.Millisecond)},
		{"Options", []kgo.Opt{kgo.FetchMaxWait(2 * time.Second)}, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, "maxwait-"+tc.name)
			waits := make(chan int32, 64)
			f.c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
				select {
				case waits <- req.(*kmsg.FetchRequest).MaxWaitMillis:
				default:
				}
				return nil, nil, false // handled as usual
			})
			src, err := NewSource(context.Background(), &Config{Brokers: f.addrs, Topic: f.topic, Group: "g", Options: tc.opts})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			select {
			case got := <-waits:
				if got != tc.want {
					t.Fatalf("a fetch waits up to %d ms, want %d", got, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no fetch in 10 s")
			}
		})
	}
}
