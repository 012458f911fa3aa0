package storetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// PruneRowsEnv names the environment variable that sets the backlog of
// BenchPrune, in rows. Default [DefaultPruneRows], small enough for CI.
const PruneRowsEnv = "INBOX_PRUNE_ROWS"

// DefaultPruneRows is BenchPrune's backlog without PruneRowsEnv.
const DefaultPruneRows = 20_000

// PruneBatchEnv and PrunePauseEnv name the environment variables that set
// the BatchSize and Pause of BenchPrune's Pruner, to compare settings.
// Pause is a time.ParseDuration string. Default the Pruner's defaults.
const (
	PruneBatchEnv = "INBOX_PRUNE_BATCH"
	PrunePauseEnv = "INBOX_PRUNE_PAUSE"
)

// BenchPrune measures a Pruner on a backlog of expired rows.
//
// The Pruner has its default settings, or those of INBOX_PRUNE_BATCH and
// INBOX_PRUNE_PAUSE. The backlog is filled before each timed run. It is
// settled, or vacuumed, so that it looks like rows that expired long ago.
//   - In alone, the Pruner deletes a backlog of b.N rows. It reports rows/s.
//     Run it with a fixed count, as with -bench 'Prune/alone'
//     -benchtime=1000000x.
//   - In load/pruner=off and load/pruner=on, Process handles b.N messages on
//     8 goroutines. It runs without and with a Pruner working through a
//     backlog of INBOX_PRUNE_ROWS rows at the same time, on tables of the
//     same size. It reports msgs/s, to compare off with on. It also reports
//     pruned/s, the rows the Pruner deleted per second of the run. Give it a
//     fixed count that ends before the backlog does, such as
//     -benchtime=200000x. A backlog pruned before the run ends is logged.
//     The run then understates what pruning costs.
func BenchPrune[TTx any](b *testing.B, h BenchHarness[TTx]) {
	rows := DefaultPruneRows
	if s := os.Getenv(PruneRowsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive number of rows", PruneRowsEnv, s)
		}
		rows = n
	}
	cfg := inbox.PrunerConfig{Retention: time.Hour}
	if s := os.Getenv(PruneBatchEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a positive batch size", PruneBatchEnv, s)
		}
		cfg.BatchSize = n
	}
	if s := os.Getenv(PrunePauseEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration", PrunePauseEnv, s)
		}
		cfg.Pause = d
	}
	bench := openBench(b, h)
	env := bench.Env
	if bench.Expire == nil {
		b.Skip("the harness cannot fill expired rows (BenchEnv.Expire)")
	}
	ctx := context.Background()
	const consumer = "bench"
	ib := newInbox(b, env, inbox.Config{Consumer: consumer})
	var fills atomic.Int64
	// backlog fills the tables with a fresh backlog, untimed, after
	// clearing what is left of the previous one, so that every run starts
	// from the same number of expired rows.
	backlogOf := func(b *testing.B, rows int) {
		b.Helper()
		b.StopTimer()
		defer b.StartTimer()
		for {
			res, err := env.Driver.Prune(ctx, &store.PruneParams{Retention: time.Hour, Limit: 10_000})
			if err != nil {
				b.Fatalf("clear the last backlog: %v", err)
			}
			if res.Deleted == 0 && !res.Busy {
				break
			}
		}
		prefix := fmt.Sprintf("expired-%d-", fills.Add(1))
		if err := bench.Expire(ctx, consumer, prefix, rows, 2*time.Hour); err != nil {
			b.Fatalf("fill %d expired rows: %v", rows, err)
		}
		if bench.Settle != nil {
			if err := bench.Settle(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	backlog := func(b *testing.B) { b.Helper(); backlogOf(b, rows) }
	newPruner := func(b *testing.B, s inbox.PruneStore) *inbox.Pruner {
		b.Helper()
		p, err := inbox.NewPruner(s, &cfg)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	b.Run("alone", func(b *testing.B) {
		s := &countingPruneStore{PruneStore: env.Driver}
		p := newPruner(b, s)
		backlogOf(b, b.N)
		n, err := p.Prune(ctx)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if n < b.N {
			b.Fatalf("pruned %d rows of a backlog of %d", n, b.N)
		}
		s.report(b, b.Elapsed(), "rows/s")
	})
	var seq atomic.Int64
	process := processor(ctx, ib, writer(env), "load-", &seq)
	for _, pruning := range []bool{false, true} {
		name := "load/pruner=off"
		if pruning {
			name = "load/pruner=on"
		}
		b.Run(name, func(b *testing.B) {
			backlog(b)
			s := &countingPruneStore{PruneStore: env.Driver}
			runCtx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			if pruning {
				p := newPruner(b, s)
				wg.Go(func() { _ = p.Run(runCtx) })
			}
			start := time.Now()
			parallel(b, 8, retryer(env), process)
			elapsed := time.Since(start)
			stop()
			wg.Wait()
			if pruning {
				s.report(b, elapsed, "pruned/s")
				if s.drained.Load() {
					b.Logf("the backlog of %d rows was pruned before the run ended: raise %s or lower -benchtime", rows, PruneRowsEnv)
				}
			}
		})
	}
}

// countingPruneStore counts the rows its store's Prune deletes and the
// batches and their time, and notes when a batch came back short: the
// backlog is gone.
type countingPruneStore struct {
	inbox.PruneStore
	deleted, batches atomic.Int64
	busy             atomic.Int64 // nanoseconds in Prune
	drained          atomic.Bool
}

// report reports the rows deleted per second of elapsed, and the mean
// time of a batch.
func (s *countingPruneStore) report(b *testing.B, elapsed time.Duration, unit string) {
	b.ReportMetric(float64(s.deleted.Load())/elapsed.Seconds(), unit)
	if n := s.batches.Load(); n > 0 {
		b.ReportMetric(float64(s.busy.Load())/float64(n)/1e6, "ms/batch")
	}
}

func (s *countingPruneStore) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	start := time.Now()
	res, err := s.PruneStore.Prune(ctx, p)
	if err == nil {
		s.busy.Add(int64(time.Since(start)))
		s.batches.Add(1)
		s.deleted.Add(int64(res.Deleted))
		if !res.Busy && res.Deleted < p.Limit {
			s.drained.Store(true)
		}
	}
	return res, err
}
