package inbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// The start of every run of database failures is logged, even right after
// an earlier run; within a run, lines are rate-limited; its end is logged.
func TestHealthLogsRuns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var h health
	h.init(slog.New(slog.NewTextHandler(&buf, nil)), "c")
	ctx := context.Background()
	boom := errors.New("connection refused")
	for run := 1; run <= 2; run++ {
		for i := 1; i <= 3; i++ {
			if n := h.failed(ctx, boom); n != i {
				t.Fatalf("run %d: failure %d counted as %d in a row", run, i, n)
			}
		}
		h.ok(ctx)
	}
	h.ok(ctx) // no run: no line
	warn := strings.Count(buf.String(), "level=WARN")
	info := strings.Count(buf.String(), "level=INFO msg=\"inbox: the database answers again\" consumer=c failures=3")
	if warn != 2 || info != 2 {
		t.Fatalf("want 2 WARN lines (the start of each run, the rest held back) and 2 INFO lines (their ends); got:\n%s", buf.String())
	}
}
