package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Handler processes one message inside tx, the transaction that also holds
// the message's claim. Its writes through tx commit together with the claim,
// at most once per message ID. An error rolls both back and the message is
// retried; wrap it with Permanent to dead-letter the message at once, or
// with RetryAfter to choose the delay. Effects outside tx are not covered:
// send them through the outbox, or give them IdempotencyKey(*msg, purpose).
type Handler[TTx any] func(ctx context.Context, tx TTx, msg *Message) error

// Inbox processes messages effectively once for one consumer, with
// transactions of type TTx (pgx.Tx, *sql.Tx). It is safe for concurrent
// use.
type Inbox[TTx any] struct {
	driver   store.Driver[TTx]
	cfg      Config
	consumer []byte
	hooks    hookSet
}

// New returns an Inbox on driver. It checks the database's durability
// settings once and logs a warning for each one that could lose a committed
// claim in a crash. The tables must exist: see Migrate.
func New[TTx any](ctx context.Context, driver store.Driver[TTx], cfg *Config) (*Inbox[TTx], error) {
	if driver == nil {
		return nil, fmt.Errorf("%w: nil driver", ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ib := &Inbox[TTx]{driver: driver, cfg: c, consumer: []byte(c.Consumer), hooks: newHookSet(c.Hooks, c.Logger)}
	warnings, err := driver.DurabilityWarnings(ctx)
	if err != nil {
		c.Logger.WarnContext(ctx, "inbox: could not check the database's durability settings", "error", err)
	}
	for _, w := range warnings {
		c.Logger.WarnContext(ctx, "inbox: "+w, "dialect", driver.Dialect())
	}
	return ib, nil
}

// Migrate creates or updates the inbox's tables. It is safe to run from
// several processes at once.
func Migrate[TTx any](ctx context.Context, driver store.Driver[TTx]) error {
	return driver.Migrate(ctx)
}

// Consumer returns the consumer name the inbox scopes IDs with.
func (ib *Inbox[TTx]) Consumer() string { return ib.cfg.Consumer }

// Process processes msg effectively once: in one transaction it claims the
// message's ID and runs h; it commits both, or neither.
//
//   - A new message whose handler succeeds: Processed, after COMMIT.
//   - A message processed (or dead-lettered) before: Duplicate; h does not run.
//   - A failing handler: its writes and the claim roll back, the attempt is
//     recorded in a transaction of its own, and the outcome is Retry with a
//     backoff delay, or DeadLettered at MaxAttempts or for a Permanent error.
//     A transient failure (a deadlock or lock timeout in h's own queries,
//     as IsRetryable or the store tells it) is retried without limit,
//     never dead-lettered.
//   - An invalid message (an empty or oversized ID): DeadLettered at once,
//     with its payload kept, and an *InvalidMessageError.
//   - A database error (a lock timeout behind a racing delivery, a lost
//     connection, a COMMIT of unknown outcome): Retry with the error.
//
// Acknowledge the delivery only when Outcome.Ack() is true, and otherwise
// redeliver it after Outcome.Delay. The error explains a Retry; it is nil
// otherwise, except for an invalid message and for ErrFingerprintConflict
// when Config.FingerprintConflictError is set. A nil ib or h gives Retry
// and an error wrapping ErrInvalidConfig, and nothing runs.
func (ib *Inbox[TTx]) Process(ctx context.Context, msg Message, h Handler[TTx]) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	start := time.Now()
	if err := msg.validate(ib.cfg.ScopeIDByType); err != nil {
		out, err := ib.record(ctx, nil, func(tx TTx) (Outcome, bool, error) { return ib.deadLetterInvalid(ctx, tx, &msg, err) })
		return ib.finish(ctx, &msg, start, out, err)
	}
	p := ib.claimParams(&msg)
	tx, res, err := ib.driver.BeginClaim(ctx, p)
	if err != nil {
		return ib.finish(ctx, &msg, start, ib.retryNow(), fmt.Errorf("inbox: claim: %w", err))
	}
	if !res.Claimed { // the driver has ended the transaction
		return ib.duplicate(ctx, &msg, start, p, res)
	}
	if herr := callHandler(ctx, tx, &msg, h); herr != nil {
		_ = ib.driver.Rollback(ctx, tx)
		out, err := ib.failed(ctx, nil, &msg, p, herr)
		return ib.finish(ctx, &msg, start, out, err)
	}
	if err := ib.driver.Commit(ctx, tx); err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		err = fmt.Errorf("inbox: commit: %w", err)
		if IsRetryable(err) { // transient, or the outcome is unknown: not the handler's fault
			return ib.finish(ctx, &msg, start, ib.retryNow(), err)
		}
		// A known failure (h swallowed an error that aborted the
		// transaction, a constraint checked at COMMIT): an attempt like
		// any handler error, or it would be retried for ever.
		out, err := ib.failed(ctx, nil, &msg, p, err)
		return ib.finish(ctx, &msg, start, out, err)
	}
	return ib.finish(ctx, &msg, start, Outcome{Status: Processed}, nil)
}

