package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

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
	ib := &Inbox[TTx]{driver: driver, cfg: c, consumer: []byte(c.Consumer), hooks: newHookSet(c.Hooks)}
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
//   - An invalid message: Invalid with an *InvalidMessageError.
//   - A database error (a lock timeout behind a racing delivery, a lost
//     connection, a COMMIT of unknown outcome): Retry with the error.
//
// Acknowledge the delivery only when Outcome.Ack() is true. The error
// explains a Retry or Invalid outcome; it is nil otherwise, except for
// ErrFingerprintConflict when Config.FingerprintConflictError is set.
func (ib *Inbox[TTx]) Process(ctx context.Context, msg Message, h Handler[TTx]) (Outcome, error) {
	start := time.Now()
	if err := msg.validate(); err != nil {
		return ib.finish(ctx, &msg, start, Outcome{Status: Invalid}, err)
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
		out, err := ib.failed(ctx, &msg, p, herr)
		return ib.finish(ctx, &msg, start, out, err)
	}
	if err := ib.driver.Commit(ctx, tx); err != nil {
		_ = ib.driver.Rollback(ctx, tx)
		return ib.finish(ctx, &msg, start, ib.retryNow(), fmt.Errorf("inbox: commit: %w", err))
	}
	return ib.finish(ctx, &msg, start, Outcome{Status: Processed}, nil)
}

// savepoint is the name of ProcessTx's savepoint in the caller's transaction.
const savepoint = "inbox_claim"

// ProcessTx is Process in the caller's transaction tx, for a service that
// owns its transactions. It claims msg's ID in tx, after a savepoint, and
// runs h with tx. It neither commits nor rolls back: the caller does, then
// acks only after a successful COMMIT, and only when Outcome.Ack() is true.
// Whether to commit is Outcome.Commit():
//
//   - Processed: commit; the claim and h's writes persist together.
//   - Duplicate: nothing was written; roll back.
//   - Retry after a handler error: h's writes and the claim were rolled back
//     to the savepoint and the attempt recorded in tx: commit to keep the
//     count (rolling back is safe too, the attempt is then not counted).
//   - DeadLettered: the dead letter is in tx: commit.
//   - Retry after a database error, Invalid: roll back.
//
// The inbox writes only in tx, never on a second connection, so it cannot
// starve a connection pool.
func (ib *Inbox[TTx]) ProcessTx(ctx context.Context, tx TTx, msg Message, h Handler[TTx]) (Outcome, error) {
	start := time.Now()
	if err := msg.validate(); err != nil {
		return ib.finish(ctx, &msg, start, Outcome{Status: Invalid}, err)
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
	out, err := ib.recordFailure(ctx, tx, &msg, p, herr)
	if out.Status != Retry || out.Attempts > 0 {
		out.commit = out.Status != Duplicate
	}
	return ib.finish(ctx, &msg, start, out, err)
}

func (ib *Inbox[TTx]) claimParams(msg *Message) *store.ClaimParams {
	return &store.ClaimParams{
		Key:         store.Key{Consumer: ib.consumer, MessageID: []byte(msg.ID)},
		LockTimeout: ib.cfg.LockTimeout,
		Type:        msg.Type,
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
			StoredFingerprint: res.Fingerprint, Fingerprint: p.Fingerprint}
		for _, h := range ib.hooks.conflict {
			h.OnFingerprintConflict(ctx, e)
		}
		ib.cfg.Logger.WarnContext(ctx, "inbox: message ID reused for a different payload",
			"consumer", ib.cfg.Consumer, "id", fmt.Sprintf("%q", msg.ID), "type", msg.Type)
		if ib.cfg.FingerprintConflictError {
			err = ErrFingerprintConflict
		}
	}
	return ib.finish(ctx, msg, start, out, err)
}

// failed handles a handler error in Process, whose transaction is rolled
// back: the attempt is recorded in a transaction of its own.
func (ib *Inbox[TTx]) failed(ctx context.Context, msg *Message, p *store.ClaimParams, herr error) (Outcome, error) {
	if ctx.Err() != nil { // shutting down: the handler was interrupted, not at fault
		return ib.retryNow(), herr
	}
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return ib.retryNow(), errors.Join(herr, fmt.Errorf("inbox: recording the attempt: %w", err))
	}
	out, err := ib.recordFailure(ctx, tx, msg, p, herr)
	if out.Status == Duplicate || (out.Status == Retry && out.Attempts == 0) {
		_ = ib.driver.Rollback(ctx, tx)
		return out, err
	}
	if cerr := ib.driver.Commit(ctx, tx); cerr != nil {
		_ = ib.driver.Rollback(ctx, tx)
		return ib.retryNow(), errors.Join(herr, fmt.Errorf("inbox: recording the attempt: %w", cerr))
	}
	return out, err
}

// recordFailure counts a failed attempt in tx and, at MaxAttempts or for a
// permanent error, writes the dead letter in tx. Attempts == 0 in a Retry
// outcome means nothing was recorded: tx must be rolled back.
func (ib *Inbox[TTx]) recordFailure(ctx context.Context, tx TTx, msg *Message, p *store.ClaimParams, herr error) (Outcome, error) {
	if ctx.Err() != nil {
		return ib.retryNow(), herr
	}
	text := errorText(herr)
	n, err := ib.driver.AttemptAdd(ctx, tx, &store.AttemptParams{Key: p.Key, Error: text})
	if err != nil {
		return ib.retryNow(), errors.Join(herr, fmt.Errorf("inbox: recording the attempt: %w", err))
	}
	if IsPermanent(herr) || n >= ib.cfg.MaxAttempts {
		ok, err := ib.driver.DeadLetterAdd(ctx, tx, &store.DeadLetterParams{
			ClaimParams: *p, Payload: msg.Payload, Headers: encodeHeaders(msg.Headers), Error: text, Attempts: n,
		})
		if err != nil {
			return ib.retryNow(), errors.Join(herr, fmt.Errorf("inbox: writing the dead letter: %w", err))
		}
		if !ok { // a racing delivery processed it meanwhile
			return Outcome{Status: Duplicate}, nil
		}
		return Outcome{Status: DeadLettered, Attempts: n, Err: herr}, nil
	}
	delay := ib.cfg.Backoff.Delay(n)
	var ra *retryAfterError
	if errors.As(herr, &ra) {
		delay = max(ra.delay, 0)
	}
	return Outcome{Status: Retry, Delay: delay, Attempts: n, Err: herr}, herr
}

func (ib *Inbox[TTx]) finish(ctx context.Context, msg *Message, start time.Time, out Outcome, err error) (Outcome, error) {
	if out.Status != Invalid {
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
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\\0")
	if len(s) > maxErrorText {
		s = s[:maxErrorText]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
