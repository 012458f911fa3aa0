package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox/broker"
)

// A rebalance that revokes a partition and gives it back while a polled
// batch is not yet registered must wait for the registration
// (BlockRebalanceOnPoll): otherwise the batch, fetched under the earlier
// assignment, would count in the new one, and acking it would commit past
// record 0, in flight since before the rebalance and never done.
func TestRebalanceWaitsForThePolledBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const topic = "paused"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	pub := NewPublisher(prod, "", "")
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if err := pub.Publish(ctx, &broker.Message{ID: fmt.Sprint(i), Subject: topic}); err != nil {
				t.Fatal(err)
			}
		}
	}
	source := func(hook func(int)) *Source {
		src, err := newSource(ctx, &Config{Brokers: c.ListenAddrs(), Topic: topic, Group: "g", CommitInterval: 50 * time.Millisecond,
			Options: []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.HeartbeatInterval(100 * time.Millisecond)}}, hook)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		return src
	}
	next := func(src *Source) broker.Delivery {
		t.Helper()
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		d, err := src.Next(nctx)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	var polls int
	publish(0, 1)
	a := source(func(n int) {
		if polls++; polls == 2 { // the batch after record 0
			close(paused)
			<-resume
		}
	})
	if id := next(a).Message().ID; id != "0" { // in flight, never done
		t.Fatalf("first record %s, want 0", id)
	}
	publish(1, 30)
	<-paused         // A has polled records 1..29 and not registered them
	b := source(nil) // joins: A's partition is to be revoked
	time.Sleep(time.Second)
	close(resume) // A registers the batch; the rebalance may go on
	time.Sleep(2 * time.Second)
	_ = b.Close() // leaves: the partition goes back to A
	time.Sleep(2 * time.Second)
	for range 40 { // A hands out 1..29 (and 0 again): all done but record 0
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		d, err := a.Next(nctx)
		cancel()
		if err != nil {
			break
		}
		if d.Message().ID != "0" {
			_ = d.Ack(ctx)
		}
	}
	time.Sleep(300 * time.Millisecond) // past the commit interval
	_ = a.Close()
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := source(nil).Next(nctx)
	if err != nil {
		t.Fatalf("after a restart no record came back (%v): the offset was committed past record 0, never done", err)
	}
	if id := d.Message().ID; id != "0" {
		t.Fatalf("after a restart the group resumed at record %s: record 0, never done, was lost", id)
	}
}