// checkArgs rejects a nil inbox or handler, a programming error that would
// otherwise panic in a worker (and kill the process).
func checkArgs[TTx any](ib *Inbox[TTx], h Handler[TTx]) error {
	switch {
	case ib == nil:
		return fmt.Errorf("%w: nil *Inbox", ErrInvalidConfig)
	case h == nil:
		return fmt.Errorf("%w: nil handler", ErrInvalidConfig)
	}
	return nil
}

// savepoint is the name of ProcessTx's savepoint in the caller's transaction.
const savepoint = "inbox_claim"

// ProcessTx is Process in the caller's transaction tx, for a service that
// owns its transactions. It claims msg's ID in tx and runs h with tx. It
// neither commits nor rolls back: commit when Outcome.Commit() is true and
// roll back otherwise, then ack only after a successful COMMIT and only
// when Outcome.Ack() is true.
//
//   - Processed: commit; the claim and h's writes persist together.
//   - Duplicate, Retry: roll back. A handler failure was recorded in a
//     transaction of the inbox's own (after rolling back the claim and h's
//     writes to a savepoint, so that tx holds no lock on the message).
//   - DeadLettered: the dead letter is committed already; roll back.
//
// On a database with one writer at a time (SQLite) a transaction of the
// inbox's own would wait for tx: there the failure, or the dead letter, is
// recorded in tx after the savepoint, Commit() is true, and committing also
// keeps what tx wrote before ProcessTx.
//
// Hooks see Processed before the caller's COMMIT.
func (ib *Inbox[TTx]) ProcessTx(ctx context.Context, tx TTx, msg Message, h Handler[TTx]) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	start := time.Now()
	if err := msg.validate(ib.cfg.ScopeIDByType); err != nil {
		out, err := ib.record(ctx, &tx, func(tx TTx) (Outcome, bool, error) { return ib.deadLetterInvalid(ctx, tx, &msg, err) })
		return ib.finish(ctx, &msg, start, out, err)
	}
	p := ib.claimParams(&msg)
	p.Savepoint = savepoint
	res, err := ib.driver.Claim(ctx, tx, p)
	if err != nil {
		return ib.finish(ctx, &msg, start, ib.retryNow(), fmt.Errorf("inbox: claim: %w", err))
	}
	if !res.Claimed {
		return ib.duplicate(ctx, &msg, start, p, res)
	}
	herr := callHandler(ctx, tx, &msg, h)
	if herr == nil {
		return ib.finish(ctx, &msg, start, Outcome{Status: Processed, commit: true}, nil)
	}
	if err := ib.driver.RollbackToSavepoint(ctx, tx, savepoint); err != nil {
		return ib.finish(ctx, &msg, start, ib.retryNow(), errors.Join(herr, fmt.Errorf("inbox: rollback to savepoint: %w", err)))
	}
	out, err := ib.failed(ctx, &tx, &msg, p, herr)
	return ib.finish(ctx, &msg, start, out, err)
}

func (ib *Inbox[TTx]) claimParams(msg *Message) *store.ClaimParams {
	return &store.ClaimParams{
		Key:         store.Key{Consumer: ib.consumer, MessageID: storedID(msg, ib.cfg.ScopeIDByType)},
		LockTimeout: ib.cfg.LockTimeout,
		Type:        storableType(msg.Type),
		Fingerprint: fingerprint(msg.Payload),
	}
}

// retryNow is the outcome of a database error: redeliver soon.
func (ib *Inbox[TTx]) retryNow() Outcome {
	return Outcome{Status: Retry, Delay: ib.cfg.Backoff.Delay(1)}
}

func (ib *Inbox[TTx]) duplicate(ctx context.Context, msg *Message, start time.Time, p *store.ClaimParams, res *store.ClaimResult) (Outcome, error) {
	out := Outcome{Status: Duplicate}
	var err error
	if res.Fingerprint != nil && !bytes.Equal(res.Fingerprint, p.Fingerprint) {
		e := &Event{Consumer: ib.cfg.Consumer, Message: msg, Outcome: out, Duration: time.Since(start),
			StoredFingerprint: res.Fingerprint, Fingerprint: p.Fingerprint, StoredType: res.Type}
		ib.hooks.fingerprintConflict(ctx, e)
		ib.cfg.Logger.WarnContext(ctx, "inbox: message ID reused for a different payload",
			"consumer", ib.cfg.Consumer, "id", fmt.Sprintf("%q", msg.ID), "stored_type", res.Type, "type", msg.Type)
		if ib.cfg.FingerprintConflictError {
			err = ErrFingerprintConflict
		}
	}
	return ib.finish(ctx, msg, start, out, err)
}

