package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/inboxkit/inbox/internal/storable"
	"github.com/inboxkit/inbox/store"
)

// Handler processes one message in tx, the transaction that holds the
// message's claim.
//
// Its writes through tx commit together with the claim, at most once per
// message ID. An error rolls both back, and the message is retried. Wrap the
// error with [Permanent] to dead-letter the message at once. Wrap it with
// [RetryAfter] to choose the delay.
//
// Effects outside tx are not covered. Send them through the outbox, or give
// them an [IdempotencyKey].
//
// A Handler must not commit or roll back tx. Process does. A handler that
// does has failed with [ErrTxEndedByHandler]. See the package's section
// "Transactions handlers must not end".
type Handler[TTx any] func(ctx context.Context, tx TTx, msg *Message) error

// Inbox processes messages effectively once for one consumer.
//
// TTx is its store's transaction type, such as pgx.Tx or *sql.Tx. An Inbox
// is safe for concurrent use.
type Inbox[TTx any] struct {
	driver   store.Driver[TTx]
	cfg      Config
	consumer []byte
	hooks    hookSet
	health   health    // the database's consecutive failures
	retryLog sometimes // rate-limits the log lines of retries
	splitLog sometimes // and of batches split after a lock conflict
	keptLog  sometimes // and of conflicts in batches that are not split
}

// New returns an Inbox on driver.
//
// It checks that the tables are at the schema version this code needs. If
// they are not, the error wraps [ErrNotMigrated]. Run [Migrate] then.
//
// New also checks the database's durability settings once. It logs a
// warning for each one that could lose a committed claim in a crash or a
// failover. On a database that takes no writes, such as a standby, New
// returns an error wrapping [store.ErrReadOnly]: every claim would fail.
//
// A nil driver is an error wrapping [ErrInvalidConfig]. So is a driver that
// holds a nil pointer.
func New[TTx any](ctx context.Context, driver store.Driver[TTx], cfg *Config) (*Inbox[TTx], error) {
	if isNil(driver) {
		return nil, fmt.Errorf("%w: nil driver (%T)", ErrInvalidConfig, driver)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ib := &Inbox[TTx]{driver: driver, cfg: c, consumer: []byte(c.Consumer), hooks: newHookSet(c.Hooks, c.Logger)}
	ib.health.init(c.Logger, c.Consumer)
	ib.retryLog.interval = retryLogInterval
	ib.splitLog.interval = retryLogInterval
	ib.keptLog.interval = retryLogInterval
	// A database that takes no writes may refuse the schema's read too:
	// say what it is first.
	if err := ib.checkDurability(ctx); err != nil {
		return nil, err
	}
	if err := ib.checkSchema(ctx); err != nil {
		return nil, err
	}
	return ib, nil
}

// checkDurability logs the driver's durability warnings. It fails only
// on a database that takes no writes.
func (ib *Inbox[TTx]) checkDurability(ctx context.Context) error {
	logger := ib.cfg.Logger
	warnings, err := ib.driver.DurabilityWarnings(ctx)
	if errors.Is(err, store.ErrReadOnly) {
		return fmt.Errorf("inbox: %w", err)
	}
	if err != nil {
		logger.WarnContext(ctx, "inbox: could not check the database's durability settings", "error", err)
	}
	for _, w := range warnings {
		logger.WarnContext(ctx, "inbox: "+w, "dialect", ib.driver.Dialect())
	}
	return nil
}

// checkSchema compares the tables' schema version with the code's.
func (ib *Inbox[TTx]) checkSchema(ctx context.Context) error {
	need := 0
	if ms := ib.driver.Migrations(); len(ms) > 0 {
		need = ms[len(ms)-1].Version
	}
	have, err := ib.driver.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("inbox: checking the tables' schema version: %w", err)
	}
	switch {
	case have == 0:
		return fmt.Errorf("%w (no schema version recorded): run inbox.Migrate (or `inbox migrate`)", ErrNotMigrated)
	case have < need:
		return fmt.Errorf("%w: schema version %d, this code needs %d: run inbox.Migrate (or `inbox migrate`)", ErrNotMigrated, have, need)
	case have > need: // a newer deploy migrated them: migrations only add
		ib.cfg.Logger.InfoContext(ctx, "inbox: the tables are at a newer schema version than this code knows",
			"schema_version", have, "code_version", need)
	}
	return nil
}

