package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/store"
)

// BenchBatch measures ProcessBatchFunc at batch sizes 10, 100 and 1000. Its
// handler makes one multi-row business write for the batch's new messages,
// with [BenchEnv.WriteMany].
//
// It runs side by side with two others. One is the raw batched SQL of the
// same claims and writes, without any inbox logic. That is
// [BenchEnv.HandBatch], with one multi-row claim, one multi-row insert and
// COMMIT. The other is per-message Process of the same messages. Each runs
// with 0 %, 10 % and 99 % duplicates, on 1 and 8 goroutines. BenchBatch
// also runs the batch with Config.NoFingerprint, which stores no
// fingerprint and reads none for a duplicate.
//
// Each reports msgs/s. Compare batch with raw and with process at the same
// size, duplicates and goroutines.
func BenchBatch[TTx any](b *testing.B, h BenchHarness[TTx]) {
	bench := openBench(b, h)
	env := bench.Env
	if _, ok := any(env.Driver).(store.BatchClaimer[TTx]); !ok || bench.WriteMany == nil {
		b.Skipf("%T does not claim batches, or the harness has no BenchEnv.WriteMany", env.Driver)
	}
	ctx := context.Background()
	ib := newInbox(b, env, inbox.Config{Consumer: "bench", Logger: slog.New(slog.DiscardHandler)})
	bare := newInbox(b, env, inbox.Config{Consumer: "bench", Logger: slog.New(slog.DiscardHandler), NoFingerprint: true})
	bh := func(ctx context.Context, tx TTx, ms []*inbox.Message) error {
		keys := make([]string, len(ms))
		for i, m := range ms {
			keys[i] = m.ID
		}
		return bench.WriteMany(ctx, tx, keys)
	}
	retry := retryer(env)
	var seq atomic.Int64
	// ids returns a batch of n IDs, dup‰ of them already processed.
	dupPool := make([]string, 1000)
	for i := range dupPool {
		dupPool[i] = fmt.Sprintf("dup-%d", i)
	}
	for i := 0; i < len(dupPool); i += 100 {
		var ms []inbox.Message
		for _, id := range dupPool[i : i+100] {
			ms = append(ms, inbox.Message{ID: id, Payload: []byte(id)})
		}
		if _, err := ib.ProcessBatchFunc(ctx, ms, bh); err != nil {
			b.Fatal(err)
		}
	}
	batchOf := func(n, dupPct int) []inbox.Message {
		ms := make([]inbox.Message, n)
		for i := range ms {
			id := fmt.Sprintf("n-%d", seq.Add(1))
			if (i*100)/n < dupPct {
				id = dupPool[(int(seq.Add(1))+i)%len(dupPool)]
			}
			ms[i] = inbox.Message{ID: id, Payload: []byte(id)}
		}
		return ms
	}
	paths := map[string]func(ms []inbox.Message) error{
		"batch": func(ms []inbox.Message) error {
			outs, err := ib.ProcessBatchFunc(ctx, ms, bh)
			if err == nil {
				for _, o := range outs {
					if !o.Ack() {
						return fmt.Errorf("%v: %w", o.Status, o.Err)
					}
				}
			}
			return err
		},
		"batch-nofingerprint": func(ms []inbox.Message) error {
			outs, err := bare.ProcessBatchFunc(ctx, ms, bh)
			if err == nil {
				for _, o := range outs {
					if !o.Ack() {
						return fmt.Errorf("%v: %w", o.Status, o.Err)
					}
				}
			}
			return err
		},
		"process": func(ms []inbox.Message) error {
			hd := writer(env)
			for _, m := range ms {
				if out, err := ib.Process(ctx, m, hd); !out.Ack() {
					return fmt.Errorf("%v: %w", out.Status, err)
				}
			}
			return nil
		},
	}
	if bench.HandBatch != nil {
		paths["raw"] = func(ms []inbox.Message) error {
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.ID
			}
			return bench.HandBatch(ctx, "bench", ids)
		}
	}
	for _, size := range []int{10, 100, 1000} {
		for _, dup := range []int{0, 10, 99} {
			for _, g := range []int{1, 8} {
				for _, name := range []string{"raw", "batch", "batch-nofingerprint", "process"} {
					fn := paths[name]
					if fn == nil {
						continue
					}
					b.Run(fmt.Sprintf("size=%d/dup=%d%%/goroutines=%d/%s", size, dup, g, name), func(b *testing.B) {
						if bench.Settle != nil {
							if err := bench.Settle(ctx); err != nil {
								b.Fatal(err)
							}
						}
						// b.N messages, in batches of size.
						batches := (b.N + size - 1) / size
						var next atomic.Int64
						b.ResetTimer()
						parallel(b, g, retry, func(int64) error {
							if next.Add(1) > int64(batches) {
								return nil
							}
							return fn(batchOf(size, dup))
						})
					})
				}
			}
		}
	}
}
