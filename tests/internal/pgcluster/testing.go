package pgcluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inboxkit/inbox/internal/testenv"
)

// New starts a Cluster for tb and closes it when tb ends. Without the
// PostgreSQL binaries it skips tb, or fails it when
// INBOX_REQUIRE_SERVICES=1. It fails tb on any other error.
func New(tb testing.TB, opts *Options) *Cluster {
	tb.Helper()
	if _, err := BinDir(); err != nil {
		testenv.Unavailable(tb, "PostgreSQL binaries (initdb, pg_ctl, pg_basebackup)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, opts)
	if errors.Is(err, ErrNoBinaries) {
		testenv.Unavailable(tb, "PostgreSQL binaries", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("pgcluster: close: %v", err)
		}
	})
	tb.Logf("pgcluster: %s primary :%d, standby :%d, started in %v", c.Replication, c.Primary.Port, c.Standby.Port, time.Since(start).Round(time.Millisecond))
	return c
}
