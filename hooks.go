package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Event describes one message's outcome, for hooks.
//
// For a [StartHook], only Consumer and Message are set. The attempts a
// failed message has used are in [Outcome.Attempts].
type Event struct {
	Consumer string
	Message  *Message
	Outcome  Outcome
	// Duration is the time the call took, claim and COMMIT included. The
	// call is Process, ProcessTx, ProcessQueued or Replay. For ProcessBatch
	// it is the whole batch's time.
	Duration time.Duration
	// HandlerDuration is the time the handler took in Process, ProcessTx,
	// ProcessQueued and Replay. It is 0 when the handler did not run, as
	// for a duplicate, an invalid message or a failed claim. It is 0 in
	// batches too, where handlers run together.
	HandlerDuration time.Duration
	// StoredFingerprint and Fingerprint are the SHA-256 of the payload first
	// processed under the ID and of this one. They are set for a
	// FingerprintConflictHook only.
	StoredFingerprint, Fingerprint []byte
	// StoredType is the type of the message first processed under the ID.
	// It is set for a FingerprintConflictHook only. Message.Type is this
	// one's.
	StoredType string
}

// PruneEvent describes one Prune call, for a [PrunedHook].
type PruneEvent struct {
	Deleted  int
	Duration time.Duration
	Err      error
}

// Hook is a value given in [Config.Hooks] or [PrunerConfig.Hooks]. It
// implements one or more of these interfaces:
//   - [StartHook], before a message's claim.
//   - [ProcessedHook], [DuplicateHook], [RetryHook] and [DeadLetteredHook],
//     one for each outcome.
//   - [FingerprintConflictHook], for an ID reused for another payload.
//   - [BatchSplitHook], for a batch split after a lock conflict.
//   - [PrunedHook], for each Prune call. It belongs in
//     [PrunerConfig.Hooks] only.
//
// [Counts] is one, and so is the OpenTelemetry package's Hooks.
//
// Hook is any, not an interface with a marker method. A marker would catch
// a wrong value at compile time. But every user's hook type would then
// have to embed a type of ours, as River's hooks embed HookDefaults. So
// the check is at run time. [New] and [NewPruner] reject a value that
// implements none of their interfaces, with an error wrapping
// [ErrInvalidConfig]. A method with a wrong signature is caught that way.
type Hook any

// Hooks are optional single-method interfaces. The package's section
// "Hooks" tells how they run. go doc shows each type on its own, without
// this comment.
type (
	// StartHook is told of each message before its claim.
	//
	// OnStart returns the context that the handler and the message's
	// outcome hooks then receive. A span started in it ends in them, as
	// with pgx's tracers. Every OnStart is followed by exactly one of
	// OnProcessed, OnDuplicate, OnRetry and OnDeadLettered for the same
	// message, with the returned context. OnFingerprintConflict comes
	// before OnDuplicate, when it applies. A nil context, or a panic,
	// leaves the context as it was.
	//
	// Process, ProcessTx, ProcessQueued and Replay call it. ProcessBatch and
	// ProcessBatchFunc call it once per message. A ProcessBatchFunc handler
	// given several messages gets the batch's context. Given one, it gets
	// that message's.
	//
	// The returned context must derive from ctx, as with context.WithValue
	// or tracer.Start on ctx. The handler's statements and the consumer's
	// shutdown are cancelled through it. A context that does not derive
	// from ctx, such as one made from context.Background, keeps ctx's
	// deadline and cancellation anyway. Its values are looked up before
	// ctx's. A WARN says so once.
	StartHook interface {
		OnStart(ctx context.Context, e *Event) context.Context
	}
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
	// from the payload first processed under its ID. A producer reused an
	// ID for different content. That is a bug worth an alarm.
	FingerprintConflictHook interface {
		OnFingerprintConflict(ctx context.Context, e *Event)
	}
	// PrunedHook is told of every Prune call.
	PrunedHook interface {
		OnPruned(ctx context.Context, e *PruneEvent)
	}
)

