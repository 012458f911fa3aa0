package inbox

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
)

// outageDriver is a store whose every error is one that a retry may fix.
type outageDriver struct{ store.Driver[struct{}] }

func (outageDriver) Unrecoverable(error) bool { return false }

// The retry delay after a database error grows with the failures in a row,
// but at most two doublings past the step that covers how long the
// database has been failing. Workers fail fast through a backlog while
// the database is down: a PostgreSQL failover of 0.9 s once made 28
// failures, and nacked the last ones for 5.5 min.
func TestDatabaseBackoffFollowsTheOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A Max of an hour, so that the bound seen is the outage's.
	ib := &Inbox[struct{}]{driver: outageDriver{}, cfg: Config{Backoff: Backoff{Max: time.Hour}}}
	ib.health.init(slog.New(slog.DiscardHandler), "c")
	boom := errors.New("connection refused")
	longest := time.Duration(0)
	for range 50 { // within a moment
		out, err := ib.dbFailed(ctx, "claim", boom)
		if err == nil || out.Status != Retry {
			t.Fatalf("dbFailed: %v, %v; want Retry and an error", out.Status, err)
		}
		longest = max(longest, out.Delay)
	}
	if want := 4 * DefaultBackoffInitial * 11 / 10; longest > want {
		t.Fatalf("50 failures within a moment: delays up to %v, want at most %v: the outage has just begun", longest, want)
	}
	ib.health.mu.Lock()
	ib.health.since = time.Now().Add(-time.Minute) // the outage has lasted a minute
	ib.health.mu.Unlock()
	out, _ := ib.dbFailed(ctx, "claim", boom)
	if min := 50 * time.Second; out.Delay < min {
		t.Fatalf("after a minute of failures: delay %v, want at least %v", out.Delay, min)
	}
	// 64 s is the first step as long as a minute; two doublings past it.
	if most := 256 * time.Second * 11 / 10; out.Delay > most {
		t.Fatalf("after a minute of failures: delay %v, want at most %v", out.Delay, most)
	}
}
