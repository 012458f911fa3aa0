package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/memsource"
)

// Shutdown in the middle of a split batch: the half that committed is
// acked, the half interrupted is nacked, nothing is left unsettled, and
// Consume returns within ShutdownTimeout.
func testBatchSplitShutdown[TTx any](t *testing.T, h Harness[TTx]) {
	env, _ := openBatch(t, h, inbox.Config{})
	if env.SingleWriter {
		t.Skip("no conflicts on a single writer")
	}
	ib := newInbox(t, env, inbox.Config{Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("sd-%d", i))
	}
	src := memsource.New(len(ids))
	for _, id := range ids {
		src.Add(&broker.Message{ID: id, Payload: []byte("payload of " + id)})
	}
	var mu sync.Mutex
	calls := map[string]int{}
	blocked := make(chan struct{})
	var once sync.Once
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		n := calls[m.ID]
		mu.Unlock()
		if m.ID == "sd-5" && n == 1 {
			return env.Transient(ctx, tx)
		}
		if m.ID == "sd-4" && n == 2 { // the second half, after the split
			once.Do(func() { close(blocked) })
			<-ctx.Done()
			return ctx.Err()
		}
		return env.Write(ctx, tx, key(m.ID))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- inbox.Consume(ctx, ib, src, hd, &inbox.ConsumerConfig{Workers: 1, BatchSize: 8,
			BatchLinger: time.Second, ShutdownTimeout: 300 * time.Millisecond})
	}()
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the second half never ran")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return 10 s after its context ended (ShutdownTimeout 300 ms)")
	}
	uncommitted := ackedIfCommitted(t, env, src, ids)
	time.Sleep(100 * time.Millisecond) // the nacks' delay: then queued again
	if n, nacks := src.Pending(), src.Nacks(); n != uncommitted || nacks != int64(uncommitted) {
		t.Fatalf("%d pending, %d nacks; want %d of each: every uncommitted delivery nacked, queued again", n, nacks, uncommitted)
	}
	t.Logf("%d committed and acked, %d nacked", len(ids)-uncommitted, uncommitted)
}

// Hot rows, two consumers, and a shutdown with a short ShutdownTimeout in
// the middle of the splits: every committed message is acked once, every
// other one nacked, none left in flight.
func testBatchHotRowsShutdown[TTx any](t *testing.T, h Harness[TTx]) {
	env, _ := openBatch(t, h, inbox.Config{})
	if env.SingleWriter {
		t.Skip("no conflicts on a single writer")
	}
	const rows = 8
	hot := hotRows(t, env, rows)
	var split splits
	ib := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{&split}, Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("hs-%d", i))
	}
	src := memsource.New(len(ids))
	for _, id := range ids {
		src.Add(&broker.Message{ID: id, Payload: []byte("payload of " + id)})
	}
	row := map[string]int{}
	for i, id := range ids {
		row[id] = (i * 7) % rows
	}
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if err := env.Exec(ctx, tx, fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", hot, row[m.ID])); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for range 2 {
		go func() {
			done <- inbox.Consume(cctx, ib, src, hd, &inbox.ConsumerConfig{Workers: 2, BatchSize: 20, ShutdownTimeout: 150 * time.Millisecond})
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(split.all()) < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("Consume: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the nacks' delay
	uncommitted := ackedIfCommitted(t, env, src, ids)
	if n := src.Pending(); n != uncommitted {
		t.Fatalf("%d pending, want %d (the uncommitted ones, queued again)", n, uncommitted)
	}
	t.Logf("%d committed, %d not; %d splits, %d nacks", len(ids)-uncommitted, uncommitted, len(split.all()), src.Nacks())
}