// Migrate creates or updates the inbox's tables.
//
// It is safe to run from several processes at once. A nil driver is an
// error wrapping [ErrInvalidConfig]. So is a driver that holds a nil
// pointer.
func Migrate[TTx any](ctx context.Context, driver store.Driver[TTx]) error {
	if isNil(driver) {
		return fmt.Errorf("%w: nil driver (%T)", ErrInvalidConfig, driver)
	}
	return driver.Migrate(ctx)
}

// Consumer returns the consumer name the inbox scopes IDs with.
func (ib *Inbox[TTx]) Consumer() string { return ib.cfg.Consumer }

// Process processes msg effectively once.
//
// In one transaction it claims the message's ID and runs h. It commits
// both, or neither.
//
//   - A new message whose handler succeeds is Processed, after COMMIT.
//   - A message processed or dead-lettered before is a Duplicate. Then h
//     does not run. If the payload differs from the first one's,
//     [Outcome.Err] is [ErrFingerprintConflict].
//   - A failing handler's writes and claim roll back. The failure is
//     recorded in a transaction of its own. The outcome is Retry with a
//     backoff delay, or DeadLettered. A [Permanent] error dead-letters at
//     once.
//   - A message with an empty or oversized ID is invalid. It is
//     DeadLettered with its payload.
//   - An error of the inbox's own statements is a Retry. Its delay grows
//     while the database keeps failing.
//
// The error is non-nil exactly when the outcome is Retry. Nothing was
// committed then. Nack the delivery with [Outcome.Delay]. Otherwise
// [Outcome.Ack] is true, the message's fate is committed, and you ack.
//
//	if err != nil {
//		nack(out.Delay)
//		return
//	}
//	ack()
//
// The package's sections "Outcomes and acks" and "Failures and retries"
// tell more. [Config.MaxAttempts] and [Config.MaxTransientFailures] bound
// the retries.
//
// A nil ib or h gives Retry and an error wrapping [ErrInvalidConfig]. Then
// nothing runs.
func (ib *Inbox[TTx]) Process(ctx context.Context, msg Message, h Handler[TTx]) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	return ib.process(ctx, nil, &msg, func(ctx context.Context, pr *processing) (Outcome, error) {
		tx, res, err := ib.driver.BeginClaim(ctx, pr.claim)
		if err != nil {
			return ib.dbFailed(ctx, "claim", err)
		}
		ib.health.ok(ctx)
		if !res.Claimed { // the driver has ended the transaction
			return ib.duplicate(ctx, pr, res), nil
		}
		herr, cerr := ib.handleAndCommit(ctx, pr, tx, h)
		switch {
		case herr != nil:
			return ib.failed(ctx, nil, pr.msg, pr.claim, herr)
		case cerr == nil:
			return Outcome{Status: Processed}, nil
		case IsRetryable(cerr): // transient, or the outcome is unknown: not the handler's fault
			return ib.dbFailed(ctx, "commit", cerr)
		}
		// A COMMIT that certainly failed (h swallowed an error that
		// aborted the transaction, left a result set open, broke a
		// constraint checked at COMMIT), or that h made impossible by
		// ending tx itself: a failure like any handler error, or it
		// would be retried for ever.
		herr = fmt.Errorf("inbox: commit: %w", cerr)
		if errors.Is(cerr, store.ErrTxDone) && ctx.Err() == nil { // database/sql ends a transaction whose ctx ended
			herr = txEndedError(cerr)
		}
		return ib.failed(ctx, nil, pr.msg, pr.claim, herr)
	})
}

