package inbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/inboxkit/inbox/store"
)

// slowPruneStore deletes limit rows per batch, taking took for each, until
// batches are done, and records when each batch began and ended.
type slowPruneStore struct {
	took    time.Duration
	batches int
	mu      sync.Mutex
	spans   [][2]time.Time
}

func (s *slowPruneStore) Prune(_ context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	start := time.Now()
	time.Sleep(s.took)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, [2]time.Time{start, time.Now()})
	if len(s.spans) > s.batches {
		return &store.PruneResult{}, nil
	}
	return &store.PruneResult{Deleted: p.Limit}, nil
}

// A batch slower than Pause is followed by a wait as long as the batch:
// the Pruner backs off when the database is busy.
func TestPrunerWaitsAsLongAsTheLastBatch(t *testing.T) {
	t.Parallel()
	s := &slowPruneStore{took: 40 * time.Millisecond, batches: 3}
	p, err := NewPruner(s, &PrunerConfig{Retention: time.Hour, BatchSize: 10, Pause: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(context.Background()); err != nil || n != 30 {
		t.Fatalf("prune: %d, %v; want 30 rows", n, err)
	}
	for i := 1; i < len(s.spans); i++ {
		took := s.spans[i-1][1].Sub(s.spans[i-1][0])
		if wait := s.spans[i][0].Sub(s.spans[i-1][1]); wait < took {
			t.Errorf("batch %d began %v after batch %d, which took %v: want a wait at least as long as the batch", i, wait, i-1, took)
		}
	}
}

// busyPruneStore answers Busy to the calls whose index (from 0) busy
// holds, deletes a full batch otherwise, and a short one at call last.
type busyPruneStore struct {
	busy  map[int]bool
	last  int
	mu    sync.Mutex
	calls int
}

func (s *busyPruneStore) Prune(_ context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.calls
	s.calls++
	switch {
	case s.busy[i]:
		return &store.PruneResult{Busy: true}, nil
	case i >= s.last:
		return &store.PruneResult{}, nil
	}
	return &store.PruneResult{Deleted: p.Limit}, nil
}

// A busy batch is tried again, a few times, before Prune leaves the rest
// to the next Interval.
func TestPrunerRetriesABusyBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		busy                []int
		last                int
		wantRows, wantCalls int
	}{
		{"busy twice first", []int{0, 1}, 5, 30, 6},
		{"busy between batches", []int{1, 2, 3}, 6, 30, 7},
		{"busy again after a batch", []int{0, 1, 2, 4, 5, 6}, 8, 20, 9},
		{"busy throughout", []int{0, 1, 2, 3, 4, 5}, 10, 0, 1 + pruneBusyRetries},
		{"busy too long after a batch", []int{1, 2, 3, 4, 5}, 10, 10, 2 + pruneBusyRetries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &busyPruneStore{busy: map[int]bool{}, last: tc.last}
			for _, i := range tc.busy {
				s.busy[i] = true
			}
			p, err := NewPruner(s, &PrunerConfig{Retention: time.Hour, BatchSize: 10, Pause: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			n, err := p.Prune(context.Background())
			if err != nil || n != tc.wantRows || s.calls != tc.wantCalls {
				t.Errorf("Prune = %d rows, %v, in %d calls; want %d rows in %d calls", n, err, s.calls, tc.wantRows, tc.wantCalls)
			}
		})
	}
}

// scriptedPruneStore deletes a full batch per duration in took, each
// taking that long, then a short one, and records when each began and
// ended.
type scriptedPruneStore struct {
	took  []time.Duration
	mu    sync.Mutex
	spans [][2]time.Time
}

func (s *scriptedPruneStore) Prune(_ context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	s.mu.Lock()
	i := len(s.spans)
	s.mu.Unlock()
	start := time.Now()
	if i < len(s.took) {
		time.Sleep(s.took[i])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, [2]time.Time{start, time.Now()})
	if i >= len(s.took) {
		return &store.PruneResult{}, nil
	}
	return &store.PruneResult{Deleted: p.Limit}, nil
}

// A batch more than twice as slow as the fastest so far is followed by a
// wait as many times longer (at most maxPruneSlowdown times): the Pruner's
// share of a busy database shrinks.
func TestPrunerWaitsLongerWhenBatchesSlowDown(t *testing.T) {
	t.Parallel()
	s := &scriptedPruneStore{took: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 15 * time.Millisecond, 40 * time.Millisecond}}
	p, err := NewPruner(s, &PrunerConfig{Retention: time.Hour, BatchSize: 10, Pause: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Prune(context.Background()); err != nil || n != 40 {
		t.Fatalf("prune: %d, %v; want 40 rows", n, err)
	}
	fastest := time.Duration(1<<63 - 1)
	for i := 1; i < len(s.spans); i++ {
		took := s.spans[i-1][1].Sub(s.spans[i-1][0])
		fastest = min(fastest, took)
		want := time.Duration(float64(took) * pruneSlowdown(took, fastest) * 0.95)
		if wait := s.spans[i][0].Sub(s.spans[i-1][1]); wait < want {
			t.Errorf("batch %d began %v after batch %d, which took %v (the fastest %v): want at least %v", i, wait, i-1, took, fastest, want)
		}
	}
}
