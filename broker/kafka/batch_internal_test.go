package kafka

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/broker"
)

// batchLog checks the batches of NextBatch as workers take and settle
// them: one partition each, in offset order, a partition in one batch at a
// time, and its first deliveries in offset order across batches.
type batchLog struct {
	mu      sync.Mutex
	busy    map[int32]bool
	last    map[int32]int64 // highest offset handed out for the first time
	acked   map[string]int
	batches int
	errs    []string
}

func newBatchLog() *batchLog {
	return &batchLog{busy: map[int32]bool{}, last: map[int32]int64{}, acked: map[string]int{}}
}

func (l *batchLog) failf(format string, args ...any) {
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// take records a batch taken; it returns the batch's partition.
func (l *batchLog) take(ds []broker.Delivery) int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches++
	p := ds[0].(*delivery).r.Partition
	if l.busy[p] {
		l.failf("partition %d handed out in a batch while another batch of it was not settled", p)
	}
	l.busy[p] = true
	prev := int64(-1)
	for _, bd := range ds {
		d := bd.(*delivery)
		if d.r.Partition != p {
			l.failf("a batch mixes partitions %d and %d", p, d.r.Partition)
		}
		if d.r.Offset <= prev {
			l.failf("partition %d: offset %d after %d in one batch, want offset order", p, d.r.Offset, prev)
		}
		prev = d.r.Offset
		if d.msg.Deliveries == 1 {
			if last, ok := l.last[p]; ok && d.r.Offset <= last {
				l.failf("partition %d: offset %d handed out after %d, want offset order across batches", p, d.r.Offset, last)
			}
			l.last[p] = d.r.Offset
		}
	}
	return p
}

// settled records that the batch of partition p is about to be settled.
func (l *batchLog) settled(p int32, acked []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy[p] = false
	for _, id := range acked {
		l.acked[id]++
	}
}

