package inbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxkit/inbox/internal/logid"
)

// logID is a message ID as a log attribute's value (logid.String).
func logID(id string) string { return logid.String(id) }

// heldBack appends the attribute counting the lines held back, when some
// were.
func heldBack(attrs []any, key string, n int) []any {
	if n == 0 {
		return attrs
	}
	return append(attrs, key, n)
}

// retryLogInterval is the least time between two log lines of retries, and
// between two lines of a database failure that lasts.
const retryLogInterval = 10 * time.Second

// sometimes lets an event through at most once per interval and counts the
// ones it held back.
type sometimes struct {
	interval time.Duration
	mu       sync.Mutex
	next     time.Time
	held     int
}

// allow reports whether to log now and how many events were held back
// since the last one let through.
func (s *sometimes) allow() (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if now.Before(s.next) {
		s.held++
		return false, 0
	}
	s.next = now.Add(s.interval)
	held := s.held
	s.held = 0
	return true, held
}

// health counts the database's consecutive failures, for the delay of the
// retries they cause, and says when they start, last and end: at most one
// line per interval, so that a database that fails and recovers over and
// over (a busy SQLite) does not flood the log, and the end of a run only
// when the run was logged.
type health struct {
	log      *slog.Logger
	consumer string
	failing  atomic.Int64 // consecutive failures, read without the lock on the fast path
	mu       sync.Mutex   // orders the runs of failures: start, count, end
	since    time.Time
	logged   bool // a line of the current run was logged
	lines    sometimes
}

func (h *health) init(log *slog.Logger, consumer string) {
	h.log, h.consumer, h.lines.interval = log, consumer, retryLogInterval
}

// failed counts a failure and returns the number in a row, this one
// included.
func (h *health) failed(ctx context.Context, err error) int {
	h.mu.Lock()
	n := int(h.failing.Add(1))
	if n == 1 {
		h.since, h.logged = time.Now(), false
	}
	since := h.since
	log, held := h.lines.allow()
	h.logged = h.logged || log
	h.mu.Unlock()
	if !log {
		return n
	}
	if errors.Is(err, ErrUnrecoverable) {
		h.log.ErrorContext(ctx, "inbox: database error that no retry fixes", heldBack([]any{"consumer", h.consumer,
			"error", err, "failures_in_a_row", n}, "failures_not_logged", held)...)
		return n
	}
	h.log.WarnContext(ctx, "inbox: database error; messages are redelivered later", heldBack([]any{"consumer", h.consumer,
		"error", err, "failures_in_a_row", n, "failing_for", time.Since(since).Round(time.Millisecond)},
		"failures_not_logged", held)...)
	return n
}

// failingFor is how long the current run of failures has lasted, 0 when
// there is none.
func (h *health) failingFor() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing.Load() == 0 {
		return 0
	}
	return time.Since(h.since)
}

// ok ends a run of failures: a statement of the inbox's own succeeded.
func (h *health) ok(ctx context.Context) {
	if h.failing.Load() == 0 {
		return
	}
	h.mu.Lock()
	n := h.failing.Swap(0)
	since, logged := h.since, h.logged
	h.mu.Unlock()
	if n == 0 || !logged {
		return
	}
	h.log.InfoContext(ctx, "inbox: the database answers again", "consumer", h.consumer,
		"failures", n, "failed_for", time.Since(since).Round(time.Millisecond))
}

// logOutcome says at the default level what became of a message that did
// not simply succeed: dead letters at WARN, handler failures that will be
// retried at INFO (rate-limited). Database failures are health's to say.
func (ib *Inbox[TTx]) logOutcome(ctx context.Context, msg *Message, out Outcome, err error) {
	switch {
	case out.Status == DeadLettered:
		ib.cfg.Logger.WarnContext(ctx, "inbox: message dead-lettered", "consumer", ib.cfg.Consumer,
			"id", logID(msg.ID), "type", msg.Type, "attempts", out.Attempts, "error", out.Err)
	case out.Status == Retry && out.Err != nil:
		if ok, held := ib.retryLog.allow(); ok {
			ib.cfg.Logger.InfoContext(ctx, "inbox: handler failed; the message will be retried", heldBack([]any{"consumer", ib.cfg.Consumer,
				"id", logID(msg.ID), "type", msg.Type, "attempts", out.Attempts, "delay", out.Delay,
				"transient", IsRetryable(err), "error", out.Err}, "retries_not_logged", held)...)
		}
	}
}
