package kafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/broker/brokertest"
)

// ConsumeBatch on a Kafka topic of several partitions: each batch holds
// records of one partition in offset order, no two batches of a partition
// are worked on at once, a partition's batches come in order, and every
// record has its effect once.
func TestConsumeBatchKeepsPartitionOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const parts, perPart = 4, 100
	env, addrs := openWithAddrs(t, parts)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for seq := range perPart {
		for p := range int32(parts) {
			id := fmt.Sprintf("%d-%03d", p, seq)
			recs = append(recs, &kgo.Record{Topic: env.Subject, Partition: p, Value: []byte(id),
				Headers: []kgo.RecordHeader{{Key: broker.DefaultIDHeader, Value: []byte(id)}}})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	f := brokertest.NewFixture(t, inbox.Config{})
	var (
		mu      sync.Mutex
		busy    = map[int]bool{}
		last    = map[int]int{}
		batches int
		errs    []error
	)
	bh := func(ctx context.Context, tx *sql.Tx, ms []*inbox.Message) error {
		var p0 int
		if _, err := fmt.Sscanf(ms[0].ID, "%d-", &p0); err != nil {
			return err
		}
		mu.Lock()
		batches++
		if busy[p0] {
			errs = append(errs, fmt.Errorf("partition %d in two batches at once", p0))
		}
		busy[p0] = true
		for _, m := range ms {
			var p, seq int
			if _, err := fmt.Sscanf(m.ID, "%d-%d", &p, &seq); err != nil {
				mu.Unlock()
				return err
			}
			if p != p0 {
				errs = append(errs, fmt.Errorf("a batch mixes partitions %d and %d", p0, p))
			}
			if l, ok := last[p]; ok && seq <= l && m.Deliveries == 1 {
				errs = append(errs, fmt.Errorf("partition %d: record %d after %d, want offset order", p, seq, l))
			}
			last[p] = max(last[p], seq)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // the batch's work, long enough for the workers to overlap
		for _, m := range ms {
			if err := f.Write(ctx, tx, m); err != nil {
				return err
			}
		}
		mu.Lock()
		busy[p0] = false
		mu.Unlock()
		return nil
	}
	src := env.Source(t)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- inbox.ConsumeBatch(cctx, f.Inbox, src, bh, &inbox.ConsumerConfig{Workers: 4, BatchSize: 16})
	}()
	brokertest.Eventually(t, 30*time.Second, "the records were not all processed", func() bool { return f.Count(t) == parts*perPart })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal(errors.New("ConsumeBatch did not return 30 s after its context was canceled"))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	var total int
	if err := f.DB.QueryRow(`SELECT count(*) FROM ledger`).Scan(&total); err != nil || total != parts*perPart {
		t.Fatalf("%d effects for %d records (%v), want one each", total, parts*perPart, err)
	}
	t.Logf("%d records in %d batches", parts*perPart, batches)
}
