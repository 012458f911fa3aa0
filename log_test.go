package inbox

import (
	"bytes"
	"context"
	"encoding/json"
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

// An ID is logged as it is when it is printable UTF-8, so that a search
// for id=pay-13 finds it; Go-quoted otherwise, so that it cannot forge a
// log line or put invalid UTF-8 into a JSON log.
func TestLogID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, id, want, text string
	}{
		{"plain", "pay-13", "pay-13", "id=pay-13"},
		{"space", "pay 13", "pay 13", `id="pay 13"`},
		{"unicode", "zahlung-ä", "zahlung-ä", "id=zahlung-ä"},
		{"newline", "pay-13\nlevel=ERROR msg=forged", `"pay-13\nlevel=ERROR msg=forged"`, `id="\"pay-13\\nlevel=ERROR msg=forged\""`},
		{"invalid UTF-8", "pay-\xff", `"pay-\xff"`, `id="\"pay-\\xff\""`},
		{"NUL", "pay\x00", `"pay\x00"`, `id="\"pay\\x00\""`},
		{"no-break space", "pay\u00a013", `"pay\u00a013"`, `id="\"pay\\u00a013\""`},
		{"quoted-looking", `"pay-13\n"`, `"\"pay-13\\n\""`, `id="\"\\\"pay-13\\\\n\\\"\""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := logID(tc.id); got != tc.want {
				t.Fatalf("logID(%q) = %s, want %s", tc.id, got, tc.want)
			}
			var buf bytes.Buffer
			slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "id", logID(tc.id))
			if line := strings.TrimSuffix(buf.String(), "\n"); !strings.HasSuffix(line, " "+tc.text) || strings.Contains(line, "\n") {
				t.Fatalf("text handler logged %q, want one line ending in %s", buf.String(), tc.text)
			}
			buf.Reset()
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "id", logID(tc.id))
			var rec struct{ ID string }
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec.ID != tc.want {
				t.Fatalf("JSON handler logged %q: id %q (%v), want %q", buf.String(), rec.ID, err, tc.want)
			}
		})
	}
}

// Retry lines name the ID as it is, and count the lines held back only
// when some were.
func TestLogOutcomeRetries(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	ib := &Inbox[struct{}]{cfg: Config{Consumer: "c", Logger: slog.New(slog.NewTextHandler(&buf, nil))}}
	ib.retryLog.interval = time.Hour
	ctx := context.Background()
	msg := &Message{ID: "pay-13", Type: "t"}
	out := Outcome{Status: Retry, Attempts: 1, Err: errors.New("boom")}
	ib.logOutcome(ctx, msg, out, out.Err)
	ib.logOutcome(ctx, msg, out, out.Err) // held back
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, " id=pay-13 ") || strings.Contains(got, "retries_not_logged") {
		t.Fatalf("first retry: want one line with id=pay-13 and no retries_not_logged; got:\n%s", got)
	}
	buf.Reset()
	ib.retryLog.next = time.Time{} // the interval has passed
	ib.logOutcome(ctx, msg, out, out.Err)
	if got := buf.String(); !strings.Contains(got, " retries_not_logged=1") {
		t.Fatalf("after the interval: want retries_not_logged=1 for the line held back; got:\n%s", got)
	}
	buf.Reset()
	ib.logOutcome(ctx, msg, Outcome{Status: DeadLettered, Attempts: 3, Err: out.Err}, nil)
	if got := buf.String(); !strings.Contains(got, `level=WARN msg="inbox: message dead-lettered" consumer=c id=pay-13 type=t attempts=3`) {
		t.Fatalf("dead letter: got:\n%s", got)
	}
}