// Counts is a ready-made hook that counts outcomes.
//
// It suits logs, tests and programs that print a summary. Put a *Counts in
// [Config.Hooks] and read its fields at any time. One Counts may serve
// several inboxes.
//
// A fingerprint conflict is counted in FingerprintConflicts. Being a
// duplicate, it is counted in Duplicates too. BatchSplits counts the
// batches split after a lock conflict, as [BatchSplitHook] tells. For
// metrics, see the OpenTelemetry package.
type Counts struct {
	Processed, Duplicates, Retries, DeadLettered, FingerprintConflicts atomic.Int64
	BatchSplits                                                        atomic.Int64
}

// OnProcessed counts a Processed outcome.
func (c *Counts) OnProcessed(context.Context, *Event) { c.Processed.Add(1) }

// OnDuplicate counts a Duplicate outcome.
func (c *Counts) OnDuplicate(context.Context, *Event) { c.Duplicates.Add(1) }

// OnRetry counts a Retry outcome.
func (c *Counts) OnRetry(context.Context, *Event) { c.Retries.Add(1) }

// OnDeadLettered counts a DeadLettered outcome.
func (c *Counts) OnDeadLettered(context.Context, *Event) { c.DeadLettered.Add(1) }

// OnFingerprintConflict counts a fingerprint conflict.
func (c *Counts) OnFingerprintConflict(context.Context, *Event) {
	c.FingerprintConflicts.Add(1)
}

// OnBatchSplit counts a batch split after a lock conflict.
func (c *Counts) OnBatchSplit(context.Context, *SplitEvent) { c.BatchSplits.Add(1) }

// Outcomes is the number of outcomes counted: processed, duplicates,
// retries and dead letters.
func (c *Counts) Outcomes() int64 {
	return c.Processed.Load() + c.Duplicates.Load() + c.Retries.Load() + c.DeadLettered.Load()
}

// String reads "processed 3, duplicates 1, retries 0, dead-lettered 0".
// It adds ", fingerprint conflicts N" and ", batch splits N" when there
// were any.
func (c *Counts) String() string {
	s := fmt.Sprintf("processed %d, duplicates %d, retries %d, dead-lettered %d",
		c.Processed.Load(), c.Duplicates.Load(), c.Retries.Load(), c.DeadLettered.Load())
	if n := c.FingerprintConflicts.Load(); n > 0 {
		s += fmt.Sprintf(", fingerprint conflicts %d", n)
	}
	if n := c.BatchSplits.Load(); n > 0 {
		s += fmt.Sprintf(", batch splits %d", n)
	}
	return s
}

type hookSet struct {
	start     []StartHook
	processed []ProcessedHook
	duplicate []DuplicateHook
	retry     []RetryHook
	dead      []DeadLetteredHook
	conflict  []FingerprintConflictHook
	pruned    []PrunedHook
	split     []BatchSplitHook
	any       bool // an outcome hook is set
	logger    *slog.Logger
	// detachWarned: a StartHook returned a context that does not derive
	// from its own (warned once). Set when there are start hooks.
	detachWarned *atomic.Bool
}

// validateHooks rejects a value of hooks that implements none of the hook
// interfaces a role uses (outcome: Config.Hooks; else PrunerConfig.Hooks),
// so that a typo in a method's signature is not silently ignored.
func validateHooks(field string, hooks []Hook, outcome bool) error {
	for i, h := range hooks {
		s := newHookSet([]Hook{h}, nil)
		ok := len(s.pruned) > 0
		if outcome {
			ok = s.any || len(s.conflict) > 0 || len(s.start) > 0 || len(s.split) > 0
		}
		if !ok {
			return fmt.Errorf("%w: %s[%d] (%T) implements no hook interface of %s", ErrInvalidConfig, field, i, h, field)
		}
	}
	return nil
}

func newHookSet(hooks []Hook, logger *slog.Logger) hookSet {
	s := hookSet{logger: logger}
	for _, h := range hooks {
		if x, ok := h.(StartHook); ok {
			s.start = append(s.start, x)
		}
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
		if x, ok := h.(BatchSplitHook); ok {
			s.split = append(s.split, x)
		}
	}
	s.any = len(s.processed)+len(s.duplicate)+len(s.retry)+len(s.dead) > 0
	if len(s.start) > 0 {
		s.detachWarned = new(atomic.Bool)
	}
	return s
}

