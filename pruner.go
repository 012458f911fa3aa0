package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox/store"
)

// PruneStore is the part of a store driver that a [Pruner] uses. Every
// store.Driver has it.
type PruneStore interface {
	Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error)
}

// PrunerConfig configures a [Pruner]. Zero values mean defaults.
type PrunerConfig struct {
	// Retention is how long an inbox row is kept after its message was
	// first received, by the database's clock. It must be longer than the
	// broker's redelivery window. A message redelivered after its row was
	// pruned is processed again. Less than 1 hour is an error. Default 7
	// days.
	Retention time.Duration
	// Interval is the time between two prunes in Run. Default 1 min.
	Interval time.Duration
	// BatchSize is the most rows one DELETE removes. Default 1000.
	BatchSize int
	// Pause is the least wait between two batches, to leave the database
	// room. The Pruner also waits at least as long as the last batch took,
	// times how many times longer than twice the fastest batch so far it
	// took. That factor is at most 4. So the Pruner backs off when the
	// database is busy and its batches slow down. Default 30 ms.
	Pause time.Duration
	// Hooks are told of each Prune call. Each must implement [PrunedHook],
	// and NewPruner rejects one that does not. A hook's panic is recovered
	// and logged. Default none.
	Hooks []Hook
	// Logger receives errors of Run. Default slog.Default().
	Logger *slog.Logger
}

// Pruner deletes inbox rows and attempt records older than the retention.
//
// It works for every consumer of the tables. Pruners in several processes
// are safe, as one at a time works on a table. Dead letters are never
// pruned.
type Pruner struct {
	store PruneStore
	cfg   PrunerConfig
	hooks hookSet
	// fastest is the quickest full batch so far, in nanoseconds.
	fastest atomic.Int64
}

// NewPruner returns a Pruner on s, which may be any store driver. A nil s
// is an error wrapping [ErrInvalidConfig]. So is an s that holds a nil
// pointer.
func NewPruner(s PruneStore, cfg *PrunerConfig) (*Pruner, error) {
	var c PrunerConfig
	if cfg != nil {
		c = *cfg
	}
	if isNil(s) {
		return nil, fmt.Errorf("%w: nil store (%T)", ErrInvalidConfig, s)
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Retention < MinRetention {
		return nil, fmt.Errorf("%w: Retention %v is shorter than the minimum %v", ErrInvalidConfig, c.Retention, MinRetention)
	}
	if err := validateHooks("PrunerConfig.Hooks", c.Hooks, false); err != nil {
		return nil, err
	}
	if c.Interval <= 0 {
		c.Interval = DefaultPruneInterval
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultPruneBatchSize
	}
	if c.Pause <= 0 {
		c.Pause = DefaultPrunePause
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Pruner{store: s, cfg: c, hooks: newHookSet(c.Hooks, c.Logger)}, nil
}

// Prune deletes every row older than the retention and returns how many it
// deleted.
//
// It deletes in batches of BatchSize, with at least Pause between them. A
// batch may find the table busy, as when another pruner works on it. On
// SQLite, writers may have held the lock for the whole busy timeout. Such a
// batch is tried again up to 3 times, each after twice the last wait. Prune
// then stops early, without error, and leaves the rest to the next call.
func (p *Pruner) Prune(ctx context.Context) (int, error) {
	start := time.Now()
	total, err := p.prune(ctx)
	e := &PruneEvent{Deleted: total, Duration: time.Since(start), Err: err}
	p.hooks.prunedEvent(ctx, e)
	return total, err
}

func (p *Pruner) prune(ctx context.Context) (int, error) {
	total := 0
	// Each batch starts where the last one ended: the rows it deleted stay
	// in the index until vacuum removes them, which a long transaction
	// anywhere on the server delays, and stepping over them again made
	// every batch slower than the last. A row that a transaction older than
	// the retention inserts behind that point waits for the next Prune.
	params := store.PruneParams{Retention: p.cfg.Retention, Limit: p.cfg.BatchSize}
	busy := 0 // busy batches in a row
	for {
		start := time.Now()
		res, err := p.store.Prune(ctx, &params)
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		if !res.Last.IsZero() {
			params.From = res.Last
		}
		total += res.Deleted
		wait := max(p.cfg.Pause, time.Since(start))
		switch {
		case res.Busy:
			// Giving up until the next Interval left a backlog to grow
			// for a minute each time writers kept SQLite's lock from
			// the pruner.
			if busy++; busy > pruneBusyRetries {
				return total, nil
			}
			wait = min(wait<<busy, p.cfg.Interval)
		case res.Deleted < p.cfg.BatchSize:
			return total, nil
		default:
			busy = 0
			wait = max(p.cfg.Pause, p.pace(time.Since(start)))
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// pruneBusyRetries is how often Prune tries a busy batch again.
const pruneBusyRetries = 3

// pace returns the least wait after a full batch that took took: took,
// times how many times longer than twice the fastest batch so far it took
// (at least 1, at most maxPruneSlowdown). A batch slows down when other
// work keeps the database busy, and what pruning costs that work grows
// with the share of the database's time the pruner takes; twice the
// fastest leaves a batch's jitter alone (measured on MariaDB: pacing by
// the fastest itself cut the pruner's speed alone by 12-22 %).
func (p *Pruner) pace(took time.Duration) time.Duration {
	f := time.Duration(p.fastest.Load())
	if f == 0 || took < f {
		p.fastest.Store(int64(took))
		return took
	}
	return time.Duration(float64(took) * pruneSlowdown(took, f))
}

// pruneSlowdown is how many times longer than twice fastest took is, at
// least 1 and at most maxPruneSlowdown.
func pruneSlowdown(took, fastest time.Duration) float64 {
	return min(max(float64(took)/float64(2*fastest), 1), maxPruneSlowdown)
}

// maxPruneSlowdown bounds how much longer pace makes a wait.
const maxPruneSlowdown = 4

// Run prunes at once and then every Interval until ctx is done. It logs
// errors. It returns nil when ctx is done.
func (p *Pruner) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := p.Prune(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.ErrorContext(ctx, "inbox: prune failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
