package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxkit/inbox"
	"github.com/inboxkit/inbox/broker"
	"github.com/inboxkit/inbox/internal/logtest"
	"github.com/inboxkit/inbox/internal/memsource"
	"github.com/inboxkit/inbox/store"
)

// A store that reports lock conflicts (store.ConflictReporter) says yes
// to the database's deadlock, and no to another error; SQLite, whose one
// writer deadlocks with no one, says no to its busy error too.
func testConflictReported[TTx any](t *testing.T, h Harness[TTx]) {
	env := open(t, h)
	cr, ok := any(env.Driver).(store.ConflictReporter)
	if !ok {
		t.Skipf("%T does not report conflicts: Consume splits on every transient error", env.Driver)
	}
	ctx := context.Background()
	tx, err := env.BeginPlain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Driver.Rollback(ctx, tx) }()
	deadlock := env.Transient(ctx, tx)
	if deadlock == nil {
		t.Fatal("Transient returned no error")
	}
	if got, want := cr.Conflict(deadlock), !env.SingleWriter; got != want {
		t.Fatalf("Conflict(%v) = %v, want %v", deadlock, got, want)
	}
	if !env.Driver.Retryable(deadlock) {
		t.Fatalf("Retryable(%v) = false: a conflict must be transient too", deadlock)
	}
	for _, err := range []error{errors.New("deadlock detected"), context.DeadlineExceeded, nil} {
		if cr.Conflict(err) {
			t.Fatalf("Conflict(%v) = true, want false", err)
		}
	}
}

// splits records the batch splits a consumer reports.
type splits struct {
	mu     sync.Mutex
	events []inbox.SplitEvent
}

func (s *splits) OnBatchSplit(_ context.Context, e *inbox.SplitEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, *e)
}

func (s *splits) all() []inbox.SplitEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]inbox.SplitEvent(nil), s.events...)
}

// consumeAll runs consumers copies of inbox.Consume (processes of one
// consumer) on a memory source holding ids until every one is acked, then
// stops them and checks that each was acked once and nothing is left.
func consumeAll[TTx any](t *testing.T, ib *inbox.Inbox[TTx], consumers int, ids []string, h inbox.Handler[TTx], cfg *inbox.ConsumerConfig) {
	t.Helper()
	src := memsource.New(len(ids))
	for _, id := range ids {
		src.Add(&broker.Message{ID: id, Payload: []byte("payload of " + id)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, consumers)
	for range consumers {
		go func() { done <- inbox.Consume(ctx, ib, src, h, cfg) }()
	}
	deadline := time.Now().Add(90 * time.Second)
	for src.Acks() < int64(len(ids)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for range consumers {
		if err := <-done; err != nil {
			t.Fatalf("Consume: %v", err)
		}
	}
	if n := src.Acks(); n != int64(len(ids)) {
		t.Fatalf("%d of %d messages acked within 90 s", n, len(ids))
	}
	for _, id := range ids {
		if n := src.Acked(id); n != 1 {
			t.Fatalf("%s acked %d times, want once", id, n)
		}
	}
	if n := src.Pending(); n != 0 {
		t.Fatalf("%d deliveries left unsettled after Consume returned", n)
	}
}

// A batch whose handler meets a lock conflict is split by Consume: it is
// rolled back and its messages run again in halves, none counted as
// failed. FixedBatchSize keeps ProcessBatch's way: the batch runs again
// with a savepoint before each message, in one transaction. So does a
// store whose conflicts are none (SQLite's busy error).
func testBatchSplitOnConflict[TTx any](t *testing.T, h Harness[TTx]) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("fixed=%v", fixed), func(t *testing.T) {
			t.Parallel()
			env, _ := openBatch(t, h, inbox.Config{})
			var counts inbox.Counts
			var split splits
			logs := &logtest.Buffer{}
			ib := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{&counts, &split},
				Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond},
				Logger:  slog.New(slog.NewTextHandler(logs, nil))})
			var ids []string
			for i := range 8 {
				ids = append(ids, fmt.Sprintf("split-%d", i))
			}
			var raised atomic.Bool
			hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
				if err := env.Write(ctx, tx, key(m.ID)); err != nil {
					return err
				}
				if m.ID == "split-5" && raised.CompareAndSwap(false, true) {
					return env.Transient(ctx, tx)
				}
				return nil
			}
			consumeAll(t, ib, 1, ids, hd, &inbox.ConsumerConfig{Workers: 1, BatchSize: 8, BatchLinger: time.Second, FixedBatchSize: fixed})
			for _, id := range ids {
				if n := count(t, env, id); n != 1 {
					t.Fatalf("%s: %d effects, want 1", id, n)
				}
			}
			wantSplit := !fixed && !env.SingleWriter
			got := split.all()
			switch {
			case wantSplit && (len(got) != 1 || got[0].Size != 8 || got[0].Next != 4 || got[0].Consumer != "storetest" || got[0].Err == nil):
				t.Fatalf("splits %+v, want one of 8 messages into halves of 4, with the error", got)
			case !wantSplit && len(got) != 0:
				t.Fatalf("splits %+v, want none", got)
			case counts.Retries.Load() != 0 || counts.Processed.Load() != 8 || counts.BatchSplits.Load() != int64(len(got)):
				t.Fatalf("%s, splits %+v; want 8 processed, no retry, each split counted", &counts, got)
			}
			// A conflict that does not split is told too, so that a user of
			// FixedBatchSize learns why batches are slow.
			told := strings.Contains(logs.String(), "level=WARN msg=\"inbox: lock conflict in a batch")
			if wantTold := !env.SingleWriter; told != wantTold {
				t.Fatalf("a WARN line on the lock conflict: %v, want %v; the log:\n%s", told, wantTold, logs.String())
			}
		})
	}
}

