package inbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A run of database failures is logged when it starts and ends; a second
// run within the interval (a database that fails and recovers over and
// over) is held back, start and end, and counted in the next line.
func TestHealthLogsRuns(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var h health
	h.init(slog.New(slog.NewTextHandler(&buf, nil)), "c")
	ctx := context.Background()
	boom := errors.New("connection refused")
	for run := 1; run <= 3; run++ {
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
	if warn != 1 || info != 1 || !strings.Contains(buf.String(), "failures_in_a_row=1") {
		t.Fatalf("want 1 WARN line (the first run's start; the rest held back) and 1 INFO line (its end); got:\n%s", buf.String())
	}
	h.lines.next = time.Time{} // the interval has passed
	h.failed(ctx, boom)
	h.ok(ctx)
	if !strings.Contains(buf.String(), "failures_not_logged=8") || strings.Count(buf.String(), "level=INFO") != 2 {
		t.Fatalf("after the interval: want a line counting the 8 failures held back, and its run's end; got:\n%s", buf.String())
	}
}
