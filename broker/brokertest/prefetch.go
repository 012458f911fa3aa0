package brokertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/logtest"
)

// testPrefetchWarning: a broker.Prefetcher source tells how many
// deliveries it holds ahead, and Consume warns at start, once, when that
// is below Workers × BatchSize; at exactly Workers × BatchSize it says
// nothing.
func testPrefetchWarning(t *testing.T, h Harness) {
	env := h.Open(t, time.Second)
	src := env.Source(t)
	defer src.Close()
	p, ok := src.(broker.Prefetcher)
	if !ok {
		t.Skipf("%T is not a broker.Prefetcher: it holds no fixed number of deliveries ahead", src)
	}
	n := p.Prefetch()
	if n < 1 {
		t.Fatalf("Prefetch() = %d, want at least 1", n)
	}
	f := NewFixture(t, inbox.Config{})
	for _, tc := range []struct {
		workers, batch int
		warn           bool
	}{
		{1, 1, false},
		{n, 1, false},
		{n + 1, 1, true},
		{1, n, false},
		{1, n + 1, true},
		{2, n, true},
	} {
		logs := &logtest.Buffer{}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := inbox.Consume(ctx, f.Inbox, src, f.Write, &inbox.ConsumerConfig{Workers: tc.workers, BatchSize: tc.batch,
			Retention: -1, Logger: logs.Logger()})
		cancel()
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
		lines := logs.Lines("fewer deliveries ahead")
		switch {
		case !tc.warn && len(lines) != 0:
			t.Fatalf("prefetch %d, %d workers × batches of %d: logged %q, want nothing", n, tc.workers, tc.batch, lines)
		case tc.warn && (len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], fmt.Sprintf("prefetch=%d ", n))):
			t.Fatalf("prefetch %d, %d workers × batches of %d: logged %q, want one warning with prefetch=%d", n, tc.workers, tc.batch, lines, n)
		}
	}
}