// NextBatch hands out batches of one partition in offset order, one batch
// of a partition at a time, to workers that nack some records once: every
// record is acked once, and the group resumes after the last.
func TestNextBatchKeepsPartitionOrder(t *testing.T) {
	t.Parallel()
	const n, parts, workers = 600, 4, 4
	for _, tc := range []struct {
		name string
		max  int
	}{
		{"one", 1},
		{"seven", 7},
		{"hundred", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeParts(t, "order-"+tc.name, parts)
			f.publish(t, 0, n)
			src := f.source(t, "g", nil)
			log := newBatchLog()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var total sync.Mutex
			ackedAll := make(chan struct{})
			count := 0
			for range workers {
				wg.Go(func() {
					for {
						ds, err := src.NextBatch(ctx, tc.max)
						if err != nil {
							return
						}
						if len(ds) == 0 || len(ds) > tc.max {
							log.mu.Lock()
							log.failf("NextBatch(%d) returned %d deliveries", tc.max, len(ds))
							log.mu.Unlock()
							return
						}
						p := log.take(ds)
						time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // the batch's transaction
						var acked []string
						for _, d := range ds {
							if id := d.Message().ID; len(id)%2 == 0 && d.Message().Deliveries == 1 && id[len(id)-1] == '3' {
								continue // nacked below, once
							}
							acked = append(acked, d.Message().ID)
						}
						log.settled(p, acked)
						for _, d := range ds {
							m := d.Message()
							if len(m.ID)%2 == 0 && m.Deliveries == 1 && m.ID[len(m.ID)-1] == '3' {
								_ = d.Nack(ctx, 10*time.Millisecond)
							} else {
								_ = d.Ack(ctx)
							}
						}
						total.Lock()
						if count += len(acked); count == n {
							close(ackedAll)
						}
						total.Unlock()
					}
				})
			}
			select {
			case <-ackedAll:
			case <-ctx.Done():
			}
			cancel()
			wg.Wait()
			log.mu.Lock()
			defer log.mu.Unlock()
			for _, e := range log.errs {
				t.Error(e)
			}
			for i := range n {
				if k := log.acked[fmt.Sprint(i)]; k != 1 {
					t.Errorf("record %d acked %d times, want once", i, k)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("%d records in %d batches", n, log.batches)
			time.Sleep(300 * time.Millisecond) // past the commit interval
			_ = src.Close()
			if d := next(f.source(t, "g", nil), time.Second); d != nil {
				t.Fatalf("after a restart the group was handed record %s again: the offsets were not committed past the acked records", d.Message().ID)
			}
		})
	}
}

// A partition held by a batch that was never settled is revoked and given
// back: the new assignment is not held by the old batch, whose records
// come back first, and acking the old batch then commits nothing past
// them.
func TestHeldPartitionRevoked(t *testing.T) {
	t.Parallel()
	f := newFake(t, "held")
	f.publish(t, 0, 50)
	a := f.source(t, "g", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := a.NextBatch(ctx, 10)
	if err != nil || len(old) == 0 || old[0].Message().ID != "0" {
		t.Fatalf("first batch %v, %v: want one starting at record 0", old, err)
	}
	b := f.source(t, "g", nil) // joins: A's partition is revoked
	time.Sleep(2 * time.Second)
	_ = b.Close() // leaves: the partition goes back to A
	time.Sleep(2 * time.Second)
	got, err := a.NextBatch(ctx, 10)
	if err != nil {
		t.Fatalf("after the partition came back: %v, want a batch (the old batch's hold must not carry over)", err)
	}
	if got[0].Message().ID != "0" {
		t.Fatalf("after the partition came back the batch starts at record %s, want 0 (read again from the committed offset)", got[0].Message().ID)
	}
	for _, d := range old { // the old assignment's: acking them changes nothing
		_ = d.Ack(ctx)
	}
	time.Sleep(300 * time.Millisecond) // past the commit interval
	_ = a.Close()
	f.resumesAt(t, "g", "0")
}

// A record of a batch that is nacked holds its partition until it comes
// back: the next batch starts with it, so that the records after it do not
// commit before it (in-partition order through a retry).
func TestNackedRecordHoldsItsPartition(t *testing.T) {
	t.Parallel()
	f := newFake(t, "nack-order")
	f.publish(t, 0, 10)
	src := f.source(t, "g", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ds []broker.Delivery
	waitFor(10*time.Second, func() bool { // the first batch may be short: a poll's records
		if len(ds) > 0 {
			return true
		}
		got, err := src.NextBatch(ctx, 3)
		ds = got
		return err == nil && len(got) > 0
	})
	if len(ds) < 2 {
		t.Fatalf("the first batch holds %d records, want at least 2", len(ds))
	}
	_ = ds[0].Ack(ctx)
	_ = ds[1].Nack(ctx, 200*time.Millisecond)
	for _, d := range ds[2:] {
		_ = d.Ack(ctx)
	}
	next, err := src.NextBatch(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m := next[0].Message(); m.ID != ds[1].Message().ID || m.Deliveries != 2 {
		t.Fatalf("after record %s was nacked, the next batch starts with record %s (delivery %d), want record %s again: the records after it went first",
			ds[1].Message().ID, m.ID, m.Deliveries, ds[1].Message().ID)
	}
}

// franz-go may move a partition's fetch back within an assignment: it
// resets to the start when it takes an answer for lost data, as it does
// after kfake bumps the leader epoch with no record in the new epoch. The
// records fetched again then come in offset order, not after those still
// queued, and not mixed with a waiting retry.
func TestRewoundFetchKeepsOffsetOrder(t *testing.T) {
	t.Parallel()
	f := newFake(t, "rewind")
	f.publish(t, 0, 10)
	src := f.source(t, "g", nil)
	queued := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		if p := src.parts[0]; p != nil {
			return len(p.queue)
		}
		return 0
	}
	waitFor(10*time.Second, func() bool { return queued() == 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := src.NextBatch(ctx, 3)
	if err != nil || len(first) != 3 {
		t.Fatalf("first batch %d records, %v: want 3", len(first), err)
	}
	_ = first[0].Ack(ctx)
	_ = first[1].Nack(ctx, time.Second) // a retry waits while the fetch moves back
	_ = first[2].Ack(ctx)
	if err := f.c.MoveTopicPartition(f.topic, 0, f.c.LeaderFor(f.topic, 0)); err != nil { // the epoch bumped
		t.Fatal(err)
	}
	waitFor(10*time.Second, func() bool { return queued() >= 10 }) // fetched again from the start
	var got []string
	for {
		bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := src.NextBatch(bctx, 3)
		bcancel()
		if err != nil {
			break
		}
		for _, d := range ds {
			got = append(got, d.Message().ID)
			_ = d.Ack(ctx)
		}
	}
	// Read again from the start: every record, in offset order.
	if want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}; !slices.Equal(got, want) {
		t.Fatalf("after the fetch moved back, records were handed out as %v: want %v", got, want)
	}
}

// A partition held by a batch in flight, or waiting for the retry of one
// of its records, keeps its queued records out of the Source's room: the
// other partitions are still fetched. After the first records, more are
// published; the other partition's must come while the held partition's
// queue still holds more than queueLimit.
func TestHeldPartitionLeavesRoom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// hold keeps the partition of the first batch held, and returns
		// the deliveries it did not settle.
		hold func(ctx context.Context, ds []broker.Delivery) []broker.Delivery
		// paused: the held partition's fetching is paused meanwhile.
		paused bool
	}{
		{"batch in flight", func(_ context.Context, ds []broker.Delivery) []broker.Delivery { return ds }, false},
		{"retry waiting", func(ctx context.Context, ds []broker.Delivery) []broker.Delivery {
			_ = ds[0].Nack(ctx, time.Minute) // waits far longer than the test
			for _, d := range ds[1:] {
				_ = d.Ack(ctx)
			}
			return nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const perPart = 2 * queueLimit
			f := newFakeParts(t, "held-room", 2)
			f.publish(t, 0, 2*perPart) // round-robin: perPart on each partition
			src := f.source(t, "g", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first, err := src.NextBatch(ctx, 16)
			if err != nil {
				t.Fatal(err)
			}
			held := first[0].(*delivery).r.Partition
			unsettled := tc.hold(ctx, first)
			defer func() {
				for _, d := range unsettled {
					_ = d.Ack(ctx)
				}
			}()
			taken, more := 0, false
			deadline := time.Now().Add(15 * time.Second)
			for taken < 2*perPart && time.Now().Before(deadline) {
				if taken >= perPart && !more {
					src.mu.Lock()
					n := len(src.parts[held].queue)
					src.mu.Unlock()
					if n <= queueLimit {
						t.Fatalf("partition %d, held, queued %d records: want more than %d for the test to mean anything", held, n, queueLimit)
					}
					f.publish(t, 2*perPart, 4*perPart) // perPart more on each
					more = true
				}
				bctx, bcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				ds, err := src.NextBatch(bctx, 16)
				bcancel()
				if err != nil {
					continue
				}
				if p := ds[0].(*delivery).r.Partition; p == held {
					t.Fatalf("partition %d handed out a batch while held", p)
				}
				for _, d := range ds {
					_ = d.Ack(ctx)
				}
				taken += len(ds)
			}
			if taken < 2*perPart {
				t.Fatalf("partition %d held: the other partition handed out %d of its %d records in 15 s", held, taken, 2*perPart)
			}
			paused := slices.Contains(src.cl.PauseFetchPartitions(nil)[f.topic], held)
			if paused != tc.paused {
				t.Fatalf("partition %d held: its fetching paused %v, want %v", held, paused, tc.paused)
			}
		})
	}
}

// Batches run side by side on as many partitions as there are workers,
// even when each partition holds more records than the Source queues
// ahead. franz-go hands a fetch out partition after partition: a Source
// that polled a few records at a time queued one partition only, and
// NextBatch, which holds a partition per batch, had one batch to give.
func TestBatchesHoldManyPartitionsAtOnce(t *testing.T) {
	t.Parallel()
	const parts, perPart, batches = 8, queueLimit + 88, 4
	f := newFakeParts(t, "side-by-side", parts)
	f.publish(t, 0, parts*perPart) // round-robin: perPart on each partition
	src := f.source(t, "g", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []broker.Delivery
	seen := map[int32]bool{}
	for len(seen) < batches {
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := src.NextBatch(bctx, 16)
		bcancel()
		if err != nil {
			t.Fatalf("with %d batches held, on partitions %v, the next batch: %v; want %d batches at once",
				len(seen), slices.Sorted(maps.Keys(seen)), err, batches)
		}
		part := ds[0].(*delivery).r.Partition
		if seen[part] {
			t.Fatalf("partition %d handed out a second batch while its first is held", part)
		}
		seen[part] = true
		held = append(held, ds...)
	}
	for _, d := range held {
		_ = d.Ack(ctx)
	}
}
