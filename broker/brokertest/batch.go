package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
)

// Batch consumption (ConsumeBatch): good messages processed once each,
// a re-published one skipped, a poison message dead-lettered at
// MaxAttempts while its batch's neighbours commit, each delivery acked by
// its own outcome, and batches of more than one message formed.
func testBatchConsume(t *testing.T, h Harness) {
	ctx := context.Background()
	env := h.Open(t, time.Second)
	counts := &inbox.Counts{}
	f := NewFixture(t, inbox.Config{MaxAttempts: 2, Hooks: []inbox.Hook{counts},
		Backoff: inbox.Backoff{Initial: 50 * time.Millisecond, Max: 100 * time.Millisecond}})
	if _, err := f.Inbox.ProcessBatch(ctx, nil, f.Write); errors.Is(err, inbox.ErrNoBatch) {
		t.Skipf("the fixture's store cannot claim batches yet: %v", err)
	}
	const n = 40
	for i := range n {
		publish(t, env, fmt.Sprintf("b-%02d", i))
	}
	publish(t, env, "b-07") // again: a duplicate, or dropped by the broker
	var mu sync.Mutex
	largest := 0
	bh := func(ctx context.Context, tx *sql.Tx, ms []*inbox.Message) error {
		mu.Lock()
		largest = max(largest, len(ms))
		mu.Unlock()
		for _, m := range ms {
			if m.ID == "b-13" {
				return errors.New("poison in the batch")
			}
			if err := f.Write(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}
	src := env.Source(t)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- inbox.ConsumeBatch(cctx, f.Inbox, src, bh, &inbox.ConsumerConfig{BatchSize: 8, BatchLinger: 50 * time.Millisecond})
	}()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("ConsumeBatch did not return 30 s after its context was canceled")
		}
	}
	Eventually(t, 20*time.Second, "the batch was not consumed", func() bool {
		select {
		case err := <-done:
			t.Fatalf("ConsumeBatch returned early: %v", err)
		default:
		}
		return counts.Processed.Load() == n-1 && counts.DeadLettered.Load() == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	src.Close()
	requireAcked(t, h, env, time.Second)
	for i := range n {
		id := fmt.Sprintf("b-%02d", i)
		want := 1
		if id == "b-13" {
			want = 0
		}
		if got := f.Effects(t, id); got != want {
			t.Fatalf("%s: %d effects, want %d", id, got, want)
		}
	}
	if largest < 2 {
		t.Fatalf("the largest batch had %d message(s): no batch was formed", largest)
	}
	dls, err := f.Inbox.DeadLetters(ctx, nil)
	if err != nil || len(dls) != 1 || dls[0].Message.ID != "b-13" || dls[0].Attempts != 2 {
		t.Fatalf("dead letters %+v %v, want b-13 after 2 attempts", dls, err)
	}
}