// Batches whose handlers update a few shared rows in the order of their
// messages deadlock with each other. Consume then runs fewer of them at
// once, or smaller ones when two consumers conflict: every message commits
// once, no attempt is counted, hardly any message is retried, and the
// splits are reported. With
// FixedBatchSize the same work retries the deadlocked messages over and
// over.
func testBatchHotRows[TTx any](t *testing.T, h Harness[TTx]) {
	for _, tc := range []struct {
		name               string
		consumers, workers int
	}{
		{"one consumer", 1, 4},
		{"two consumers", 2, 2}, // each alone would run one batch at a time: the batches must shrink
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testHotRows(t, h, tc.consumers, tc.workers)
		})
	}
}

func testHotRows[TTx any](t *testing.T, h Harness[TTx], consumers, workers int) {
	env, _ := openBatch(t, h, inbox.Config{})
	const rows, batch = 8, 20
	hot := hotRows(t, env, rows)
	var counts inbox.Counts
	var split splits
	var rs retries
	ib := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{&counts, &split, &rs}})
	var ids []string
	for i := range 2000 {
		ids = append(ids, fmt.Sprintf("hot-%d", i))
	}
	row := map[string]int{}
	for i, id := range ids {
		row[id] = (i * 7) % rows // neighbours in a batch hit different rows, in no stable order
	}
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		if err := env.Write(ctx, tx, key(m.ID)); err != nil {
			return err
		}
		if err := env.Exec(ctx, tx, fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", hot, row[m.ID])); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // a handler that takes its time, so that batches overlap
		return nil
	}
	consumeAll(t, ib, consumers, ids, hd, &inbox.ConsumerConfig{Workers: workers, BatchSize: batch})
	for _, id := range ids {
		if n := count(t, env, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", id, n)
		}
	}
	// A message alone in its transaction can still be a deadlock's victim:
	// PostgreSQL queues it for a row behind a batch, and the queue closes
	// the cycle. Such a Retry is transient and counts no attempt. Without
	// the splits, hundreds of messages are retried.
	if counts.DeadLettered.Load() != 0 || counts.Processed.Load() != int64(len(ids)) || counts.Retries.Load() > int64(len(ids)/100) {
		t.Fatalf("%s; want every message processed, at most %d retried", &counts, len(ids)/100)
	}
	for _, id := range ids {
		for _, out := range rs.of(id) {
			if out.Attempts != 0 || !inbox.IsRetryable(out.Err) {
				t.Fatalf("%s: Retry with attempts %d, error %v; want only transient ones, counting no attempt", id, out.Attempts, out.Err)
			}
		}
	}
	got := split.all()
	if !env.SingleWriter && len(got) == 0 {
		t.Fatalf("no split reported (%s): the batches should have deadlocked", &counts)
	}
	if consumers > 1 && !env.SingleWriter && !slices.ContainsFunc(got, func(e inbox.SplitEvent) bool { return e.Width == 1 && e.Limit < batch }) {
		t.Fatalf("splits %+v: want the batch size lowered once one batch at a time still met conflicts", got)
	}
	t.Logf("%s; splits %+v", &counts, got)
}

