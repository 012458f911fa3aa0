package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// Bench measures Process and ProcessTx side by side with their baseline.
// The baseline is the same business transaction without the inbox. It
// begins as the application does, inserts into the ledger, and commits.
// Bench runs with 1 and 8 goroutines, and also measures Process of
// duplicates. Each sub-benchmark reports msgs/s. Compare inbox with
// baseline at the same goroutine count.
func Bench[TTx any](b *testing.B, h BenchHarness[TTx]) {
	bench := openBench(b, h)
	env := bench.Env
	// Busy SQLite writers fail over and over: their log lines would cut
	// the benchmark's output.
	ib := newInbox(b, env, inbox.Config{Consumer: "bench", Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	var seq atomic.Int64
	const dups = 512
	for i := range dups {
		id := fmt.Sprintf("dup-%d", i)
		if _, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, writer(env)); err != nil {
			b.Fatal(err)
		}
	}
	hd := writer(env)
	baseline := func(i int64) error {
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			return err
		}
		if err := env.Write(ctx, tx, fmt.Sprintf("b-%d", i)); err != nil {
			_ = env.Driver.Rollback(ctx, tx)
			return err
		}
		return env.Driver.Commit(ctx, tx)
	}
	processNew := processor(ctx, ib, hd, "new-", &seq)
	// ProcessTx in the application's transaction: BEGIN as the
	// application does it, ProcessTx, COMMIT.
	processTx := func(int64) error {
		id := fmt.Sprintf("tx-%d", seq.Add(1))
		tx, err := env.BeginPlain(ctx)
		if err != nil {
			return err
		}
		out, err := ib.ProcessTx(ctx, tx, inbox.Message{ID: id, Payload: []byte(id)}, hd)
		if out.Status != inbox.Processed {
			_ = env.Driver.Rollback(ctx, tx)
			return fmt.Errorf("%v: %w", out.Status, err)
		}
		return env.Driver.Commit(ctx, tx)
	}
	retry := retryer(env)
	extra := map[string]func(int64) error{}
	if _, ok := any(env.Driver).(store.QueuedClaimer); ok && env.QueueWrite != nil {
		extra["queued"] = func(int64) error {
			id := fmt.Sprintf("q-%d", seq.Add(1))
			out, err := ib.ProcessQueued(ctx, inbox.Message{ID: id, Payload: []byte(id)}, func(_ context.Context, q *inbox.Queue, m *inbox.Message) error {
				env.QueueWrite(q, key(m.ID))
				return nil
			})
			if out.Status != inbox.Processed {
				return fmt.Errorf("%v: %w", out.Status, err)
			}
			return nil
		}
	}
	if bench.HandQueued != nil {
		extra["handqueued"] = func(int64) error { return bench.HandQueued(ctx, "bench", fmt.Sprintf("h-%d", seq.Add(1))) }
	}
	// Warm up: open and prepare the connections of every path first, so
	// that none pays for it in its timed run.
	for _, fn := range append([]func(int64) error{baseline, processNew, processTx}, slices.Collect(maps.Values(extra))...) {
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					if err := retrying(retry, fn, int64(-1-g*100-i)); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	settle := func(b *testing.B) {
		if bench.Settle != nil {
			if err := bench.Settle(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("baseline/goroutines=%d", g), func(b *testing.B) {
			settle(b)
			parallel(b, g, retry, baseline)
		})
		b.Run(fmt.Sprintf("inbox/goroutines=%d", g), func(b *testing.B) {
			settle(b)
			parallel(b, g, retry, processNew)
		})
		b.Run(fmt.Sprintf("processtx/goroutines=%d", g), func(b *testing.B) {
			settle(b)
			parallel(b, g, retry, processTx)
		})
		for _, name := range []string{"queued", "handqueued"} {
			if fn := extra[name]; fn != nil {
				b.Run(fmt.Sprintf("%s/goroutines=%d", name, g), func(b *testing.B) {
					settle(b)
					parallel(b, g, retry, fn)
				})
			}
		}
		b.Run(fmt.Sprintf("duplicate/goroutines=%d", g), func(b *testing.B) {
			settle(b)
			parallel(b, g, retry, func(i int64) error {
				id := fmt.Sprintf("dup-%d", i%dups)
				out, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, hd)
				if out.Status != inbox.Duplicate {
					return fmt.Errorf("%v: %w", out.Status, err)
				}
				return nil
			})
		})
	}
}

// processor returns a benchmark step that processes a new message, its
// ID prefix followed by the next number of seq.
func processor[TTx any](ctx context.Context, ib *inbox.Inbox[TTx], h inbox.Handler[TTx], prefix string, seq *atomic.Int64) func(int64) error {
	return func(int64) error {
		id := fmt.Sprintf("%s%d", prefix, seq.Add(1))
		out, err := ib.Process(ctx, inbox.Message{ID: id, Payload: []byte(id)}, h)
		if out.Status != inbox.Processed {
			return fmt.Errorf("%v: %w", out.Status, err)
		}
		return nil
	}
}

// parallel runs fn b.N times on g goroutines, each again after an error
// that retry accepts, and reports msgs/s.
func parallel(b *testing.B, g int, retry func(error) bool, fn func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	b.ResetTimer()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := retrying(retry, fn, i); err != nil {
					once.Do(func() { b.Error(err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// retryer accepts the errors a consumer would retry: marked retryable, or
// transient as env's driver tells.
func retryer[TTx any](env *Env[TTx]) func(error) bool {
	return func(err error) bool { return inbox.IsRetryable(err) || env.Driver.Retryable(err) }
}

// retrying runs fn(i), again after an error that retry accepts (SQLite
// busy behind other writers), as a consumer would, for every path alike.
func retrying(retry func(error) bool, fn func(i int64) error, i int64) error {
	err := fn(i)
	for try := 0; retry(err) && try < 100; try++ {
		err = fn(i)
	}
	return err
}
