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
