// Package logtest collects log records as text, for tests of what is
// logged.
package logtest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Buffer holds the text of log records; it is safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a logger writing every level to b in slog's text format.
func (b *Buffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Lines returns the logged lines that contain every one of parts.
func (b *Buffer) Lines(parts ...string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}

// Has reports whether one logged line contains every one of parts.
func (b *Buffer) Has(parts ...string) bool { return len(b.Lines(parts...)) > 0 }