// handleAndCommit runs h in tx, then commits tx unless h failed. It rolls
// tx back in one deferred place, which a COMMIT makes a no-op.
func (ib *Inbox[TTx]) handleAndCommit(ctx context.Context, pr *processing, tx TTx, h Handler[TTx]) (herr, cerr error) {
	defer func() { _ = ib.driver.Rollback(ctx, tx) }()
	if herr = ib.runHandler(pr, func() error { return h(ctx, tx, pr.msg) }); herr != nil {
		return herr, nil
	}
	return nil, ib.driver.Commit(ctx, tx)
}

// processing is one message on its way through Process, ProcessTx or
// ProcessQueued: what the end needs to log it and tell the hooks.
type processing struct {
	msg     *Message
	start   time.Time
	claim   *store.ClaimParams // nil for an invalid message
	handler time.Duration      // the handler's time, 0 when it did not run
}

// process is the one way in and out of Process, ProcessTx and
// ProcessQueued. It tells the start hooks and dead-letters an invalid msg,
// in caller's transaction when given. A valid msg goes through body. The
// outcome is then logged and told to the hooks.
func (ib *Inbox[TTx]) process(ctx context.Context, caller *TTx, msg *Message,
	body func(context.Context, *processing) (Outcome, error)) (Outcome, error) {
	pr := &processing{msg: msg, start: time.Now()}
	ctx = ib.hooks.started(ctx, ib.cfg.Consumer, msg)
	var out Outcome
	var err error
	if verr := msg.validate(ib.cfg.ScopeIDByType); verr != nil {
		out, err = ib.invalidMessage(ctx, caller, msg, verr)
	} else {
		pr.claim = ib.claimParams(msg)
		out, err = body(ctx, pr)
	}
	return ib.finish(ctx, pr, out, err)
}

// runHandler runs a handler through fn, safely. It keeps the handler's
// time when an outcome hook will read it.
func (ib *Inbox[TTx]) runHandler(pr *processing, fn func() error) error {
	start := ib.hooks.now()
	err := safely(fn)
	pr.handler = ib.hooks.since(start)
	return err
}

// txEndedError is the failure of a handler that ended the inbox's
// transaction, whose end (a COMMIT or a ROLLBACK) the inbox cannot tell.
func txEndedError(err error) error {
	return fmt.Errorf("%w: its writes may or may not have committed; the message is retried, and then a duplicate if they did: %w",
		ErrTxEndedByHandler, err)
}

// handler is any of the inbox's handler types.
type handler[TTx any] interface {
	Handler[TTx] | BatchHandler[TTx] | QueuedHandler
}