// call runs each hook with e, recovering a panic: hooks run after COMMIT
// and before the ack, so that a panic would kill the worker before the
// ack, and again on every redelivery. It is logged and the outcome stands.
//
// It keeps six parameters: being generic, it cannot be a method of
// hookSet, and a struct for the method's name and e would only move them.
func call[H any](ctx context.Context, s *hookSet, method string, e *Event, hooks []H, fn func(H)) {
	for _, h := range hooks {
		func() {
			defer func() {
				if v := recover(); v != nil {
					attrs := []any{"hook", method, "hook_type", fmt.Sprintf("%T", h), "panic", v, "stack", string(debug.Stack())}
					if e != nil {
						attrs = append(attrs, "consumer", e.Consumer, "id", logID(e.Message.ID))
						if method != "OnStart" { // no outcome yet
							attrs = append(attrs, "status", e.Outcome.Status)
						}
					}
					s.logger.ErrorContext(ctx, "inbox: a hook panicked; the outcome stands", attrs...)
				}
			}()
			fn(h)
		}()
	}
}

// started calls the start hooks for msg and returns the context they
// made; ctx itself, at no cost, when there are none.
func (s *hookSet) started(ctx context.Context, consumer string, msg *Message) context.Context {
	if len(s.start) == 0 {
		return ctx
	}
	e := &Event{Consumer: consumer, Message: msg}
	// The mark tells whether a hook's context derives from the one it got.
	ctx = context.WithValue(ctx, startMark{}, e)
	for _, h := range s.start {
		call(ctx, s, "OnStart", e, []StartHook{h}, func(h StartHook) {
			c := h.OnStart(ctx, e)
			if c == nil {
				return
			}
			if c.Value(startMark{}) != e {
				// Made from another context: it would drop the caller's
				// deadline and cancellation, and a handler would outlive
				// the consumer's shutdown.
				if s.detachWarned.CompareAndSwap(false, true) {
					s.logger.WarnContext(ctx, "inbox: a StartHook returned a context that does not derive from the one it was given; its values are kept, with the caller's deadline and cancellation",
						"hook_type", fmt.Sprintf("%T", h))
				}
				c = &startedCtx{Context: ctx, values: c}
			}
			ctx = c
		})
	}
	return ctx
}

// startMark is the key of the value that started puts into the context a
// StartHook receives: the message's *Event.
type startMark struct{}

// startedCtx is a context a StartHook returned that does not derive from
// the one it was given: the given one's deadline, cancellation and
// values, under the hook's values.
type startedCtx struct {
	context.Context
	values context.Context
}

func (c *startedCtx) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// now and since time the handler for Event.HandlerDuration, only when an
// outcome hook will read it: without hooks, a message reads the clock no
// more often than it did before hooks had durations.
func (s *hookSet) now() time.Time {
	if !s.any {
		return time.Time{}
	}
	return time.Now()
}

func (s *hookSet) since(t time.Time) time.Duration {
	if !s.any {
		return 0
	}
	return time.Since(t)
}

func (s *hookSet) outcome(ctx context.Context, e *Event) {
	switch e.Outcome.Status {
	case Processed:
		call(ctx, s, "OnProcessed", e, s.processed, func(h ProcessedHook) { h.OnProcessed(ctx, e) })
	case Duplicate:
		call(ctx, s, "OnDuplicate", e, s.duplicate, func(h DuplicateHook) { h.OnDuplicate(ctx, e) })
	case Retry:
		call(ctx, s, "OnRetry", e, s.retry, func(h RetryHook) { h.OnRetry(ctx, e) })
	case DeadLettered:
		call(ctx, s, "OnDeadLettered", e, s.dead, func(h DeadLetteredHook) { h.OnDeadLettered(ctx, e) })
	}
}

func (s *hookSet) fingerprintConflict(ctx context.Context, e *Event) {
	call(ctx, s, "OnFingerprintConflict", e, s.conflict, func(h FingerprintConflictHook) { h.OnFingerprintConflict(ctx, e) })
}

func (s *hookSet) prunedEvent(ctx context.Context, e *PruneEvent) {
	call(ctx, s, "OnPruned", nil, s.pruned, func(h PrunedHook) { h.OnPruned(ctx, e) })
}
