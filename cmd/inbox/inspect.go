package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/inboxkit/inbox/internal/replay"
	"github.com/inboxkit/inbox/store"
)

// inspection is what stats and dead-letters use of a store: its
// store.Inspector, with the transaction of a release held here, so that
// the commands need not know the store's transaction type.
type inspection interface {
	Stats(ctx context.Context, p *store.StatsParams) ([]*store.ConsumerStats, error)
	DeadLetterSearch(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterInfo, error)
	DeadLetterGroups(ctx context.Context, p *store.DeadLetterSearchParams) ([]*store.DeadLetterGroup, error)
	DeadLetterGet(ctx context.Context, id int64) (*store.DeadLetterDetail, error)
	DeadLetterDiscard(ctx context.Context, ids []int64) ([]int64, error)
	// release releases dead letter id in a transaction (with lock
	// timeout lt), runs fn, and commits when fn returns nil; fn's error
	// rolls back. A commit that failed is a *commitError.
	release(ctx context.Context, id int64, lt time.Duration, fn func(dl *store.DeadLetter, live bool) error) error
}

// inspectorOf makes an inspection of a driver that implements
// store.Inspector.
type inspectorOf[TTx any] struct {
	store.Inspector[TTx]
	d store.Driver[TTx]
}

func newInspection[TTx any](d interface {
	store.Driver[TTx]
	store.Inspector[TTx]
}) inspection {
	return inspectorOf[TTx]{Inspector: d, d: d}
}

func (i inspectorOf[TTx]) release(ctx context.Context, id int64, lt time.Duration, fn func(*store.DeadLetter, bool) error) error {
	return replay.Release(ctx, i.d, i.Inspector, id, lt, fn, func() { killPoint("replay-before-commit") })
}

// killPointEnv names, for tests only, a point at which the command kills
// itself with SIGKILL (as a crash or kill -9 would), so that a test can
// check what a replay killed there leaves behind.
const killPointEnv = "INBOX_TEST_KILL_POINT"

// killPoint kills the process when killPointEnv names point.
func killPoint(point string) {
	if os.Getenv(killPointEnv) != point {
		return
	}
	fmt.Fprintf(os.Stderr, "inbox: %s=%s: killing myself\n", killPointEnv, point)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL
	}
	select {} // until the signal lands
}
