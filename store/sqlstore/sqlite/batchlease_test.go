package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/inboxtest"
)

// Batches that wait for their turn (the slow start runs one at a time)
// keep their deliveries leased: none expires and comes back as a
// duplicate while it waits. Before the fix, 20 to 30 of these 40
// messages were delivered twice.
func TestBatchesWaitingKeepLeases(t *testing.T) {
	t.Parallel()
	d, _ := migrated(t, filepath.Join(t.TempDir(), "inbox.db"))
	var counts inbox.Counts
	ib, err := inbox.New(t.Context(), d, &inbox.Config{Consumer: "lease", Hooks: []inbox.Hook{&counts},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b := inboxtest.NewBroker(&inboxtest.BrokerConfig{AckWait: 300 * time.Millisecond})
	const n = 40
	for i := range n {
		b.Enqueue(&broker.Message{ID: fmt.Sprintf("lease-%d", i), Subject: "s"})
	}
	slow := func(ctx context.Context, _ *sql.Tx, _ *inbox.Message) error {
		time.Sleep(50 * time.Millisecond) // a batch of 10 takes 500 ms: longer than the lease
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- inbox.Consume(ctx, ib, b.Source(), slow, &inbox.ConsumerConfig{Workers: 4, BatchSize: 10,
			BatchLinger: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for counts.Processed.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	werr := b.WaitSettled(wctx)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if werr != nil || counts.Processed.Load() != n || counts.Duplicates.Load() != 0 || len(b.Acked()) != n {
		t.Fatalf("%s, %d acked, settled: %v; want %d processed, no duplicate, every one acked once", &counts, len(b.Acked()), werr, n)
	}
}
