package rabbitcluster

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/inboxkit/inbox"
)

// times records the time of every Processed outcome, as an inbox hook.
type times struct {
	mu sync.Mutex
	at []time.Time
}

func (ts *times) OnProcessed(context.Context, *inbox.Event) {
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.at = append(ts.at, now)
}

// after returns the time from t0 to the first Processed outcome after it,
// and the longest gap between outcomes from t0 to end (t0 counts as one).
func (ts *times) after(t0, end time.Time) (first, longest time.Duration) {
	ts.mu.Lock()
	at := slices.Clone(ts.at)
	ts.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	prev := t0
	for _, a := range at {
		if !a.After(t0) {
			continue
		}
		if first == 0 {
			first = a.Sub(t0)
		}
		if a.After(end) {
			break
		}
		longest = max(longest, a.Sub(prev))
		prev = a
	}
	return first, longest
}

// records keeps the messages a Source logs, to count its reconnects.
type records struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (r *records) logger() *slog.Logger { return slog.New(&recordHandler{r: r}) }

func (r *records) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs[msg]
}

type recordHandler struct{ r *records }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, rec slog.Record) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.r.msgs == nil {
		h.r.msgs = map[string]int{}
	}
	h.r.msgs[rec.Message]++
	return nil
}

func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// retried records the IDs of the messages that had a Retry outcome.
type retried struct{ ids sync.Map }

func (r *retried) OnRetry(_ context.Context, e *inbox.Event) { r.ids.Store(e.Message.ID, true) }

func (r *retried) has(id string) bool {
	_, ok := r.ids.Load(id)
	return ok
}

func (r *retried) count() int {
	n := 0
	r.ids.Range(func(any, any) bool { n++; return true })
	return n
}
