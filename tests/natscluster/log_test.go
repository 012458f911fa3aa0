package natscluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
)

// logCounter is a slog.Handler that counts records by level and message,
// keeping one example of each, so that the test can report what the
// adapters and the inbox logged during the kills, and at which level.
type logCounter struct {
	mu      *sync.Mutex
	n       map[string]int
	example map[string]string
	attrs   []slog.Attr
}

func newLogCounter() *logCounter {
	return &logCounter{mu: &sync.Mutex{}, n: map[string]int{}, example: map[string]string{}}
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	key := r.Level.String() + " " + r.Message
	var b strings.Builder
	for _, a := range l.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[key]++
	if _, ok := l.example[key]; !ok {
		l.example[key] = b.String()
	}
	return nil
}

func (l *logCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *l
	c.attrs = append(slices.Clip(l.attrs), attrs...)
	return &c
}

func (l *logCounter) WithGroup(string) slog.Handler { return l }

// count returns the records whose level and message start with prefix.
func (l *logCounter) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, v := range l.n {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// String lists each level and message with its count and an example.
func (l *logCounter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.n) == 0 {
		return "  (nothing at WARN or above)"
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l.n)) {
		ex := l.example[k]
		if len(ex) > 300 {
			ex = ex[:300] + "…"
		}
		fmt.Fprintf(&b, "  %d× %s; e.g.%s\n", l.n[k], k, ex)
	}
	return strings.TrimRight(b.String(), "\n")
}
