package inbox

import (
	"context"
	"time"
)

// Event describes one message's outcome, for hooks.
type Event struct {
	Consumer string
	Message  *Message
	Outcome  Outcome
	// Duration is the time Process (or ProcessTx) took.
	Duration time.Duration
	// StoredFingerprint and Fingerprint are the SHA-256 of the payload first
	// processed under the ID and of this one (FingerprintConflictHook only).
	StoredFingerprint, Fingerprint []byte
}

// PruneEvent describes one Prune call, for hooks.
type PruneEvent struct {
	Deleted  int
	Duration time.Duration
	Err      error
}

// Hooks are optional single-method interfaces: a value in Config.Hooks (or
// PrunerConfig.Hooks) implements those it cares about. Hooks run
// synchronously on the processing goroutine and must be quick.
type (
	// ProcessedHook is told of every Processed outcome.
	ProcessedHook interface {
		OnProcessed(ctx context.Context, e *Event)
	}
	// DuplicateHook is told of every Duplicate outcome.
	DuplicateHook interface {
		OnDuplicate(ctx context.Context, e *Event)
	}
	// RetryHook is told of every Retry outcome.
	RetryHook interface {
		OnRetry(ctx context.Context, e *Event)
	}
	// DeadLetteredHook is told of every DeadLettered outcome.
	DeadLetteredHook interface {
		OnDeadLettered(ctx context.Context, e *Event)
	}
	// FingerprintConflictHook is told when a duplicate's payload differs
	// from the payload first processed under its ID: a producer reused an
	// ID for different content, a bug worth an alarm.
	FingerprintConflictHook interface {
		OnFingerprintConflict(ctx context.Context, e *Event)
	}
	// PrunedHook is told of every Prune call.
	PrunedHook interface {
		OnPruned(ctx context.Context, e *PruneEvent)
	}
)

type hookSet struct {
	processed []ProcessedHook
	duplicate []DuplicateHook
	retry     []RetryHook
	dead      []DeadLetteredHook
	conflict  []FingerprintConflictHook
	pruned    []PrunedHook
	any       bool // an outcome hook is set
}

func newHookSet(hooks []any) hookSet {
	var s hookSet
	for _, h := range hooks {
		if x, ok := h.(ProcessedHook); ok {
			s.processed = append(s.processed, x)
		}
		if x, ok := h.(DuplicateHook); ok {
			s.duplicate = append(s.duplicate, x)
		}
		if x, ok := h.(RetryHook); ok {
			s.retry = append(s.retry, x)
		}
		if x, ok := h.(DeadLetteredHook); ok {
			s.dead = append(s.dead, x)
		}
		if x, ok := h.(FingerprintConflictHook); ok {
			s.conflict = append(s.conflict, x)
		}
		if x, ok := h.(PrunedHook); ok {
			s.pruned = append(s.pruned, x)
		}
	}
	s.any = len(s.processed)+len(s.duplicate)+len(s.retry)+len(s.dead) > 0
	return s
}

func (s *hookSet) outcome(ctx context.Context, e *Event) {
	switch e.Outcome.Status {
	case Processed:
		for _, h := range s.processed {
			h.OnProcessed(ctx, e)
		}
	case Duplicate:
		for _, h := range s.duplicate {
			h.OnDuplicate(ctx, e)
		}
	case Retry:
		for _, h := range s.retry {
			h.OnRetry(ctx, e)
		}
	case DeadLettered:
		for _, h := range s.dead {
			h.OnDeadLettered(ctx, e)
		}
	}
}