// retries records the Retry outcomes of a consumer by message ID.
type retries struct {
	mu  sync.Mutex
	out map[string][]inbox.Outcome
}

func (r *retries) OnRetry(_ context.Context, e *inbox.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		r.out = map[string][]inbox.Outcome{}
	}
	r.out[e.Message.ID] = append(r.out[e.Message.ID], e.Outcome)
}

func (r *retries) of(id string) []inbox.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out[id]
}

// When a part of a split batch fails as a whole (here its transaction
// became unusable: a handler left a result set open), the parts not yet
// run get Retry with no attempt and no handler error: they never ran.
func testBatchSplitPartFails[TTx any](t *testing.T, h Harness[TTx]) {
	env, _ := openBatch(t, h, inbox.Config{})
	if env.LeaveRowsOpen == nil {
		t.Skip("the harness cannot leave a result set open (Env.LeaveRowsOpen)")
	}
	var rs retries
	ib := newInbox(t, env, inbox.Config{Hooks: []inbox.Hook{&rs}, Backoff: inbox.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("part-%d", i))
	}
	var mu sync.Mutex
	calls := map[string]int{}
	hd := func(ctx context.Context, tx TTx, m *inbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		n := calls[m.ID]
		mu.Unlock()
		switch {
		case m.ID == "part-3" && n == 1:
			return env.Transient(ctx, tx) // a conflict: the batch splits into halves
		case m.ID == "part-0" && (n == 2 || n == 3):
			// In the first half: where a result set left open makes the
			// transaction unusable, the half fails as a whole. Elsewhere
			// (SQLite) part-0 commits without its effect.
			return env.LeaveRowsOpen(ctx, tx)
		}
		return env.Write(ctx, tx, key(m.ID))
	}
	consumeAll(t, ib, 1, ids, hd, &inbox.ConsumerConfig{Workers: 1, BatchSize: 8, BatchLinger: time.Second})
	for _, id := range ids[1:] {
		if n := count(t, env, id); n != 1 {
			t.Fatalf("%s: %d effects, want 1", id, n)
		}
	}
	for _, id := range ids[4:] {
		for _, out := range rs.of(id) {
			if out.Attempts != 0 || out.Err != nil {
				t.Fatalf("%s: Retry with attempts %d, error %v; want none: its part never ran", id, out.Attempts, out.Err)
			}
		}
	}
	t.Logf("retries: part-0 %d, part-4 %d", len(rs.of("part-0")), len(rs.of("part-4")))
}

// hotRows creates a table of rows counters, ids 0 to rows-1 at 0, and
// returns its quoted name.
func hotRows[TTx any](t *testing.T, env *Env[TTx], rows int) string {
	t.Helper()
	ctx := context.Background()
	quote := store.QuoteDouble
	if env.Driver.Dialect() == "mysql" {
		quote = store.QuoteBacktick
	}
	hot := env.Tables.Name("hot", quote)
	values := make([]string, rows)
	for i := range values {
		values[i] = fmt.Sprintf("(%d, 0)", i)
	}
	if err := inTx(ctx, env.Driver, env.BeginPlain, func(tx TTx) error {
		if err := env.Exec(ctx, tx, "CREATE TABLE "+hot+" (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
			return err
		}
		return env.Exec(ctx, tx, "INSERT INTO "+hot+" (id, n) VALUES "+strings.Join(values, ", "))
	}); err != nil {
		t.Fatal(err)
	}
	return hot
}

// ackedIfCommitted checks that each of ids is acked once if its effect
// committed, and never if not. It returns how many did not commit.
func ackedIfCommitted[TTx any](t *testing.T, env *Env[TTx], src *memsource.Source, ids []string) int {
	t.Helper()
	uncommitted := 0
	for _, id := range ids {
		committed, acked := count(t, env, id) == 1, src.Acked(id)
		if committed != (acked == 1) || acked > 1 {
			t.Errorf("%s: committed %v, acked %d times", id, committed, acked)
		}
		if !committed {
			uncommitted++
		}
	}
	return uncommitted
}