// checkArgs rejects a nil inbox or handler, a programming error that would
// otherwise panic in a worker (and kill the process).
func checkArgs[TTx any, H handler[TTx]](ib *Inbox[TTx], h H) error {
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

// ProcessTx is Process in the caller's transaction tx.
//
// It is for a service that owns its transactions. It claims msg's ID in tx
// and runs h with tx. It neither commits nor rolls back.
//
//   - Processed. Commit. The claim and h's writes persist together.
//   - Duplicate. Roll back.
//   - Retry after a handler failure, or DeadLettered. Commit, to keep the
//     failure's count or the dead letter.
//   - Retry after a database error. Roll back.
//
// [Outcome.Commit] tells which. Ack when [Outcome.Ack] is true, after the
// COMMIT succeeded if there was one. The error is nil exactly then, as for
// Process.
//
// Committing after a failure also keeps what tx wrote before ProcessTx. So
// call ProcessTx first, or write in h.
//
// A handler that returns nil after a failed statement aborted tx has
// failed. PostgreSQL aborts tx at a failed statement, and MySQL rolls it
// back on a deadlock. A handler that left a result set open on pgx has
// failed too. The outcome is then never Processed.
//
// Three failures cannot be recorded in tx. ProcessTx then rolls tx back
// itself, and [Outcome.Commit] is false. It records the failure in a
// transaction of its own, which needs a connection of the store's pool.
//
// Hooks see Processed before the caller's COMMIT. The package's section
// "The caller's transaction" tells the rest.
func (ib *Inbox[TTx]) ProcessTx(ctx context.Context, tx TTx, msg Message, h Handler[TTx]) (Outcome, error) {
	if err := checkArgs(ib, h); err != nil {
		return Outcome{Status: Retry}, err
	}
	return ib.process(ctx, &tx, &msg, func(ctx context.Context, pr *processing) (Outcome, error) {
		pr.claim.Savepoint = savepoint
		res, err := ib.driver.Claim(ctx, tx, pr.claim)
		if err != nil {
			return ib.dbFailed(ctx, "claim", err)
		}
		ib.health.ok(ctx)
		if !res.Claimed {
			return ib.duplicate(ctx, pr, res), nil
		}
		herr := ib.runHandler(pr, func() error { return h(ctx, tx, pr.msg) })
		if herr == nil {
			if herr = ib.driver.CheckTx(ctx, tx, savepoint); herr == nil {
				return Outcome{Status: Processed, commit: true}, nil
			}
			herr = fmt.Errorf("inbox: the handler returned no error, but: %w", herr)
		}
		caller := &tx
		if err := ib.driver.RollbackToSavepoint(ctx, tx, savepoint); err != nil && !errors.Is(err, store.ErrTxRestarted) {
			// (Restarted: the claim is gone with the rest; the failure is
			// recorded in the new transaction.)
			ended := errors.Is(err, store.ErrTxDone) && ctx.Err() == nil // database/sql ends a transaction whose ctx ended
			if !ended && !errors.Is(err, store.ErrTxUnusable) {
				out, err := ib.dbFailed(ctx, "rollback to savepoint", err)
				return out, errors.Join(herr, err)
			}
			if ended { // the handler committed or rolled back the caller's tx
				herr = txEndedError(err)
			}
			// tx cannot run a statement (pgx, rows left open), or is over:
			// end it, which gives its connection back, and record in a
			// transaction of our own.
			_ = ib.driver.Rollback(ctx, tx)
			caller = nil
		}
		return ib.failed(ctx, caller, pr.msg, pr.claim, herr)
	})
}

func (ib *Inbox[TTx]) claimParams(msg *Message) *store.ClaimParams {
	p := ib.claimValue(msg)
	return &p
}

func (ib *Inbox[TTx]) claimValue(msg *Message) store.ClaimParams {
	return store.ClaimParams{
		Key:         store.Key{Consumer: ib.consumer, MessageID: storedID(msg, ib.cfg.ScopeIDByType)},
		LockTimeout: ib.cfg.LockTimeout,
		Type:        storableType(msg.Type),
		Fingerprint: ib.fingerprint(msg.Payload),
	}
}

// fingerprint is the payload's fingerprint, nil with Config.NoFingerprint.
func (ib *Inbox[TTx]) fingerprint(payload []byte) []byte {
	if ib.cfg.NoFingerprint {
		return nil
	}
	return fingerprint(payload)
}

// retryNow is the outcome of a failure that is nobody's fault in
// particular: redeliver soon.
func (ib *Inbox[TTx]) retryNow() Outcome {
	return Outcome{Status: Retry, Delay: ib.cfg.Backoff.Delay(1)}
}

// dbFailed is the outcome of an error of the inbox's own statements:
// nothing committed; redeliver after a delay that grows with the database's
// consecutive failures. An error no retry fixes is marked ErrUnrecoverable.
func (ib *Inbox[TTx]) dbFailed(ctx context.Context, op string, err error) (Outcome, error) {
	if ib.driver.Unrecoverable(err) {
		err = fmt.Errorf("%w: %s: %w", ErrUnrecoverable, op, err)
	} else {
		err = fmt.Errorf("inbox: %s: %w", op, err)
	}
	if ctx.Err() != nil { // shutting down or given up: not the database's fault
		return ib.retryNow(), err
	}
	// The delay grows with the failures in a row, but at most outageSlack
	// doublings past the first delay as long as the database has failed:
	// workers fail fast through a backlog, and counting alone nacked
	// messages for Backoff.Max after a 1 s failover.
	n := min(ib.health.failed(ctx, err), ib.cfg.Backoff.stepFor(ib.health.failingFor())+outageSlack)
	return Outcome{Status: Retry, Delay: ib.cfg.Backoff.Delay(n)}, err
}

// duplicate is the outcome of a claim that found res. It tells the hooks
// and the log of a fingerprint conflict.
func (ib *Inbox[TTx]) duplicate(ctx context.Context, pr *processing, res *store.ClaimResult) Outcome {
	out := Outcome{Status: Duplicate}
	if p := pr.claim; conflicts(res.Fingerprint, p.Fingerprint) {
		out.Err = ErrFingerprintConflict
		e := &Event{Consumer: ib.cfg.Consumer, Message: pr.msg, Outcome: out, Duration: time.Since(pr.start),
			StoredFingerprint: res.Fingerprint, Fingerprint: p.Fingerprint, StoredType: res.Type}
		ib.hooks.fingerprintConflict(ctx, e)
		ib.cfg.Logger.WarnContext(ctx, "inbox: message ID reused for a different payload",
			"consumer", ib.cfg.Consumer, "id", logID(pr.msg.ID), "stored_type", res.Type, "type", pr.msg.Type)
	}
	return out
}

// conflicts tells whether a duplicate's stored fingerprint differs from
// this delivery's; not when either is unknown (not stored, the stored row
// gone, or Config.NoFingerprint).
func conflicts(stored, fp []byte) bool {
	return stored != nil && fp != nil && !bytes.Equal(stored, fp)
}

// record runs fn in a transaction of the inbox's own, committed when fn
// says it wrote something that must persist; or, for ProcessTx (caller
// set), in the caller's transaction, which the caller then commits. When
// the database refused the dead letter fn wrote (payloadRefusedError), the
// transaction is rolled back, the caller's too, and fn runs again in a
// transaction of the inbox's own, told to keep neither payload nor headers.
func (ib *Inbox[TTx]) record(ctx context.Context, caller *TTx, fn func(tx TTx, refused error) (out Outcome, keep bool, err error)) (Outcome, error) {
	out, err := ib.recordIn(ctx, caller, func(tx TTx) (Outcome, bool, error) { return fn(tx, nil) })
	var refused *payloadRefusedError
	if !errors.As(err, &refused) {
		return out, err
	}
	if caller != nil { // aborted, or (MySQL) its connection closed by the server
		_ = ib.driver.Rollback(ctx, *caller)
	}
	return ib.recordIn(ctx, nil, func(tx TTx) (Outcome, bool, error) { return fn(tx, refused.err) })
}

func (ib *Inbox[TTx]) recordIn(ctx context.Context, caller *TTx, fn func(tx TTx) (out Outcome, keep bool, err error)) (Outcome, error) {
	if caller != nil {
		out, keep, err := fn(*caller)
		out.commit = keep
		return out, err
	}
	tx, err := ib.driver.Begin(ctx, &store.BeginParams{LockTimeout: ib.cfg.LockTimeout})
	if err != nil {
		return ib.dbFailed(ctx, "recording a failure", err)
	}
	defer func() { _ = ib.driver.Rollback(ctx, tx) }() // a no-op after COMMIT
	out, keep, err := fn(tx)
	if !keep {
		return out, err
	}
	if cerr := ib.driver.Commit(ctx, tx); cerr != nil {
		out, cerr := ib.dbFailed(ctx, "recording a failure: commit", cerr)
		return out, errors.Join(err, cerr)
	}
	return out, err
}

// payloadRefusedError: the database refused a dead letter as too large
// for it (MySQL: larger than max_allowed_packet).
type payloadRefusedError struct{ err error }

func (e *payloadRefusedError) Error() string {
	return "inbox: writing the dead letter: " + e.err.Error()
}
func (e *payloadRefusedError) Unwrap() error { return e.err }

// deadLetter writes p, with msg's payload and headers, in tx. refused is
// nil, or the error with which the database refused them before: then
// they are left out and p.Error says why. The database's refusal of a
// value too large for it (store.ErrTooLarge) is returned as a
// *payloadRefusedError.
func (ib *Inbox[TTx]) deadLetter(ctx context.Context, tx TTx, msg *Message, p *store.DeadLetterParams, refused error) (bool, error) {
	p.Payload, p.Headers = msg.Payload, encodeHeaders(msg.Headers)
	if refused != nil {
		p.Payload, p.Headers = nil, payloadLostMarker
		p.Error = errorText(fmt.Errorf("%s [%w: %d bytes of payload, %d headers; the database refused them: %w]",
			p.Error, ErrPayloadLost, len(msg.Payload), len(msg.Headers), refused))
	}
	ok, err := ib.driver.DeadLetterAdd(ctx, tx, p)
	switch {
	case err == nil:
		if refused != nil {
			ib.cfg.Logger.ErrorContext(ctx, "inbox: dead letter kept without its payload and headers, which the database refused",
				"consumer", ib.cfg.Consumer, "id", logID(msg.ID), "type", msg.Type,
				"payload_bytes", len(msg.Payload), "error", refused)
		}
		return ok, nil
	case refused == nil && errors.Is(err, store.ErrTooLarge):
		return false, &payloadRefusedError{err}
	}
	return false, err
}

// failed records a handler's failure after its writes and the claim were
// rolled back (caller: ProcessTx's transaction, nil for Process).
func (ib *Inbox[TTx]) failed(ctx context.Context, caller *TTx, msg *Message, p *store.ClaimParams, herr error) (Outcome, error) {
	if ctx.Err() != nil { // shutting down: the handler was interrupted, not at fault
		return ib.retryNow(), herr
	}
	f := ib.failure(msg, p, herr)
	return ib.record(ctx, caller, func(tx TTx, refused error) (Outcome, bool, error) {
		return ib.recordFailure(ctx, tx, f, refused)
	})
}

// failure is a message whose handler failed, as recordFailure needs it.
type failure struct {
	msg       *Message
	claim     *store.ClaimParams
	err       error // the handler's
	transient bool  // counted apart from attempts
}

func (ib *Inbox[TTx]) failure(msg *Message, p *store.ClaimParams, herr error) *failure {
	return &failure{msg: msg, claim: p, err: herr, transient: !IsPermanent(herr) && ib.transient(herr)}
}

// transient reports whether a handler's error is transient: marked so
// (IsRetryable), or an error of the database that the store recognizes
// (a deadlock, a lock timeout). Only the store decides for database errors.
func (ib *Inbox[TTx]) transient(err error) bool {
	return IsRetryable(err) || ib.driver.Retryable(err)
}

// recordFailure counts a failed attempt (or a transient failure) in tx
// and, when the message has failed for good, writes the dead letter in tx.
// keep tells whether tx holds something to commit.
func (ib *Inbox[TTx]) recordFailure(ctx context.Context, tx TTx, f *failure, refused error) (Outcome, bool, error) {
	herr, transient := f.err, f.transient
	text := errorText(herr)
	a, err := ib.driver.AttemptAdd(ctx, tx, &store.AttemptParams{Key: f.claim.Key, Error: text, Transient: transient})
	if err != nil {
		out, err := ib.dbFailed(ctx, "recording the attempt", err)
		return out, false, errors.Join(herr, err)
	}
	ib.health.ok(ctx)
	var dead bool
	switch {
	case IsPermanent(herr):
		dead = true
	case transient:
		if dead = ib.cfg.MaxTransientFailures > 0 && a.Transient >= ib.cfg.MaxTransientFailures; dead {
			text = errorText(fmt.Errorf("inbox: %d transient failures, the limit (MaxTransientFailures); the last: %w", a.Transient, herr))
		}
	default:
		dead = a.Counted >= ib.cfg.MaxAttempts
	}
	if dead {
		ok, err := ib.deadLetter(ctx, tx, f.msg, &store.DeadLetterParams{ClaimParams: *f.claim, Error: text, Attempts: a.Counted}, refused)
		if err != nil {
			return ib.deadLetterFailed(ctx, herr, err)
		}
		if !ok { // a racing delivery processed it meanwhile
			return Outcome{Status: Duplicate}, false, nil
		}
		return Outcome{Status: DeadLettered, Attempts: a.Counted, Err: herr}, true, nil
	}
	delay := ib.cfg.Backoff.Delay(a.Counted)
	if transient {
		delay = ib.cfg.Backoff.Delay(a.Transient)
		if !IsRetryable(herr) {
			herr = store.Retryable(herr) // so that IsRetryable tells the caller
		}
	}
	var ra *retryAfterError
	if errors.As(herr, &ra) {
		delay = max(ra.delay, 0)
	}
	return Outcome{Status: Retry, Delay: delay, Attempts: a.Counted, Err: herr}, true, herr
}

// deadLetterFailed ends a record whose dead letter failed with err. A
// *payloadRefusedError stays as it is, so that record retries without
// the payload. Any other err is the database's, joined with cause.
func (ib *Inbox[TTx]) deadLetterFailed(ctx context.Context, cause, err error) (Outcome, bool, error) {
	if _, ok := err.(*payloadRefusedError); ok {
		return Outcome{}, false, err
	}
	out, err := ib.dbFailed(ctx, "writing the dead letter", err)
	return out, false, errors.Join(cause, err)
}

// invalidMessage keeps an invalid message as a dead letter, once: its
// claim, under a key derived from its content, turns a redelivery of the
// same invalid message into a Duplicate.
func (ib *Inbox[TTx]) invalidMessage(ctx context.Context, caller *TTx, msg *Message, verr error) (Outcome, error) {
	p := ib.claimParams(msg)
	p.MessageID = invalidKey(msg)
	return ib.record(ctx, caller, func(tx TTx, refused error) (Outcome, bool, error) {
		res, err := ib.driver.Claim(ctx, tx, p)
		if err != nil {
			out, err := ib.dbFailed(ctx, "claim of an invalid message", err)
			return out, false, errors.Join(verr, err)
		}
		ib.health.ok(ctx)
		if !res.Claimed { // its dead letter exists
			return Outcome{Status: Duplicate, Err: verr}, false, nil
		}
		_, err = ib.deadLetter(ctx, tx, msg, &store.DeadLetterParams{
			ClaimParams: store.ClaimParams{Key: store.Key{Consumer: ib.consumer, MessageID: storedID(msg, ib.cfg.ScopeIDByType)}, Type: p.Type},
			Error:       errorText(verr), Invalid: true,
		}, refused)
		if err != nil {
			return ib.deadLetterFailed(ctx, verr, err)
		}
		return Outcome{Status: DeadLettered, Err: verr}, true, nil
	})
}

// finish logs pr's outcome and tells the hooks.
func (ib *Inbox[TTx]) finish(ctx context.Context, pr *processing, out Outcome, err error) (Outcome, error) {
	ib.logOutcome(ctx, pr.msg, out, err)
	if ib.hooks.any {
		ib.hooks.outcome(ctx, &Event{Consumer: ib.cfg.Consumer, Message: pr.msg, Outcome: out,
			Duration: time.Since(pr.start), HandlerDuration: pr.handler})
	}
	return out, err
}

// safely runs a handler through fn, turning its panic into a *PanicError.
func safely(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// maxErrorText bounds a stored error message, in bytes.
const maxErrorText = 4096

// errorText makes err's message storable: valid UTF-8, no NUL, bounded. A
// handler's error whose Error method panics (a typed nil) is named by its
// type instead of killing the worker.
func errorText(err error) (text string) {
	defer func() {
		if v := recover(); v != nil {
			text = fmt.Sprintf("an error of type %T whose Error method panicked: %v", err, v)
		}
	}()
	return storable.Text(err.Error(), maxErrorText, `\0`)
}
