package inbox

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/inboxkit/inbox/store"
)

// Defaults of Config and PrunerConfig.
const (
	DefaultLockTimeout = store.DefaultLockTimeout
	DefaultMaxAttempts = 10
	// DefaultMaxTransientFailures: with the default backoff, about 8 hours
	// of failing transiently.
	DefaultMaxTransientFailures = 100
	DefaultBackoffInitial       = time.Second
	DefaultBackoffMax           = 5 * time.Minute
	DefaultBackoffJitter        = 0.1
	DefaultRetention            = 7 * 24 * time.Hour
	MinRetention                = time.Hour
	DefaultPruneInterval        = time.Minute
	DefaultPruneBatchSize       = 1000
	DefaultPrunePause           = 30 * time.Millisecond
)

// Config configures an Inbox. The zero value of every field but Consumer
// means its default.
type Config struct {
	// Consumer scopes message IDs: the same ID is processed once per
	// consumer. Use one name per logical consumer (a service and the
	// stream it reads), stable across deploys. Required, 1 to
	// MaxConsumerLen bytes.
	Consumer string

	// LockTimeout bounds how long a claim waits for a racing delivery of the
	// same message that holds its row; it then fails with a retryable error.
	// It bounds every lock wait of the inbox's transactions (batches,
	// ProcessTx's claim, replays), and the handler's statements in them.
	// MySQL counts whole seconds: it is rounded up. On SQLite it bounds the
	// wait for the database's write lock. Default 5 s.
	LockTimeout time.Duration

	// MaxAttempts is the number of failed attempts after which a message is
	// dead-lettered: the MaxAttempts-th failure writes the dead letter.
	// Default 10; 1 dead-letters at the first failure. Transient failures
	// do not count (see MaxTransientFailures).
	MaxAttempts int

	// MaxTransientFailures is the number of transient failures after which
	// a message is dead-lettered all the same: a handler error that the
	// store recognizes as transient (a deadlock, a serialization failure,
	// a lock timeout in the handler's own queries) or that is marked so
	// (IsRetryable) does not count towards MaxAttempts, and its retries
	// back off on the message's transient failures; a message that keeps
	// failing that way for this long is not failing transiently. Default
	// 100 (with the default backoff, about 8 hours); negative means never.
	MaxTransientFailures int

	// Backoff spaces the retries of a failing message, and of every
	// message while the database keeps failing. Default: 1 s, doubling to
	// 5 min, ±10 % jitter.
	Backoff Backoff

	// ScopeIDByType makes a message's key its type and ID together, for
	// producers that number each message type on its own: with it,
	// "order-123" as OrderCreated and as OrderShipped are two messages;
	// without it (the default, false) the second is skipped as a duplicate
	// and reported as a fingerprint conflict. The stored message_id is then
	// the type's length (a uvarint), the type's bytes as given (any bytes)
	// and the ID, so that no two (type, ID) pairs share a key; these must
	// fit in MaxIDLen bytes together, or the message is invalid. It works
	// the same with Process, ProcessTx and Consume. Changing it changes
	// every key: a message processed before the change and redelivered
	// after it runs again, so choose it before the consumer's first
	// message, or with a new Consumer name. IdempotencyKey sees only the
	// ID: put the type into its purpose.
	ScopeIDByType bool
	// NoFingerprint, when true, stores no fingerprint (the SHA-256 of the
	// payload) with the inbox row and reads none for a duplicate (except
	// ProcessQueued's, which reads the row to tell a duplicate from a
	// claim rolled back): 33 bytes of WAL less per message (of about 385
	// on PostgreSQL; README, Performance: from 3 % slower to 12 % faster
	// at 8 goroutines), and a batch with many duplicates up to 1.7 times as
	// fast; but an ID reused for another payload is then a plain
	// duplicate, never a fingerprint conflict. Default false: the
	// fingerprint is stored and compared.
	NoFingerprint bool

	// Hooks receive outcomes. Each may implement any of [ProcessedHook],
	// [DuplicateHook], [RetryHook], [DeadLetteredHook],
	// [FingerprintConflictHook], [StartHook] and [BatchSplitHook], and must
	// implement one: New rejects a value that implements none (a method
	// with a wrong signature). A panic in a hook is recovered and logged
	// at ERROR; the outcome and the ack stand. Default none.
	Hooks []any

	// Logger receives what a consumer does, at the default level: dead
	// letters (WARN), retries (INFO, at most one line per 10 s, with the
	// number left out), database failures (WARN, ERROR for one no retry
	// fixes, at most one line per 10 s with the number left out; INFO when
	// the database answers again after a logged failure), reused IDs
	// (WARN), batches split after a lock conflict (WARN, at most one line
	// per 10 s). Default slog.Default().
	Logger *slog.Logger
}

// Backoff is exponential: the delay after the n-th failed attempt is
// Initial·2^(n-1), at most Max, then moved by a random ±Jitter fraction.
type Backoff struct {
	// Initial is the delay after the first failure. Default 1 s.
	Initial time.Duration
	// Max caps the delay. Default 5 min.
	Max time.Duration
	// Jitter is the random spread as a fraction of the delay, 0 to 1.
	// Default 0.1; negative means none.
	Jitter float64
}

// Delay returns the delay after the attempt-th failed attempt (from 1).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * b.Jitter * float64(d))
	}
	return max(d, 0)
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	switch { // a negative Jitter stays negative, so that defaults apply once
	case b.Jitter == 0:
		b.Jitter = DefaultBackoffJitter
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// ErrInvalidConfig is the sentinel of configuration errors.
var ErrInvalidConfig = errors.New("inbox: invalid config")

// isNil reports whether v, an interface argument (a broker.Source, a store
// driver), is nil or holds a nil pointer, map, func or channel: a
// typed nil, the usual result of ignoring a constructor's error, whose
// methods would panic in a worker.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if err := validateConsumer(out.Consumer); err != nil {
		return out, fmt.Errorf("%w: %v", ErrInvalidConfig, err.(*InvalidMessageError).Reason)
	}
	if out.LockTimeout < 0 || out.MaxAttempts < 0 {
		return out, fmt.Errorf("%w: LockTimeout and MaxAttempts must not be negative", ErrInvalidConfig)
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = DefaultLockTimeout
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MaxTransientFailures == 0 {
		out.MaxTransientFailures = DefaultMaxTransientFailures
	}
	if err := validateHooks("Config.Hooks", out.Hooks, true); err != nil {
		return out, err
	}
	out.Backoff = out.Backoff.withDefaults()
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}