// record runs fn in a transaction of the inbox's own, committed when fn
// says it wrote something that must persist; or, for ProcessTx on a
// database with one writer (caller set), in the caller's transaction, which
// the caller then commits.
func (ib *Inbox[TTx]) record(ctx context.Context, caller *TTx, fn func(tx TTx) (out Outcome, keep bool, err error)) (Outcome, error) {
	if caller != nil && ib.driver.OneWriter() {
		out, keep, err := fn(*caller)
		out.commit = keep
		return out, err
	}
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return ib.retryNow(), fmt.Errorf("inbox: recording a failure: %w", err)
	}
	out, keep, err := fn(tx)
	if !keep {
		_ = ib.driver.Rollback(ctx, tx)
		return out, err
	}
	if cerr := ib.driver.Commit(ctx, tx); cerr != nil {
		_ = ib.driver.Rollback(ctx, tx)
		return ib.retryNow(), errors.Join(err, fmt.Errorf("inbox: recording a failure: %w", cerr))
	}
	return out, err
}

// failed records a handler's failure after its writes and the claim were
// rolled back (caller: ProcessTx's transaction, nil for Process).
func (ib *Inbox[TTx]) failed(ctx context.Context, caller *TTx, msg *Message, p *store.ClaimParams, herr error) (Outcome, error) {
	if ctx.Err() != nil { // shutting down: the handler was interrupted, not at fault
		return ib.retryNow(), herr
	}
	return ib.record(ctx, caller, func(tx TTx) (Outcome, bool, error) { return ib.recordFailure(ctx, tx, msg, p, herr) })
}

// retryable reports whether a handler's error is transient: IsRetryable,
// or a database error the store recognizes (a MySQL deadlock, which
// IsRetryable cannot tell without the driver's error type).
func (ib *Inbox[TTx]) retryable(err error) bool {
	return IsRetryable(err) || ib.driver.Retryable(err)
}

// recordFailure counts a failed attempt in tx and, for a permanent error
// or at MaxAttempts, writes the dead letter in tx. keep tells whether tx
// holds something to commit.
func (ib *Inbox[TTx]) recordFailure(ctx context.Context, tx TTx, msg *Message, p *store.ClaimParams, herr error) (Outcome, bool, error) {
	text := errorText(herr)
	n, err := ib.driver.AttemptAdd(ctx, tx, &store.AttemptParams{Key: p.Key, Error: text})
	if err != nil {
		return ib.retryNow(), false, errors.Join(herr, fmt.Errorf("inbox: recording the attempt: %w", err))
	}
	permanent := IsPermanent(herr)
	if permanent || (n >= ib.cfg.MaxAttempts && !ib.retryable(herr)) {
		ok, err := ib.driver.DeadLetterAdd(ctx, tx, &store.DeadLetterParams{
			ClaimParams: *p, Payload: msg.Payload, Headers: encodeHeaders(msg.Headers), Error: text, Attempts: n,
		})
		if err != nil {
			return ib.retryNow(), false, errors.Join(herr, fmt.Errorf("inbox: writing the dead letter: %w", err))
		}
		if !ok { // a racing delivery processed it meanwhile
			return Outcome{Status: Duplicate}, false, nil
		}
		return Outcome{Status: DeadLettered, Attempts: n, Err: herr}, true, nil
	}
	delay := ib.cfg.Backoff.Delay(n)
	var ra *retryAfterError
	if errors.As(herr, &ra) {
		delay = max(ra.delay, 0)
	}
	return Outcome{Status: Retry, Delay: delay, Attempts: n, Err: herr}, true, herr
}

// deadLetterInvalid keeps an invalid message as a dead letter in tx.
func (ib *Inbox[TTx]) deadLetterInvalid(ctx context.Context, tx TTx, msg *Message, verr error) (Outcome, bool, error) {
	_, err := ib.driver.DeadLetterAdd(ctx, tx, &store.DeadLetterParams{
		ClaimParams: store.ClaimParams{Key: store.Key{Consumer: ib.consumer, MessageID: storedID(msg, ib.cfg.ScopeIDByType)}, Type: storableType(msg.Type)},
		Payload:     msg.Payload, Headers: encodeHeaders(msg.Headers), Error: errorText(verr), Invalid: true,
	})
	if err != nil {
		return ib.retryNow(), false, errors.Join(verr, fmt.Errorf("inbox: writing the dead letter: %w", err))
	}
	return Outcome{Status: DeadLettered, Err: verr}, true, verr
}

func (ib *Inbox[TTx]) finish(ctx context.Context, msg *Message, start time.Time, out Outcome, err error) (Outcome, error) {
	if ib.hooks.any {
		ib.hooks.outcome(ctx, &Event{Consumer: ib.cfg.Consumer, Message: msg, Outcome: out, Duration: time.Since(start)})
	}
	return out, err
}

// callHandler runs h, turning a panic into a *PanicError.
func callHandler[TTx any](ctx context.Context, tx TTx, msg *Message, h Handler[TTx]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, tx, msg)
}

// maxErrorText bounds a stored error message, in bytes.
const maxErrorText = 4096

// errorText makes err's message storable: valid UTF-8, no NUL, bounded.
func errorText(err error) string { return storable(err.Error(), maxErrorText) }
