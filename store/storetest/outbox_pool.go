package storetest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/outbox"
	"github.com/inboxkit/inbox/store"
)

// OutboxDriver is a store driver with the outbox's methods.
type OutboxDriver[TTx any] interface {
	store.Driver[TTx]
	store.OutboxWriter[TTx]
	store.OutboxRelayer
}

// OutboxPoolOfOne checks a relay's Run on a driver d whose pool has one
// connection, which the application's writes share. Within 3 s the relay
// must publish what the application wrote. The application's transactions
// must go through, each within a second. Run then holds no connection for
// LISTEN. It polls, and says so once at WARN.
func OutboxPoolOfOne[TTx any](t *testing.T, d OutboxDriver[TTx]) {
	t.Helper()
	ob, err := outbox.New(context.Background(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	var published []string
	r, err := outbox.NewRelay(context.Background(), d, &outbox.RelayConfig{
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)),
		Publish: func(_ context.Context, m *outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			published = append(published, m.ID)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(100 * time.Millisecond) // Run has started (and, before, LISTENed)
	deadline := time.Now().Add(3 * time.Second)
	var want []string
	for i := range 3 {
		id := fmt.Sprintf("one-%d", i)
		want = append(want, id)
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		begin := func(ctx context.Context) (TTx, error) {
			return d.Begin(ctx, &store.BeginParams{LockTimeout: time.Second})
		}
		err := inTx(wctx, d, begin, func(tx TTx) error {
			return ob.Write(wctx, tx, &outbox.Message{ID: id, Destination: "storetest.one"})
		})
		wcancel()
		if err != nil {
			t.Fatalf("the application's write %d through the relay's pool of one connection: %v", i, err)
		}
	}
	for {
		mu.Lock()
		got := slices.Sorted(slices.Values(published)) // published in parallel
		text := logs.String()
		mu.Unlock()
		if slices.Equal(got, want) {
			if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "one connection") {
				t.Fatalf("published, but Run did not warn that it polls for a pool of one connection; its log:\n%s", text)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("published %q within 3 s on a pool of one connection, want %q; the relay's log:\n%s", got, want, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
